"""Training throughput and macro-F1 against the original notebook's design; sweep overhead; GPU projection.

    python -m klue_tc.bench [--limit 5000] [--epochs 1] [--encoders transformer,trans_blstm,...]
    python -m klue_tc.bench --gpu          # the same on CUDA, then the paper sweep's projected wall time

Each encoder (3 layers, the experiments' sizes) is trained three ways on the same titles, each
in a fresh subprocess with the same torch thread count:

- klue_tc: klue_tc's own path (``prepare_fold`` + ``train_fold``), ``data.bucketing=true``;
- notebook path: the same with ``data.bucketing=false`` (every title padded to the longest
  training title, no buckets: the original notebook's data path);
- seed_reference: ``../shared/bench/seed_reference.py`` (the notebook's design as a plain torch
  loop), where it is present and has that architecture.

The training split is seed_reference's own (a stratified 10% of --data held out with
random_state=0, then --limit titles sampled from the rest with random_state=0), so all three
train on the same titles and are scored on the same held-out titles. Titles/s is FoldMonitor's
``train_samples_per_s``, the figure ``metrics.json`` reports. Sweep overhead is measured by
running the real main job (``python -m klue_tc``) twice, with a fresh cache and then cached.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = (REPO_ROOT / ".." / "shared" / "data" / "klue-ynat-v1.1" / "train.tsv").resolve()
DEFAULT_REFERENCE = (REPO_ROOT / ".." / "shared" / "bench" / "seed_reference.py").resolve()
# Runs seed_reference.py unchanged, except that its timer (time.perf_counter) reads the process CPU clock.
CPU_CLOCK_LAUNCHER = ("import runpy, sys, time; time.perf_counter = time.process_time; sys.argv = sys.argv[1:]; "
                      "runpy.run_path(sys.argv[0], run_name='__main__')")
ENCODERS = ("transformer", "trans_blstm", "trans_blstm_parallel", "cnn")
# seed_reference.py's --arch for the encoders it implements; the others have no reference.
REFERENCE_ARCH = {"transformer": "post_ln", "trans_blstm": "trans_blstm"}
LAYERS = 3
DASH = "—"
# Targets of issue 6: klue_tc titles/s over seed_reference's, per encoder; cached time to first step.
TARGET_SPEEDUP = {"transformer": 3.0, "trans_blstm": 2.0}
TARGET_CACHED_FIRST_STEP_S = 2.0
# The paper sweep (sweeps/paper.yaml): 4 encoders x 2 LN x 5 layer counts x 3 tokenizers x 5 folds.
PAPER_GRID = {"encoders": ENCODERS, "lns": 2, "layers": (2, 3, 4, 5, 6), "tokenizers": 3, "folds": 5}
YNAT_TRAIN_TITLES = 45_678


# ----------------------------------------------------------------------------- pure pieces

def parse_reference_line(text: str) -> dict:
    """The `key=value ...` result line seed_reference.py prints (the last one in `text`)."""
    lines = [line for line in text.splitlines() if "samples_per_s=" in line]
    if not lines:
        raise ValueError("no result line (arch=... samples_per_s=... eval_macro_f1=...) in seed_reference's output")
    result = {}
    for key, value in re.findall(r"(\w+)=(\S+)", lines[-1]):
        try:
            number = float(value)
            result[key] = int(number) if re.fullmatch(r"-?\d+", value) else number
        except ValueError:
            result[key] = value
    return result


def reference_split(labels, limit: Optional[int], seed: int = 0):
    """seed_reference.py's split, by index: a stratified 10% held out, then `limit` training
    titles sampled from the rest (both with random_state=seed). Returns (train, held_out) in
    seed_reference's own order."""
    import pandas as pd

    from klue_tc.data import stratified_holdout

    train, held_out = stratified_holdout(labels, 0.1, seed)
    if limit:
        if limit > len(train):
            raise ValueError(f"--limit {limit} is more than the {len(train)} titles left after the 10% hold-out")
        train = pd.Series(train).sample(limit, random_state=seed).to_numpy()
    return train, held_out


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    if numerator is None or denominator is None or not denominator or _nan(numerator) or _nan(denominator):
        return None
    return numerator / denominator


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def fmt(value, spec: str = ".0f", suffix: str = "") -> str:
    if value is None or _nan(value):
        return DASH
    return f"{value:{spec}}{suffix}"


def fmt_seconds(seconds: Optional[float]) -> str:
    if seconds is None or _nan(seconds):
        return DASH
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


TABLE_HEADER = (
    "encoder", "klue_tc titles/s", "notebook-path titles/s", "seed_reference titles/s",
    "klue_tc / seed_reference", "klue_tc / notebook-path",
    "macro-F1 (klue_tc / notebook-path / seed_reference)",
    "peak memory MB (klue_tc / notebook-path / seed_reference)",
)


def table_rows(results: Sequence[dict]) -> list[list[str]]:
    """One row per encoder from {"encoder", "klue_tc", "notebook", "reference"} run records
    (each None when not run, else with samples_per_s, f1, peak_mb)."""
    rows = []
    for r in results:
        runs = [r.get("klue_tc"), r.get("notebook"), r.get("reference")]
        speeds = [run.get("samples_per_s") if run else None for run in runs]
        rows.append([
            r["encoder"],
            *(fmt(s) for s in speeds),
            fmt(ratio(speeds[0], speeds[2]), ".2f", "x"),
            fmt(ratio(speeds[0], speeds[1]), ".2f", "x"),
            " / ".join(fmt(run.get("f1") if run else None, ".4f") for run in runs),
            " / ".join(fmt(run.get("peak_mb") if run else None, ".0f") for run in runs),
        ])
    return rows


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def target_checks(results: Sequence[dict], overhead: Optional[dict]) -> list[tuple[str, Optional[bool], str]]:
    """(target, met or None when not measured, detail) for issue 6's targets."""
    checks = []
    for r in results:
        goal = TARGET_SPEEDUP.get(r["encoder"])
        if goal is None:
            continue
        ours, ref = r.get("klue_tc") or {}, r.get("reference") or {}
        speedup = ratio(ours.get("samples_per_s"), ref.get("samples_per_s"))
        checks.append((f"{r['encoder']}: titles/s >= {goal:g}x seed_reference",
                       None if speedup is None else speedup >= goal, fmt(speedup, ".2f", "x")))
        f1, ref_f1 = ours.get("f1"), ref.get("f1")
        met = None if f1 is None or ref_f1 is None else f1 >= ref_f1
        checks.append((f"{r['encoder']}: macro-F1 >= seed_reference's", met,
                       f"{fmt(f1, '.4f')} vs {fmt(ref_f1, '.4f')}"))
    cached = (overhead or {}).get("cached", {}).get("time_to_first_step_s")
    checks.append((f"cached job: time to first step < {TARGET_CACHED_FIRST_STEP_S:g} s",
                   None if cached is None else cached < TARGET_CACHED_FIRST_STEP_S, fmt(cached, ".2f", " s")))
    return checks


def project_sweep(titles_per_s: dict[str, float], eval_titles_per_s: dict[str, float], *, epochs: int,
                  overhead_s: float, n_titles: int = YNAT_TRAIN_TITLES, folds: int = 5, lns: int = 2,
                  tokenizers: int = 3, layers: Sequence[int] = (2, 3, 4, 5, 6), measured_layers: int = LAYERS,
                  parallel_speedup: Optional[dict[int, dict[str, float]]] = None) -> dict:
    """Wall time of a grid of single-fold jobs (encoder x LN x layers x tokenizer x fold).

    Each job trains on (folds-1)/folds of `n_titles` for `epochs` epochs and validates on the
    rest after every epoch. Training and validation times come from the titles/s measured at
    `measured_layers` layers, scaled by layers/measured_layers (the encoder stack dominates);
    `overhead_s` (start-up to first step, and the end of the job) is added per job.
    With k jobs at once on one GPU, the GPU part runs `parallel_speedup[k][encoder]` times
    faster in aggregate, and the per-job overhead (CPU) overlaps k-fold.
    """
    train_titles = n_titles * (folds - 1) / folds
    val_titles = n_titles / folds
    repeats = lns * tokenizers * folds
    per_job, gpu_total, overhead_total, jobs = {}, {}, 0.0, 0
    for encoder, speed in titles_per_s.items():
        eval_speed = eval_titles_per_s.get(encoder)
        per_job[encoder], gpu_total[encoder] = {}, 0.0
        for n_layers in layers:
            scale = n_layers / measured_layers
            train_s = epochs * train_titles / speed * scale
            val_s = epochs * val_titles / eval_speed * scale if eval_speed else 0.0
            per_job[encoder][n_layers] = train_s + val_s + overhead_s
            gpu_total[encoder] += (train_s + val_s) * repeats
            overhead_total += overhead_s * repeats
            jobs += repeats
    sequential = sum(gpu_total.values()) + overhead_total
    parallel = {}
    for k, speedups in sorted((parallel_speedup or {}).items()):
        parallel[k] = sum(total / speedups.get(encoder, 1.0) for encoder, total in gpu_total.items()) + overhead_total / k
    return {"jobs": jobs, "epochs": epochs, "train_titles": train_titles, "val_titles": val_titles,
            "per_job_s": per_job, "sequential_s": sequential, "parallel_s": parallel}


def grid_axis(spec) -> list[str]:
    """Values of one Hydra sweeper axis: `a,b,c`, `range(a,b[,step])` or a YAML list."""
    if isinstance(spec, (list, tuple)):
        return [str(v) for v in spec]
    text = str(spec).strip()
    match = re.fullmatch(r"range\((-?\d+)\s*,\s*(-?\d+)(?:\s*,\s*(-?\d+))?\)", text)
    if match:
        start, stop, step = int(match[1]), int(match[2]), int(match[3] or 1)
        return [str(v) for v in range(start, stop, step)]
    return [v.strip() for v in text.split(",") if v.strip()]


def paper_sweep_settings(repo: Path = REPO_ROOT) -> dict:
    """max_epochs and layer counts of sweeps/paper.yaml (else conf/trainer/default.yaml, the issue's grid)."""
    from omegaconf import OmegaConf

    settings = {"epochs": None, "layers": PAPER_GRID["layers"], "jobs_in_file": None, "source": None}
    default = repo / "conf" / "trainer" / "default.yaml"
    if default.is_file():
        settings["epochs"] = int(OmegaConf.load(default).get("max_epochs", 10))
        settings["source"] = str(default.relative_to(repo))
    paper = repo / "sweeps" / "paper.yaml"
    if paper.is_file():
        cfg = OmegaConf.to_container(OmegaConf.load(paper), resolve=False)
        params = ((cfg.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
        epochs = params.get("trainer.max_epochs") or (cfg.get("trainer") or {}).get("max_epochs")
        if epochs is not None and len(grid_axis(epochs)) == 1:
            settings["epochs"], settings["source"] = int(grid_axis(epochs)[0]), str(paper.relative_to(repo))
        if "encoder.layers" in params:
            settings["layers"] = tuple(int(v) for v in grid_axis(params["encoder.layers"]))
        if params:
            jobs = 1
            for spec in params.values():
                jobs *= len(grid_axis(spec))
            settings["jobs_in_file"] = jobs
    settings["epochs"] = settings["epochs"] or 10
    return settings


# ----------------------------------------------------------------------------- subprocesses

@dataclass
class Finished:
    rc: int
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str
    timed_out: bool = False

    def tail(self, lines: int = 15) -> str:
        return "\n".join((self.stdout + "\n" + self.stderr).strip().splitlines()[-lines:])


def run_measured(cmd: Sequence[str], env: dict, cwd: Path, log_dir: Path, name: str,
                 timeout_s: float) -> Finished:
    """Run `cmd` to the end; its own wall time and peak RSS (os.wait4's rusage of that child)."""
    out_path, err_path = log_dir / f"{name}.out", log_dir / f"{name}.err"
    start = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env, cwd=str(cwd), start_new_session=True)
        try:
            status, usage, timed_out = _wait(proc, timeout_s)
        except BaseException:  # interrupted: end the run we started (its own session) before leaving
            _kill(proc)
            raise
    wall = time.perf_counter() - start
    rc = os.waitstatus_to_exitcode(status)
    return Finished(rc, wall, usage.ru_maxrss / 1024, out_path.read_text(errors="replace"),
                    err_path.read_text(errors="replace"), timed_out)


def _wait(proc: subprocess.Popen, timeout_s: float):
    deadline, timed_out = time.monotonic() + timeout_s, False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
            return status, usage, timed_out
        if time.monotonic() > deadline and not timed_out:
            timed_out = True
            _kill(proc)
        time.sleep(0.05)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL a run we started: its own session, so it and its children only."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def child_env(threads: int, gpu: bool) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1",
               WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


# ----------------------------------------------------------------------------- worker (one measured training)

def compose_run(overrides: Sequence[str]):
    """The RunConfig that `python -m klue_tc <overrides>` would run (same conf/, same schemas)."""
    from hydra import compose, initialize_config_dir

    from klue_tc.config import register_schemas, validate

    register_schemas()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return validate(compose(config_name="config", overrides=list(overrides)))


def run_overrides(spec: dict) -> list[str]:
    return [
        f"+experiment={spec['encoder']}", f"encoder.layers={spec.get('layers', LAYERS)}",
        "tokenizer=sentencepiece", "tokenizer.vocab_size=6000",
        f"data.batch_size={spec['batch_size']}", f"data.bucketing={str(spec['bucketing']).lower()}",
        f"data.cache_dir={spec['cache_dir']}",
        f"trainer.max_epochs={spec['epochs']}", f"trainer.early_stopping_patience={spec['epochs']}",
        f"trainer.accelerator={'gpu' if spec['gpu'] else 'cpu'}", "trainer.devices=1", "trainer.progress_bar=none",
        "logger=none", *spec.get("overrides", []),
    ]


def _loop_timer_class():
    import lightning as L
    import torch

    def sync(trainer):
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()

    class LoopTimer(L.Callback):
        """Wall time of the training loops as a whole (steps, batch assembly, hooks; no validation),
        the first step excluded; validation time; absolute start/end for concurrent runs."""

        def __init__(self):
            self.steps, self.loop_seconds, self.loop_samples = 0, 0.0, 0
            self.val_seconds, self.val_samples, self.val_runs = 0.0, 0, 0
            self.first_start_wall = self.last_end_wall = None
            self.last_f1, self.f1_by_epoch = None, []
            self._mark = self._val_t0 = self._cpu0 = 0.0
            self.cpu_seconds = 0.0

        def on_train_epoch_start(self, trainer, pl_module):
            self._mark = time.perf_counter()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.first_start_wall is None:
                self.first_start_wall = time.time()
            self._cpu0 = time.process_time()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            sync(trainer)
            now = time.perf_counter()
            self.steps += 1
            if self.steps > 1:
                self.loop_seconds += now - self._mark
                self.loop_samples += len(batch["input_ids"])
                self.cpu_seconds += time.process_time() - self._cpu0
            self._mark, self.last_end_wall = now, time.time()

        def on_validation_start(self, trainer, pl_module):
            sync(trainer)
            self._val_t0 = time.perf_counter()

        def on_validation_end(self, trainer, pl_module):
            if trainer.sanity_checking:
                return
            sync(trainer)
            self.val_seconds += time.perf_counter() - self._val_t0
            self.val_samples += len(trainer.datamodule.val.encoded)
            self.val_runs += 1
            self.last_f1 = float(trainer.callback_metrics["val/f1"])
            self.f1_by_epoch.append(self.last_f1)

    return LoopTimer


def run_worker(spec: dict) -> dict:
    """One measured training in this (fresh) process: klue_tc's prepare_fold + train_fold."""
    job_start = time.perf_counter()
    import numpy as np
    import torch

    torch.set_num_threads(spec["threads"])
    from klue_tc import fold as fold_module
    from klue_tc.data import LabelledTitles, read_labelled_file
    from klue_tc.tokenizers import TokenizerCache

    run = compose_run(run_overrides(spec))
    full = read_labelled_file(spec["data"])
    train_idx, held_idx = reference_split(full.labels, spec["limit"])
    order = np.concatenate([train_idx, held_idx])
    data = LabelledTitles([full.texts[i] for i in order], full.labels[order], full.source)
    n_train = len(train_idx)
    prepared = fold_module.prepare_fold(run, data, np.arange(n_train), np.arange(n_train, len(order)),
                                        TokenizerCache(spec["cache_dir"]))

    # One extra callback beside train_fold's own (FoldMonitor etc.): the trainer is otherwise unchanged.
    timer = _loop_timer_class()()
    make_trainer = fold_module.make_trainer
    fold_module.make_trainer = lambda cfg, fold_dir, logger, callbacks, **kwargs: make_trainer(
        cfg, fold_dir, logger, [*callbacks, timer], **kwargs)
    if spec.get("barrier"):
        _barrier(Path(spec["barrier"]["dir"]), spec["barrier"]["count"], spec["barrier"]["name"])
    record = fold_module.train_fold(run, 0, prepared, Path(spec["work_dir"]), None, job_start)
    lengths = prepared.train.encoded.lengths
    import resource

    return {
        "encoder": spec["encoder"], "bucketing": spec["bucketing"], "layers": run.encoder.layers,
        "head": run.head.name.value, "precision": fold_module.default_precision(run.trainer),
        "samples_per_s": record["train_samples_per_s"],
        "loop_samples_per_s": timer.loop_samples / timer.loop_seconds if timer.loop_seconds else None,
        # The same steps as FoldMonitor's, on the process CPU clock: with one thread, a measure that
        # time-slicing with other work on a shared machine does not distort.
        "cpu_samples_per_s": timer.loop_samples / timer.cpu_seconds if timer.cpu_seconds else None,
        "eval_samples_per_s": timer.val_samples / timer.val_seconds if timer.val_seconds else None,
        "f1": timer.last_f1, "f1_by_epoch": timer.f1_by_epoch, "best_f1": record["f1"], "best_epoch": record["best_epoch"],
        "epochs_run": record["epochs_run"], "steps": timer.steps, "train_size": record["train_size"],
        "val_size": record["val_size"], "vocab_size": prepared.tokenizer.vocab_size,
        "max_len": int(lengths.max()), "mean_len": float(lengths.mean()),
        "train_start_wall": timer.first_start_wall, "train_end_wall": timer.last_end_wall,
        "trained_samples": timer.loop_samples,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() and spec["gpu"] else None,
        "self_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(),
    }


def _barrier(directory: Path, count: int, name: str, timeout_s: float = 600) -> None:
    """Start training only when all `count` concurrent workers are ready (concurrency runs)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.ready").touch()
    deadline = time.monotonic() + timeout_s
    while len(list(directory.glob("*.ready"))) < count and time.monotonic() < deadline:
        time.sleep(0.02)


# ----------------------------------------------------------------------------- orchestration

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
        return {"encoder": encoder, "bucketing": bucketing, "layers": LAYERS, "data": str(self.data),
                "limit": self.limit, "epochs": self.epochs, "batch_size": self.batch_size,
                "threads": self.threads, "gpu": self.gpu, "cache_dir": str(self.work / "cache"),
                "work_dir": str(self.work / "runs" / name), "barrier": barrier, "overrides": self.overrides}

    def klue_tc_run(self, encoder: str, bucketing: bool) -> Optional[dict]:
        name = f"{encoder}-{'bucketed' if bucketing else 'notebook'}"
        self.say(f"{name}: training ({self.epochs} epoch(s), {self.limit or 'all'} titles) ...")
        spec = self.worker_spec(encoder, bucketing, name)
        spec_path, result_path = self.work / f"{name}.spec.json", self.work / f"{name}.result.json"
        spec_path.write_text(json.dumps(spec))
        done = run_measured([sys.executable, "-m", "klue_tc.bench", "--worker", str(spec_path), "--worker-out",
                             str(result_path)], self.env, REPO_ROOT, self.work, name, self.timeout_s)
        if done.rc != 0 or not result_path.is_file():
            self.say(f"{name}: FAILED (exit {done.rc}{', timed out' if done.timed_out else ''})\n{done.tail()}")
            self.notes.append(f"{name} failed (exit {done.rc}); log: {self.work / name}.err")
            return None
        result = json.loads(result_path.read_text())
        result.update(wall_s=done.wall_s, peak_rss_mb=done.peak_rss_mb,
                      peak_mb=result["cuda_peak_mb"] if self.gpu else done.peak_rss_mb,
                      monitor_samples_per_s=result["samples_per_s"])
        if self.clock == "cpu":
            result["samples_per_s"] = result["cpu_samples_per_s"]
        self.say(f"{name}: {result['samples_per_s']:.0f} titles/s, macro-F1 {result['f1']:.4f}, "
                 f"{done.wall_s:.0f} s in all")
        return result

    def reference_run(self, encoder: str) -> Optional[dict]:
        arch = REFERENCE_ARCH.get(encoder)
        if arch is None or self.reference is None or self.gpu:
            return None
        name = f"{encoder}-seed_reference"
        self.say(f"{name}: training (--arch {arch}) ...")
        # --clock cpu: seed_reference's own timer reads the process CPU clock instead of the wall clock.
        launcher = [sys.executable, "-c", CPU_CLOCK_LAUNCHER] if self.clock == "cpu" else [sys.executable]
        cmd = [*launcher, str(self.reference), "--train", str(self.data), "--arch", arch, "--layers", str(LAYERS),
               "--epochs", str(self.epochs), "--limit", str(self.limit or 0), "--batch-size", str(self.batch_size),
               "--threads", str(self.threads)]
        done = run_measured(cmd, self.env, REPO_ROOT, self.work, name, self.timeout_s)
        try:
            parsed = parse_reference_line(done.stdout)
        except ValueError:
            self.say(f"{name}: FAILED (exit {done.rc})\n{done.tail()}")
            self.notes.append(f"{name} failed (exit {done.rc}); log: {self.work / name}.err")
            return None
        result = {"samples_per_s": float(parsed["samples_per_s"]), "f1": float(parsed["eval_macro_f1"]),
                  "train_s": parsed.get("train_s"), "n": parsed.get("n"), "max_len": parsed.get("max_len"),
                  "wall_s": done.wall_s, "peak_rss_mb": done.peak_rss_mb, "peak_mb": done.peak_rss_mb,
                  "command": shlex.join(cmd)}
        self.say(f"{name}: {result['samples_per_s']:.0f} titles/s, macro-F1 {result['f1']:.4f}")
        return result

    def overhead_run(self, name: str, cache: Path) -> Optional[dict]:
        """The real main job, one fold, 2 training batches: its time to first step from metrics.json."""
        run_dir = self.work / name
        cmd = [sys.executable, "-m", "klue_tc", "+experiment=transformer", f"data.path={self.data}", "cv.fold=0",
               "trainer.max_epochs=1", "trainer.limit_train_batches=2", "logger=none", "trainer.progress_bar=none",
               f"trainer.accelerator={'gpu' if self.gpu else 'cpu'}", "trainer.devices=1",
               f"data.cache_dir={cache}", f"results.dir={run_dir / 'results'}", "results.resume=false",
               f"hydra.run.dir={run_dir}"]
        self.say(f"main job ({name}): python -m klue_tc ... trainer.limit_train_batches=2 ...")
        done = run_measured(cmd, self.env, REPO_ROOT, self.work, name, self.timeout_s)
        metrics = run_dir / "metrics.json"
        if done.rc != 0 or not metrics.is_file():
            self.say(f"main job ({name}): FAILED (exit {done.rc})\n{done.tail()}")
            self.notes.append(f"main job {name} failed (exit {done.rc}); log: {self.work / name}.err")
            return None
        fold = json.loads(metrics.read_text())["folds"][0]
        result = {"time_to_first_step_s": fold.get("time_to_first_step_s"), "wall_s": done.wall_s,
                  "peak_rss_mb": done.peak_rss_mb, "train_size": fold.get("train_size"),
                  "command": shlex.join(["python", "-m", "klue_tc", *cmd[3:]])}
        self.say(f"main job ({name}): first step at {result['time_to_first_step_s']:.2f} s after job start; "
                 f"{done.wall_s:.1f} s in all")
        return result

    def overhead(self) -> dict:
        cache = self.work / "overhead-cache"  # fresh: the first job fits and encodes, the second loads
        result = {"first": self.overhead_run("main-first", cache), "cached": self.overhead_run("main-cached", cache)}
        # What happens before the job starts (and FoldMonitor's clock with it): interpreter and imports.
        done = run_measured([sys.executable, "-c", "import klue_tc.__main__, klue_tc.run, klue_tc.fold"], self.env,
                            REPO_ROOT, self.work, "imports", self.timeout_s)
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
                procs.append((subprocess.Popen(
                    [sys.executable, "-m", "klue_tc.bench", "--worker", str(spec_path), "--worker-out", str(result_path)],
                    stdout=out, stderr=err, env=self.env, cwd=str(REPO_ROOT), start_new_session=True), result_path))
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
        runs = {"klue_tc": lambda enc: self.klue_tc_run(enc, True), "notebook": lambda enc: self.klue_tc_run(enc, False),
                "reference": self.reference_run}
        trials = {enc: {kind: [] for kind in runs} for enc in self.encoders}
        for round_ in range(self.repeat):
            for encoder in self.encoders:
                for kind in (list(runs) if round_ % 2 == 0 else list(runs)[::-1]):
                    result = runs[kind](encoder)
                    if result is not None:
                        trials[encoder][kind].append(result)
        results = [{"encoder": enc, **{kind: fastest(trials[enc][kind]) for kind in runs},
                    "rounds": {kind: [t["samples_per_s"] for t in trials[enc][kind]] for kind in runs}}
                   for enc in self.encoders]
        report = {"settings": self.settings(), "results": results, "overhead": self.overhead()}
        if self.gpu:
            report["concurrency"] = {enc: {k: self.concurrency(enc, k) for k in self.parallel} for enc in self.encoders}
            report["projection"] = gpu_projection(report)
        report["notes"] = self.notes
        return report

    def settings(self) -> dict:
        return {"data": str(self.data), "limit": self.limit, "gpu": self.gpu, "epochs": self.epochs, "batch_size": self.batch_size,
                "layers": LAYERS, "threads": self.threads, "device": self.device_name(),
                "reference": str(self.reference) if self.reference else None, "encoders": self.encoders,
                "overrides": self.overrides, "repeat": self.repeat, "clock": self.clock}

    def device_name(self) -> str:
        if not self.gpu:
            return f"CPU ({len(os.sched_getaffinity(0))} cores available, {self.threads} torch threads)"
        import torch

        return f"{torch.cuda.get_device_name(0)} (bf16-mixed)"


def fastest(trials: Sequence[dict]) -> Optional[dict]:
    return max(trials, key=lambda t: t["samples_per_s"], default=None)


def concurrent_throughput(results: Sequence[dict]) -> dict:
    """Aggregate titles/s of concurrent workers: all their titles over the span from the first
    start to the last end (validation included, as in real jobs)."""
    start = min(r["train_start_wall"] for r in results)
    end = max(r["train_end_wall"] for r in results)
    titles = sum(r["trained_samples"] for r in results)
    return {"jobs": len(results), "aggregate_samples_per_s": titles / (end - start) if end > start else None,
            "per_job_samples_per_s": [r["samples_per_s"] for r in results],
            "peak_mb_each": max((r.get("cuda_peak_mb") or 0) for r in results)}


def gpu_projection(report: dict) -> dict:
    # Wall-time projection: the loop figure (steps, batch assembly, hooks), not steps alone.
    speeds = {r["encoder"]: r["klue_tc"].get("loop_samples_per_s") or r["klue_tc"]["samples_per_s"]
              for r in report["results"] if r.get("klue_tc")}
    evals = {r["encoder"]: r["klue_tc"].get("eval_samples_per_s") for r in report["results"] if r.get("klue_tc")}
    settings = paper_sweep_settings()
    cached = (report.get("overhead") or {}).get("cached") or {}
    overhead_s = cached.get("wall_s") or 0.0
    # Speed-up of k concurrent jobs: measured aggregate over the same measure for k=1.
    parallel, assumed = {}, []
    for k in sorted({k for per in report.get("concurrency", {}).values() for k in per if k != 1}):
        parallel[k] = {}
        for encoder, per in report.get("concurrency", {}).items():
            one = (per.get(1) or {}).get("aggregate_samples_per_s")
            many = (per.get(k) or {}).get("aggregate_samples_per_s")
            if one and many:
                parallel[k][encoder] = many / one
            else:
                parallel[k][encoder] = 1.0
                assumed.append(f"{encoder} k={k}")
    projection = project_sweep(speeds, evals, epochs=settings["epochs"], overhead_s=overhead_s,
                               layers=settings["layers"], parallel_speedup=parallel)
    projection.update(settings=settings, overhead_s=overhead_s, parallel_speedup=parallel,
                      parallel_assumed_1x=assumed)
    return projection


# ----------------------------------------------------------------------------- report

def footnotes(report: dict) -> list[str]:
    s = report["settings"]
    first = next((r for r in report["results"] if r.get("klue_tc")), None)
    ours = first["klue_tc"] if first else {}
    ref = next((r["reference"] for r in report["results"] if r.get("reference")), None) or {}
    sampled = f"{s['limit']} titles sampled" if s["limit"] else "all titles taken"
    notes = [
        f"Same for every run: {ours.get('train_size', s['limit'])} training titles and {ours.get('val_size', '?')} "
        f"held-out titles, identical for all three (seed_reference's split of {Path(s['data']).name}: a stratified "
        f"10% held out with random_state=0, then "
        f"{sampled} "
        f"from the rest with random_state=0; "
        f"klue_tc reproduces the indices), batch {s['batch_size']}, {s['epochs']} epoch(s), {s['layers']} layers, "
        f"d 256 / 4 heads / FFN 512 / hidden 256, post-LN, {s['threads']} torch threads, one fresh process per run"
        + (f"; each figure is the fastest of {s['repeat']} alternating rounds (all rounds in the JSON)."
           if s.get("repeat", 1) > 1 else "."),
        *([f"Clock: process CPU time ({s['threads']} thread(s)) for every titles/s figure: klue_tc's over the same "
           f"steps FoldMonitor times, seed_reference's own timer pointed at time.process_time. On a shared machine "
           f"this is the work each run needs, not the time slices it got; FoldMonitor's wall-clock figures are in "
           f"the JSON (monitor_samples_per_s)."] if s.get("clock") == "cpu" else []),
        ("titles/s: klue_tc and notebook-path = the steps FoldMonitor times for train_samples_per_s (the "
         "metrics.json figure)" if s.get("clock") == "cpu" else
         "titles/s: klue_tc and notebook-path = FoldMonitor's train_samples_per_s (the metrics.json figure)")
        + ": forward + backward + optimiser steps only, first step excluded, batch assembly excluded. seed_reference "
          "= its own figure: its epoch loops (batch indexing and the first step included). The klue_tc loop figure "
          "below (wall clock) includes batch assembly and Lightning's hooks between steps, for the like-for-like view.",
        "macro-F1: after the last epoch, on the held-out titles, for all three (klue_tc's best-epoch F1 is in the JSON).",
        f"Tokenizers: klue_tc SentencePiece unigram, vocab 6000 (got {ours.get('vocab_size', '?')}), [CLS]/[SEP]; "
        f"seed_reference SentencePiece unigram, vocab 6005, [BOS]/[EOS]. Longest training title: "
        f"klue_tc {ours.get('max_len', '?')} pieces (mean {fmt(ours.get('mean_len'), '.1f')}), "
        f"seed_reference {ref.get('max_len', '?')}.",
        "Training recipe differs by design: klue_tc = the experiments' configs (AdamW lr 2e-3, warm-up + cosine, "
        "gradient clipping 1.0, zero-initialised residual branches, scaled sinusoidal positions; BLSTM head reads "
        "the packed final states; attention and BLSTMs skip pads); seed_reference = Adam lr 1e-4 constant, fixed "
        "sinusoidal positions, BLSTM decoder reads position -1.",
        f"Precision: klue_tc {ours.get('precision', '?')} (trainer.precision's default here: bf16 autocast where "
        "the CPU has AMX bf16 tiles or on a GPU, else fp32; `--override trainer.precision=32-true` for fp32); "
        "seed_reference fp32.",
        *([f"klue_tc runs (both columns) with the overrides {' '.join(s['overrides'])}."] if s.get("overrides") else []),
        "Peak memory: " + ("torch.cuda.max_memory_allocated of the training process."
                           if s.get("gpu") else
                           "max RSS of each run's process (os.wait4), including Python, torch, tokenizer fitting and evaluation."),
    ]
    return notes


def render(report: dict) -> str:
    """The whole report as Markdown (also what --out FILE.md holds)."""
    s = report["settings"]
    parts = [f"## klue_tc training benchmark: {s['device']}", "",
             markdown_table(TABLE_HEADER, table_rows(report["results"])), ""]
    parts += [f"{i}. {note}" for i, note in enumerate(footnotes(report), 1)]
    loop = [[r["encoder"], *(fmt((r.get(k) or {}).get("loop_samples_per_s")) for k in ("klue_tc", "notebook")),
             *(fmt((r.get(k) or {}).get("eval_samples_per_s")) for k in ("klue_tc", "notebook")),
             *(fmt((r.get(k) or {}).get("wall_s"), ".0f", " s") for k in ("klue_tc", "notebook", "reference"))]
            for r in report["results"]]
    parts += ["", "### Loop throughput and wall time", "",
              markdown_table(("encoder", "klue_tc loop titles/s", "notebook-path loop titles/s",
                              "klue_tc eval titles/s", "notebook-path eval titles/s",
                              "wall klue_tc", "wall notebook-path", "wall seed_reference"), loop)]
    overhead = report.get("overhead") or {}
    rows = [[label, fmt((overhead.get(key) or {}).get("time_to_first_step_s"), ".2f", " s"),
             fmt((overhead.get(key) or {}).get("wall_s"), ".1f", " s")]
            for key, label in (("first", "first job (fresh cache: fits and encodes)"),
                               ("cached", "cached job (same tokenizer and fold)"))]
    command = (overhead.get("first") or overhead.get("cached") or {}).get("command", "")
    parts += ["", "### Sweep overhead (time to first training step, from job start as FoldMonitor measures it)", "",
              markdown_table(("job", "time to first step", "process wall time"), rows), "",
              f"Before the job's clock starts: interpreter start-up and imports (python, torch, Lightning, Hydra, "
              f"klue_tc) take {fmt(overhead.get('startup_s'), '.1f', ' s')} in a fresh process. The process wall "
              f"time also holds 2 training steps, one validation pass over the fold's held-out titles and the "
              f"metrics write.", "",
              f"Command (run twice, the same cache dir): `{command}`" if command else ""]
    if "projection" in report:
        parts += ["", *projection_lines(report)]
    checks = target_checks(report["results"], overhead)
    parts += ["", "### Targets (issue 6)", "", markdown_table(
        ("target", "met", "measured"),
        [[name, DASH if met is None else ("yes" if met else "NO"), detail] for name, met, detail in checks])]
    if report.get("notes"):
        parts += ["", "Notes: " + "; ".join(report["notes"])]
    return "\n".join(parts).rstrip() + "\n"


def projection_lines(report: dict) -> list[str]:
    p = report["projection"]
    st = p["settings"]
    lines = [f"### Paper sweep projection ({p['jobs']} single-fold jobs, {p['epochs']} epochs each "
             f"(from {st['source']}), {YNAT_TRAIN_TITLES:,} titles)", ""]
    layers = sorted({n for per in p["per_job_s"].values() for n in per})
    lines.append(markdown_table(("encoder", *(f"{n} layers: per job" for n in layers)),
                                [[enc, *(fmt_seconds(per[n]) for n in layers)] for enc, per in p["per_job_s"].items()]))
    lines += ["", f"- sequential, one GPU: **{fmt_seconds(p['sequential_s'])}**"]
    for k, wall in p["parallel_s"].items():
        speedups = ", ".join(f"{e} {v:.2f}x" for e, v in p["parallel_speedup"][k].items())
        lines.append(f"- {k} jobs at once on one GPU: **{fmt_seconds(wall)}** (measured aggregate speed-up: {speedups})")
    concurrency = report.get("concurrency") or {}
    ks = sorted({int(k) for per in concurrency.values() for k in per})
    if ks:
        rows = [[enc, *(fmt((per.get(k) or per.get(str(k)) or {}).get("aggregate_samples_per_s")) for k in ks),
                 fmt(max(((v or {}).get("peak_mb_each") or 0) for v in per.values()) or None)]
                for enc, per in concurrency.items()]
        lines += ["", markdown_table(("encoder", *(f"{k} job(s) at once: titles/s in all" for k in ks),
                                      "peak GPU memory per job MB"), rows)]
    lines += ["", f"Assumptions: per-job time = epochs x (train titles / klue_tc loop titles/s + validation titles / eval "
                  f"titles/s) x layers/3, measured at 3 layers with SentencePiece (Mecab and KoBERT pieces assumed the "
                  f"same speed), every job running all {p['epochs']} epochs (early stopping only shortens it), plus "
                  f"{fmt_seconds(p['overhead_s'])} per job (the cached main job's whole process wall time, start-up to "
                  f"exit). With k jobs at once, the GPU part runs at the measured aggregate speed-up of k concurrent "
                  f"workers started together (same encoder, same data) and start-up overlaps k-fold on the CPU cores."]
    if p["parallel_assumed_1x"]:
        lines.append(f"Not measured, assumed 1x: {', '.join(p['parallel_assumed_1x'])}.")
    if st.get("jobs_in_file") and st["jobs_in_file"] != p["jobs"]:
        lines.append(f"Note: sweeps/paper.yaml's own grid has {st['jobs_in_file']} jobs; this projection uses "
                     f"the issue's {p['jobs']}.")
    return lines


def print_rich(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal or console.width < 200:  # one line per row, also in logs and pipes
        console = Console(width=200)
    s = report["settings"]
    n_train = next((r["klue_tc"]["train_size"] for r in report["results"] if r.get("klue_tc")), s["limit"])
    clock = ", CPU clock" if s.get("clock") == "cpu" else ""
    table = Table(title=f"klue_tc training benchmark: {s['device']}{clock}, {n_train} titles, batch {s['batch_size']}, "
                        f"{s['epochs']} epoch(s), {s['layers']} layers")
    for i, name in enumerate(TABLE_HEADER):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in table_rows(report["results"]):
        table.add_row(*row)
    console.print(table)
    console.print(_after_main_table(render(report)), markup=False, highlight=False)


def _after_main_table(markdown: str) -> str:
    """The report below the main table (footnotes, overhead, projection, targets)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("1. "))
    return "\n".join(lines[start:])


# ----------------------------------------------------------------------------- command line

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m klue_tc.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="labelled training file (default: %(default)s)")
    p.add_argument("--limit", type=int, default=None,
                   help="training titles (default: 5000; with --gpu every title left after the 10%% hold-out)")
    p.add_argument("--epochs", type=int, default=1, help="epochs for every run (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=256, help="default: %(default)s")
    p.add_argument("--encoders", default=",".join(ENCODERS), help="comma-separated (default: %(default)s)")
    p.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                   help="seed_reference.py; skipped with a note when absent (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch threads in every run (default: the CPUs available)")
    p.add_argument("--out", type=Path, help="write the report: FILE.md (Markdown, plus FILE.json) or FILE.json")
    p.add_argument("--gpu", action="store_true",
                   help="measure on CUDA (bf16-mixed) and project sweeps/paper.yaml's wall time on one GPU")
    p.add_argument("--parallel", default="2,4", help="with --gpu: concurrent jobs to measure (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run (default: %(default)s)")
    p.add_argument("--work-dir", type=Path, help="keep runs, caches and logs here (default: a temporary directory)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override for both klue_tc runs (repeatable), e.g. trainer.precision=bf16-mixed")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every run, alternating; each keeps its fastest round (default: %(default)s)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time training steps on the wall clock (default; FoldMonitor's figure) or the process CPU "
                        "clock (with --threads 1: robust on a shared, busy machine)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    # SIGTERM ends the benchmark like Ctrl-C does: the run in progress is killed, not orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if args.worker:
        result = run_worker(json.loads(Path(args.worker).read_text()))
        Path(args.worker_out).write_text(json.dumps(result))
        return 0
    data = args.data.expanduser().resolve()
    if not data.is_file():
        fail(f"--data {data}: file not found (pass --data PATH to a labelled KLUE YNAT file)")
    encoders = [e.strip() for e in args.encoders.split(",") if e.strip()]
    unknown = [e for e in encoders if e not in ENCODERS]
    if unknown or not encoders:
        fail(f"--encoders: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ENCODERS)}")
    if args.limit is None and not args.gpu:
        args.limit = 5000
    for name in ("limit", "epochs", "batch_size", "repeat"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be a positive integer")
    notes = []
    reference = args.reference.expanduser().resolve() if args.reference else None
    if reference is not None and not reference.is_file():
        notes.append(f"seed_reference not found at {reference}: its columns are empty")
        print(f"[bench] note: {notes[-1]}", file=sys.stderr)
        reference = None
    if args.clock == "cpu" and args.gpu:
        fail("--clock cpu measures CPU runs; with --gpu the wall clock (with CUDA synchronisation) is the measure")
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            fail("--gpu: no CUDA device visible to torch")
        notes.append("seed_reference is CPU-only: not run with --gpu")
    parallel = sorted({1, *(int(k) for k in args.parallel.split(",") if k.strip())}) if args.gpu else []
    threads = args.threads or len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="klue_tc_bench-") as tmp:
        work = args.work_dir.expanduser().resolve() if args.work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bench = Bench(data, args.limit, args.epochs, args.batch_size, encoders, reference, threads, args.gpu, work,
                      args.timeout, parallel, notes, args.override, args.repeat, args.clock)
        report = bench.measure()
    print_rich(report)
    if args.out:
        out = args.out.expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".json":
            out.write_text(json.dumps(report, indent=1, default=str))
        else:
            out.write_text(render(report), encoding="utf-8")
            out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
        print(f"[bench] wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
