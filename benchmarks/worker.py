"""The worker: one measured training in a fresh process (`python -m benchmarks --worker SPEC`)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Sequence

from benchmarks.constants import LAYERS, REPO_ROOT
from benchmarks.reference import reference_split


def compose_run(overrides: Sequence[str]):
    """The RunConfig that `python -m klue_tc <overrides>` would run (same conf/, same schemas)."""
    from hydra import compose, initialize_config_dir

    from klue_tc.config import register_schemas, validate

    register_schemas()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return validate(compose(config_name="config", overrides=list(overrides)))


def run_overrides(spec: dict) -> list[str]:
    return [
        spec.get("choice", f"encoder={spec['encoder']}"),
        f"encoder.layers={spec.get('layers', LAYERS)}",
        "tokenizer=sentencepiece",
        "tokenizer.vocab_size=6000",
        f"data.batch_size={spec['batch_size']}",
        f"data.bucketing={str(spec['bucketing']).lower()}",
        f"data.cache_dir={spec['cache_dir']}",
        f"trainer.max_epochs={spec['epochs']}",
        f"trainer.early_stopping_patience={spec['epochs']}",
        f"trainer.accelerator={'gpu' if spec['gpu'] else 'cpu'}",
        "trainer.devices=1",
        "trainer.progress_bar=none",
        "logger=none",
        *spec.get("overrides", []),
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
            self.val_samples += len(trainer.datamodule.val.encoded) + len(trainer.datamodule.inner.encoded)
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
    from klue_tc.data import LabelledTitles, read_labelled_file
    from klue_tc.job_context import FirstStepClock
    from klue_tc.job_setup import standalone_job
    from klue_tc.tokenizers import TokenizerCache
    from klue_tc.training import prepare_fold, train_fold

    run = compose_run(run_overrides(spec))
    full = read_labelled_file(spec["data"])
    train_idx, held_idx = reference_split(full.labels, spec["limit"])
    order = np.concatenate([train_idx, held_idx])
    data = LabelledTitles([full.texts[i] for i in order], full.labels[order], full.source)
    n_train = len(train_idx)
    prepared = prepare_fold(
        run, data, np.arange(n_train), np.arange(n_train, len(order)), TokenizerCache(spec["cache_dir"])
    )

    # One extra callback beside train_fold's own (FoldMonitor etc.): the trainer is otherwise unchanged.
    timer = _loop_timer_class()()
    if spec.get("barrier"):
        _barrier(Path(spec["barrier"]["dir"]), spec["barrier"]["count"], spec["barrier"]["name"])
    # A state folder of its own: a repeated round must train afresh, not resume the previous one.
    Path(spec["work_dir"]).mkdir(parents=True, exist_ok=True)
    state_root = Path(tempfile.mkdtemp(dir=spec["work_dir"], prefix="training-state-"))
    job = standalone_job(run, data, Path(spec["work_dir"]), state_root, FirstStepClock(job_start))
    record = train_fold(job, 0, prepared, callbacks=[timer])
    lengths = prepared.train.encoded.lengths
    import resource

    return {
        "encoder": spec["encoder"],
        "bucketing": spec["bucketing"],
        "layers": run.encoder.layers,
        "head": run.head.name,
        "precision": job.device.precision,
        "samples_per_s": record.train_samples_per_s,
        "loop_samples_per_s": timer.loop_samples / timer.loop_seconds if timer.loop_seconds else None,
        # The same steps as FoldMonitor's, on the process CPU clock: with one thread, a measure that
        # time-slicing with other work on a shared machine does not distort.
        "cpu_samples_per_s": timer.loop_samples / timer.cpu_seconds if timer.cpu_seconds else None,
        "eval_samples_per_s": timer.val_samples / timer.val_seconds if timer.val_seconds else None,
        "f1": timer.last_f1,
        "f1_by_epoch": timer.f1_by_epoch,
        "best_f1": record.f1,
        "best_epoch": record.best_epoch,
        "epochs_run": record.epochs_run,
        "steps": timer.steps,
        "train_size": record.train_size,
        "inner_size": record.inner_size,  # held out of the training titles to choose the epoch on
        "val_size": record.val_size,
        "vocab_size": prepared.tokenizer.vocab_size,
        "max_len": int(lengths.max()),
        "mean_len": float(lengths.mean()),
        "train_start_wall": timer.first_start_wall,
        "train_end_wall": timer.last_end_wall,
        "trained_samples": timer.loop_samples,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20
        if torch.cuda.is_available() and spec["gpu"]
        else None,
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
