"""The Bench: every run of the benchmark (klue_tc, notebook path, seed_reference, main job, concurrency)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from benchmarks.constants import LAYERS, REPO_ROOT
from benchmarks.processes import _kill, child_env, run_measured
from benchmarks.projection import concurrent_throughput, fastest, gpu_projection
from benchmarks.reference import CPU_CLOCK_LAUNCHER, REFERENCE_ARCH, parse_reference_line


@dataclass
class Bench:
    data: Path
    limit: Optional[int]
    epochs: int
    batch_size: int
    encoders: list[str]
    reference: Optional[Path]
    threads: int
    gpu: bool
    work: Path
    timeout_s: float
    parallel: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    repeat: int = 1
    clock: str = "wall"

    @property
    def env(self) -> dict:
        return child_env(self.threads, self.gpu)

    def say(self, message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    def worker_spec(self, encoder: str, bucketing: bool, name: str, barrier: Optional[dict] = None) -> dict:
        return {
            "encoder": encoder,
            "bucketing": bucketing,
            "layers": LAYERS,
            "data": str(self.data),
            "limit": self.limit,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "gpu": self.gpu,
            "cache_dir": str(self.work / "cache"),
            "work_dir": str(self.work / "runs" / name),
            "barrier": barrier,
            "overrides": self.overrides,
        }

    def klue_tc_run(self, encoder: str, bucketing: bool) -> Optional[dict]:
        name = f"{encoder}-{'bucketed' if bucketing else 'notebook'}"
        self.say(f"{name}: training ({self.epochs} epoch(s), {self.limit or 'all'} titles) ...")
        spec = self.worker_spec(encoder, bucketing, name)
        spec_path, result_path = self.work / f"{name}.spec.json", self.work / f"{name}.result.json"
        spec_path.write_text(json.dumps(spec))
        done = run_measured(
            [sys.executable, "-m", "benchmarks", "--worker", str(spec_path), "--worker-out", str(result_path)],
            self.env,
            REPO_ROOT,
            self.work,
            name,
            self.timeout_s,
        )
        if done.rc != 0 or not result_path.is_file():
            self.say(f"{name}: FAILED (exit {done.rc}{', timed out' if done.timed_out else ''})\n{done.tail()}")
            self.notes.append(f"{name} failed (exit {done.rc}); log: {self.work / name}.err")
            return None
        result = json.loads(result_path.read_text())
        result.update(
            wall_s=done.wall_s,
            peak_rss_mb=done.peak_rss_mb,
            peak_mb=result["cuda_peak_mb"] if self.gpu else done.peak_rss_mb,
            monitor_samples_per_s=result["samples_per_s"],
        )
        if self.clock == "cpu":
            result["samples_per_s"] = result["cpu_samples_per_s"]
        self.say(
            f"{name}: {result['samples_per_s']:.0f} titles/s, macro-F1 {result['f1']:.4f}, {done.wall_s:.0f} s in all"
        )
        return result

    def reference_run(self, encoder: str) -> Optional[dict]:
        arch = REFERENCE_ARCH.get(encoder)
        if arch is None or self.reference is None or self.gpu:
            return None
        name = f"{encoder}-seed_reference"
        self.say(f"{name}: training (--arch {arch}) ...")
        # --clock cpu: seed_reference's own timer reads the process CPU clock instead of the wall clock.
        launcher = [sys.executable, "-c", CPU_CLOCK_LAUNCHER] if self.clock == "cpu" else [sys.executable]
        cmd = [
            *launcher,
            str(self.reference),
            "--train",
            str(self.data),
            "--arch",
            arch,
            "--layers",
            str(LAYERS),
            "--epochs",
            str(self.epochs),
            "--limit",
            str(self.limit or 0),
            "--batch-size",
            str(self.batch_size),
            "--threads",
            str(self.threads),
        ]
        done = run_measured(cmd, self.env, REPO_ROOT, self.work, name, self.timeout_s)
        try:
            parsed = parse_reference_line(done.stdout)
        except ValueError:
            self.say(f"{name}: FAILED (exit {done.rc})\n{done.tail()}")
            self.notes.append(f"{name} failed (exit {done.rc}); log: {self.work / name}.err")
            return None
        result = {
            "samples_per_s": float(parsed["samples_per_s"]),
            "f1": float(parsed["eval_macro_f1"]),
            "train_s": parsed.get("train_s"),
            "n": parsed.get("n"),
            "max_len": parsed.get("max_len"),
            "wall_s": done.wall_s,
            "peak_rss_mb": done.peak_rss_mb,
            "peak_mb": done.peak_rss_mb,
            "command": shlex.join(cmd),
        }
        self.say(f"{name}: {result['samples_per_s']:.0f} titles/s, macro-F1 {result['f1']:.4f}")
        return result

    def overhead_run(self, name: str, cache: Path) -> Optional[dict]:
        """The real main job, one fold, 2 training batches: its time to first step from metrics.json."""
        run_dir = self.work / name
        cmd = [
            sys.executable,
            "-m",
            "klue_tc",
            "+experiment=transformer",
            f"data.path={self.data}",
            "cv.fold=0",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=2",
            "logger=none",
            "trainer.progress_bar=none",
            f"trainer.accelerator={'gpu' if self.gpu else 'cpu'}",
            "trainer.devices=1",
            f"data.cache_dir={cache}",
            f"results.dir={run_dir / 'results'}",
            "results.resume=false",
            f"hydra.run.dir={run_dir}",
        ]
        self.say(f"main job ({name}): python -m klue_tc ... trainer.limit_train_batches=2 ...")
        done = run_measured(cmd, self.env, REPO_ROOT, self.work, name, self.timeout_s)
        metrics = run_dir / "metrics.json"
        if done.rc != 0 or not metrics.is_file():
            self.say(f"main job ({name}): FAILED (exit {done.rc})\n{done.tail()}")
            self.notes.append(f"main job {name} failed (exit {done.rc}); log: {self.work / name}.err")
            return None
        fold = json.loads(metrics.read_text())["folds"][0]
        result = {
            "time_to_first_step_s": fold.get("time_to_first_step_s"),
            "wall_s": done.wall_s,
            "peak_rss_mb": done.peak_rss_mb,
            "train_size": fold.get("train_size"),
            "command": shlex.join(["python", "-m", "klue_tc", *cmd[3:]]),
        }
        self.say(
            f"main job ({name}): first step at {result['time_to_first_step_s']:.2f} s after job start; "
            f"{done.wall_s:.1f} s in all"
        )
        return result

    def overhead(self) -> dict:
        cache = self.work / "overhead-cache"  # fresh: the first job fits and encodes, the second loads
        result = {"first": self.overhead_run("main-first", cache), "cached": self.overhead_run("main-cached", cache)}
        # What happens before the job starts (and FoldMonitor's clock with it): interpreter and imports.
        done = run_measured(
            [sys.executable, "-c", "import klue_tc.__main__, klue_tc.run, klue_tc.training"],
            self.env,
            REPO_ROOT,
            self.work,
            "imports",
            self.timeout_s,
        )
        result["startup_s"] = done.wall_s if done.rc == 0 else None
        return result

    def concurrency(self, encoder: str, k: int) -> Optional[dict]:
        """k identical workers at once on the one GPU, started together: aggregate titles/s."""
        barrier = {"dir": str(self.work / f"barrier-{encoder}-{k}"), "count": k}
        procs = []
        for i in range(k):
            name = f"{encoder}-parallel{k}-{i}"
            spec = self.worker_spec(encoder, True, name, {**barrier, "name": str(i)})
            spec_path, result_path = self.work / f"{name}.spec.json", self.work / f"{name}.result.json"
            spec_path.write_text(json.dumps(spec))
            with open(self.work / f"{name}.out", "wb") as out, open(self.work / f"{name}.err", "wb") as err:
                procs.append(
                    (
                        subprocess.Popen(
                            [
                                sys.executable,
                                "-m",
                                "benchmarks",
                                "--worker",
                                str(spec_path),
                                "--worker-out",
                                str(result_path),
                            ],
                            stdout=out,
                            stderr=err,
                            env=self.env,
                            cwd=str(REPO_ROOT),
                            start_new_session=True,
                        ),
                        result_path,
                    )
                )
        results, deadline = [], time.monotonic() + self.timeout_s
        try:
            for proc, _ in procs:
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _kill(proc)
                    proc.wait()
        except BaseException:
            for proc, _ in procs:
                _kill(proc)
            raise
        for proc, result_path in procs:
            if proc.returncode == 0 and result_path.is_file():
                results.append(json.loads(result_path.read_text()))
        if len(results) < k:
            self.notes.append(f"{encoder} with {k} concurrent jobs: {k - len(results)} failed")
            return None
        return concurrent_throughput(results)

    def measure(self) -> dict:
        # With --repeat, the three runs of an encoder alternate (order reversed every other round)
        # and each keeps its fastest round: interference from other work only ever slows a run.
        runs = {
            "klue_tc": lambda enc: self.klue_tc_run(enc, True),
            "notebook": lambda enc: self.klue_tc_run(enc, False),
            "reference": self.reference_run,
        }
        trials = {enc: {kind: [] for kind in runs} for enc in self.encoders}
        for round_ in range(self.repeat):
            for encoder in self.encoders:
                for kind in list(runs) if round_ % 2 == 0 else list(runs)[::-1]:
                    result = runs[kind](encoder)
                    if result is not None:
                        trials[encoder][kind].append(result)
        results = [
            {
                "encoder": enc,
                **{kind: fastest(trials[enc][kind]) for kind in runs},
                "rounds": {kind: [t["samples_per_s"] for t in trials[enc][kind]] for kind in runs},
            }
            for enc in self.encoders
        ]
        report = {"settings": self.settings(), "results": results, "overhead": self.overhead()}
        if self.gpu:
            report["concurrency"] = {enc: {k: self.concurrency(enc, k) for k in self.parallel} for enc in self.encoders}
            report["projection"] = gpu_projection(report)
        report["notes"] = self.notes
        return report

    def settings(self) -> dict:
        return {
            "data": str(self.data),
            "limit": self.limit,
            "gpu": self.gpu,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "layers": LAYERS,
            "threads": self.threads,
            "device": self.device_name(),
            "reference": str(self.reference) if self.reference else None,
            "encoders": self.encoders,
            "overrides": self.overrides,
            "repeat": self.repeat,
            "clock": self.clock,
        }

    def device_name(self) -> str:
        if not self.gpu:
            return f"CPU ({len(os.sched_getaffinity(0))} cores available, {self.threads} torch threads)"
        import torch

        return f"{torch.cuda.get_device_name(0)} (bf16-mixed)"
