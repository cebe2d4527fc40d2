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

from benchmarks.constants import LAYERS, REPO_ROOT, RUNS
from benchmarks.processes import Finished, _kill, child_env, run_measured
from benchmarks.projection import concurrent_throughput, fastest, gpu_projection, sweep_grid
from benchmarks.reference import CPU_CLOCK_LAUNCHER, REFERENCE_ARCH, parse_reference_line
from benchmarks.render import efficiency


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
    phase_budget_s: float = 240.0  # with --gpu: each phase stops starting runs once this is spent
    runs: tuple[str, ...] = RUNS  # which of the runs to make (CPU): klue_tc, pretrain, notebook, reference, overhead
    ensemble_members: list[str] = field(default_factory=list)  # sweeps/ensemble_member/ names; none: the sweep's

    @property
    def env(self) -> dict:
        return child_env(self.threads, self.gpu)

    def say(self, message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    def worker_spec(
        self, encoder: str, bucketing: bool, name: str, barrier: Optional[dict] = None, threads: Optional[int] = None
    ) -> dict:
        # On a GPU the bucketed runs use the paper sweep's batch widths (a multiple of 8).
        paper = sweep_grid("paper")
        shapes = [f"data.pad_multiple={paper['pad_multiple']}"] if self.gpu and bucketing else []
        experiment = paper["experiments"].get(encoder)  # its head and sizes as the paper sweep runs it
        return {
            "encoder": encoder,
            "choice": f"+experiment={experiment}" if experiment else f"encoder={encoder}",
            "bucketing": bucketing,
            "layers": LAYERS,
            "data": str(self.data),
            "limit": self.limit,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "threads": threads or self.threads,
            "gpu": self.gpu,
            "cache_dir": str(self.work / "cache"),
            "work_dir": str(self.work / "runs" / name),
            "barrier": barrier,
            "overrides": [*shapes, *self.overrides],
        }

    def _worker(self, name: str, spec: dict):
        """One worker process to the end: its result (None when it failed) and how it finished."""
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
            return None, done
        return json.loads(result_path.read_text()), done

    def _add_process_figures(self, result: dict, done: Finished) -> None:
        """The worker process's wall time and peak memory (the GPU's peak on a GPU run)."""
        result.update(
            wall_s=done.wall_s,
            peak_rss_mb=done.peak_rss_mb,
            peak_mb=result["cuda_peak_mb"] if self.gpu else done.peak_rss_mb,
        )

    def klue_tc_run(self, encoder: str, bucketing: bool) -> Optional[dict]:
        name = f"{encoder}-{'bucketed' if bucketing else 'notebook'}"
        self.say(f"{name}: training ({self.epochs} epoch(s), {self.limit or 'all'} titles) ...")
        result, done = self._worker(name, self.worker_spec(encoder, bucketing, name))
        if result is None:
            return None
        self._add_process_figures(result, done)
        result["monitor_samples_per_s"] = result["samples_per_s"]
        if self.clock == "cpu":
            result["samples_per_s"] = result["cpu_samples_per_s"]
        self.say(
            f"{name}: {result['samples_per_s']:.0f} titles/s, macro-F1 {result['f1']:.4f}, {done.wall_s:.0f} s in all"
        )
        return result

    def pretrain_run(self, encoder: str) -> Optional[dict]:
        """klue_tc's masked-LM pretraining of the same encoder on the same titles, batch, epochs,
        precision and threads as the bucketed fine-tuning run; its titles/s is the loop figure on
        the benchmark's clock (set against fine-tuning's loop figure on the same clock)."""
        name = f"{encoder}-pretrain"
        self.say(f"{name}: masked-LM pretraining ({self.epochs} epoch(s), {self.limit or 'all'} titles) ...")
        result, done = self._worker(name, {**self.worker_spec(encoder, True, name), "kind": "pretrain"})
        if result is None:
            return None
        self._add_process_figures(result, done)
        result["samples_per_s"] = result[loop_key(self.clock)]
        self.say(f"{name}: {result['samples_per_s']:.0f} titles/s, final MLM loss {result['final_loss']:.3f}")
        return result

    def peak_run(self) -> Optional[dict]:
        """A large square matrix product in the training runs' precision, threads and clock."""
        self.say("peak: a square matrix product in the training precision ...")
        spec = {**self.worker_spec(self.encoders[0], True, "peak"), "kind": "peak", "clock": self.clock}
        result, _ = self._worker("peak", spec)
        if result is not None:
            self.say(f"peak: {result['gflops_per_s']:.1f} GFLOP/s ({result['dtype']}, {result['size']}^2)")
        return result

    def ensemble_run(self) -> Optional[dict]:
        """An ensemble's folder served against one fold model (benchmarks/ensemble.py)."""
        from benchmarks.ensemble import sweep_members

        members = self.ensemble_members or sweep_members()
        self.say(
            f"ensemble: serving an ensemble's folder ({', '.join(members)} and the baselines) against one model ..."
        )
        spec = {
            **self.worker_spec(self.encoders[0], True, "ensemble"),  # data, batch, threads, cache
            "kind": "ensemble",
            "members": members,
            "clock": self.clock,
        }
        result, _ = self._worker("ensemble", spec)
        if result is not None:
            self.say(
                f"ensemble: {result['ensemble_titles_per_s']:.0f} titles/s ({result['fold_models']} models), "
                f"one model {result['single_titles_per_s']:.0f} titles/s: {result['slowdown']:.1f}x the time"
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
            [sys.executable, "-c", "import klue_tc.__main__, klue_tc.jobs.run, klue_tc.training.fold"],
            self.env,
            REPO_ROOT,
            self.work,
            "imports",
            self.timeout_s,
        )
        result["startup_s"] = done.wall_s if done.rc == 0 else None
        return result

    def concurrency(self, k: int, solo: Optional[dict[str, float]] = None) -> Optional[dict]:
        """k workers at once on the one GPU, started together, their encoders taken in turn from
        the encoders measured (the sweep's mix), CPU threads split between them: aggregate titles/s,
        and with `solo` (each encoder's titles/s alone) the speed-up over running them one by one."""
        barrier = {"dir": str(self.work / f"barrier-{k}"), "count": k}
        threads = max(1, self.threads // k)
        self.say(f"{k} jobs at once ({threads} CPU thread(s) each) ...")
        procs = []
        for i in range(k):
            encoder = self.encoders[i % len(self.encoders)]
            name = f"parallel{k}-{i}-{encoder}"
            spec = self.worker_spec(encoder, True, name, {**barrier, "name": str(i)}, threads)
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
            self.notes.append(f"{k} concurrent jobs: {k - len(results)} failed; logs: {self.work}/parallel{k}-*.err")
            return None
        result = concurrent_throughput(results, solo)
        speedup = f", {result['speedup']:.2f}x one by one" if result.get("speedup") else ""
        self.say(f"{k} jobs at once: {result['aggregate_samples_per_s']:.0f} titles/s in all{speedup}")
        return result

    def measure(self) -> dict:
        if self.gpu:
            return self.measure_gpu()
        # With --repeat, the runs of an encoder alternate (order reversed every other round) and
        # each keeps its fastest round: interference from other work only ever slows a run.
        # Pretraining runs next to the fine-tuning it is set against.
        every = {
            "klue_tc": lambda enc: self.klue_tc_run(enc, True),
            "pretrain": self.pretrain_run,
            "notebook": lambda enc: self.klue_tc_run(enc, False),
            "reference": self.reference_run,
        }
        runs = {kind: measure for kind, measure in every.items() if kind in self.runs}
        trials = {enc: {kind: [] for kind in runs} for enc in self.encoders}
        peaks = []
        for round_ in range(self.repeat):
            # Once a round, like every run: the fastest round is the peak the training runs are set against.
            peaks.append(self.peak_run())
            for encoder in self.encoders:
                for kind in list(runs) if round_ % 2 == 0 else list(runs)[::-1]:
                    result = runs[kind](encoder)
                    if result is not None:
                        trials[encoder][kind].append(result)
        results = [
            {
                "encoder": enc,
                **{kind: fastest(trials[enc][kind]) if kind in runs else None for kind in every},
                "rounds": {kind: [t["samples_per_s"] for t in trials[enc][kind]] for kind in runs},
            }
            for enc in self.encoders
        ]
        peak = max((p for p in peaks if p), key=lambda p: p["gflops_per_s"], default=None)
        report = {"settings": self.settings(), "results": results, "peak": peak}
        report["peak_rounds"] = [p["gflops_per_s"] if p else None for p in peaks]
        for result in results:
            result["efficiency"] = efficiency(result, peak, self.clock)
        report["overhead"] = self.overhead() if "overhead" in self.runs else {}
        report["ensemble"] = self.ensemble_run() if "ensemble" in self.runs else None
        report["notes"] = self.notes
        return report

    def measure_gpu(self) -> dict:
        """Three phases, each printed as it goes and each starting no run once its budget is spent:
        titles/s per encoder (buckets and one width), k jobs at once, the paper sweep's projection."""
        report = {"settings": self.settings(), "results": [], "concurrency": {}, "overhead": {}}
        with Phase(self, "1/3: titles/s per encoder, length buckets and one width") as phase:
            for encoder in self.encoders:
                row = {"encoder": encoder, "reference": None}
                row["klue_tc"] = phase.run(f"{encoder} bucketed", self.klue_tc_run, encoder, True)
                row["notebook"] = phase.run(f"{encoder} one width", self.klue_tc_run, encoder, False)
                row["pretrain"] = phase.run(f"{encoder} pretraining", self.pretrain_run, encoder)
                report["results"].append(row)
            report["peak"] = phase.run("peak", self.peak_run)
            for row in report["results"]:
                row["efficiency"] = efficiency(row, report["peak"], self.clock)
        solo = {
            r["encoder"]: r["klue_tc"].get("loop_samples_per_s") or r["klue_tc"]["samples_per_s"]
            for r in report["results"]
            if r.get("klue_tc")
        }
        with Phase(self, f"2/3: {', '.join(map(str, self.parallel))} jobs at once on one GPU") as phase:
            for k in self.parallel:
                report["concurrency"][k] = phase.run(f"{k} jobs at once", self.concurrency, k, solo)
        with Phase(self, "3/3: per-job overhead and the paper sweep's projected wall time") as phase:
            cache = self.work / "overhead-cache"
            report["overhead"]["first"] = phase.run("main job", self.overhead_run, "main-first", cache)
            report["overhead"]["cached"] = phase.run("main job", self.overhead_run, "main-cached", cache)
            report["projection"] = gpu_projection(report)
            for line in projection_summary(report["projection"]):
                self.say(line)
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
            "runs": list(self.runs),
        }

    def device_name(self) -> str:
        if not self.gpu:
            return f"CPU ({len(os.sched_getaffinity(0))} cores available, {self.threads} torch threads)"
        import torch

        return f"{torch.cuda.get_device_name(0)} (bf16-mixed)"


def loop_key(clock: str) -> str:
    """The loop titles/s field (step end to step end, batch assembly included) on a clock."""
    return "loop_cpu_samples_per_s" if clock == "cpu" else "loop_samples_per_s"


class Phase:
    """One timed phase of `make bench-gpu`: runs start only while its budget lasts, and each run's
    timeout is what is left of it, so a phase ends within its budget."""

    def __init__(self, bench: Bench, title: str):
        self.bench, self.title = bench, title

    def __enter__(self) -> Phase:
        self.started = time.monotonic()
        self.bench.say(f"phase {self.title} (budget {self.bench.phase_budget_s:.0f} s)")
        return self

    def left_s(self) -> float:
        return self.bench.phase_budget_s - (time.monotonic() - self.started)

    def run(self, label: str, measure, *args):
        if self.left_s() <= 0:
            self.bench.notes.append(f"phase {self.title.split(':')[0]}: its budget was spent before {label}: not run")
            self.bench.say(f"{label}: skipped (phase budget spent)")
            return None
        saved, self.bench.timeout_s = self.bench.timeout_s, min(self.bench.timeout_s, self.left_s())
        try:
            return measure(*args)
        finally:
            self.bench.timeout_s = saved

    def __exit__(self, *exc) -> None:
        self.bench.say(f"phase {self.title.split(':')[0]} done in {time.monotonic() - self.started:.0f} s")


def projection_summary(projection: dict) -> list[str]:
    """The projection's headline, one line each: one by one, and at the best concurrency."""
    minutes = [f"paper sweep ({projection['jobs']} jobs), one by one: {projection['sequential_s'] / 60:.1f} min"]
    best = projection.get("best_parallel")
    if best:
        minutes.append(f"paper sweep at {best} jobs at once: {projection['parallel_s'][best] / 60:.1f} min")
    return minutes
