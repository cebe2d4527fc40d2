"""The worker: one measured training in a fresh process (`python -m benchmarks --worker SPEC`)."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import astuple
from pathlib import Path
from typing import Sequence

from benchmarks.constants import LAYERS, REPO_ROOT
from benchmarks.flops import (
    PEAK_MATMUL_SIZE,
    PEAK_MATMUL_SIZE_GPU,
    classifier_step_flops,
    masked_lm_step_flops,
    matmul_peak,
)
from benchmarks.reference import reference_split


def compose_run(overrides: Sequence[str]):
    """The RunConfig that `python -m klue_tc <overrides>` would run (same conf/, same schemas)."""
    from hydra import compose, initialize_config_dir

    from klue_tc.core.config import register_schemas, validate

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
        # Pretraining: the same titles, batch and epochs as fine-tuning, masked-LM's defaults otherwise.
        *(
            ["pretrain.objective=mlm", f"pretrain.epochs={spec['epochs']}", f"pretrain.batch_size={spec['batch_size']}"]
            if spec.get("kind") == "pretrain"
            else []
        ),
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
            self._mark = self._val_t0 = self._cpu0 = self._cpu_mark = 0.0
            self.cpu_seconds = self.loop_cpu_seconds = 0.0
            self.widths = Counter()  # padded width -> titles trained at it, over the timed steps

        def on_train_epoch_start(self, trainer, pl_module):
            self._mark, self._cpu_mark = time.perf_counter(), time.process_time()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.first_start_wall is None:
                self.first_start_wall = time.time()
            self._cpu0 = time.process_time()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            sync(trainer)
            now, cpu_now = time.perf_counter(), time.process_time()
            self.steps += 1
            if self.steps > 1:
                self.loop_seconds += now - self._mark
                self.loop_cpu_seconds += cpu_now - self._cpu_mark
                self.loop_samples += len(batch["input_ids"])
                self.cpu_seconds += cpu_now - self._cpu0
                self.widths[batch["input_ids"].size(1)] += len(batch["input_ids"])
            self._mark, self._cpu_mark, self.last_end_wall = now, cpu_now, time.time()

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
    """One measured run in this (fresh) process: fine-tuning (klue_tc's prepare_fold + train_fold),
    masked-LM pretraining on the same titles, or the matrix-product peak."""
    job_start = time.perf_counter()
    import torch

    torch.set_num_threads(spec["threads"])
    kind = spec.get("kind", "finetune")
    if kind == "peak":
        return peak_worker(spec)
    if kind == "ensemble":
        return ensemble_worker(spec)
    run = compose_run(run_overrides(spec))
    data, prepared = _prepare(run, spec)
    if kind == "pretrain":
        return pretrain_worker(run, prepared, spec)
    return finetune_worker(run, data, prepared, spec, job_start)


def _prepare(run, spec: dict):
    """The titles and their fold: seed_reference's split of the data, the tokenizer fit on its
    training titles (cached)."""
    import numpy as np

    from klue_tc.data.titles import LabelledTitles, read_labelled_file
    from klue_tc.tokenizers import TokenizerCache
    from klue_tc.training.fold import prepare_fold

    full = read_labelled_file(spec["data"])
    train_idx, held_idx = reference_split(full.labels, spec["limit"])
    order = np.concatenate([train_idx, held_idx])
    data = LabelledTitles([full.texts[i] for i in order], full.labels[order], full.source, full.label_names)
    n_train = len(train_idx)
    cache = TokenizerCache(spec["cache_dir"])
    return data, prepare_fold(run, data, np.arange(n_train), np.arange(n_train, len(order)), cache)


def _token_id(tokenizer) -> int:
    """A real piece (not a special) for counting FLOPs over titles without padding."""
    specials = set(astuple(tokenizer.specials))
    return next(i for i in range(tokenizer.vocab_size) if i not in specials)


def finetune_worker(run, data, prepared, spec: dict, job_start: float) -> dict:
    import torch

    from klue_tc.jobs.job_setup import standalone_job
    from klue_tc.models import build_classifier
    from klue_tc.training.fold import train_fold
    from klue_tc.training.job_context import FirstStepClock

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

    tokenizer = prepared.tokenizer
    classifier = build_classifier(tokenizer.vocab_size, tokenizer.specials.pad, run.encoder, run.head, data.num_classes)
    step_flops = classifier_step_flops(classifier, timer.widths, _token_id(tokenizer))
    return {
        "kind": "finetune",
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
        # The loop figure on the process CPU clock (batch assembly and hooks included, as the wall one).
        "loop_cpu_samples_per_s": timer.loop_samples / timer.loop_cpu_seconds if timer.loop_cpu_seconds else None,
        "train_flops_per_title": step_flops / timer.loop_samples if timer.loop_samples else None,
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


def pretrain_worker(run, prepared, spec: dict) -> dict:
    """klue_tc's masked-LM pretraining loop (klue_tc.pretraining.pretrain.pretrain_encoder) over the fold's
    training titles, timed as LoopTimer times fine-tuning: from one step's end to the next, the
    first step excluded, batch assembly and masking included."""
    import resource

    import torch

    from klue_tc.core.hardware import resolve_device
    from klue_tc.pretraining.objectives.mlm import MaskedLM
    from klue_tc.pretraining.pretrain import HEAD_ROW_BUCKET, pretrain_encoder

    timer = PretrainTimer(torch.device("cuda" if spec["gpu"] else "cpu"))
    Path(spec["work_dir"]).mkdir(parents=True, exist_ok=True)
    state_dir = Path(tempfile.mkdtemp(dir=spec["work_dir"], prefix="pretraining-state-"))
    encoded = prepared.train.encoded
    device = resolve_device(run.trainer)
    outcome = pretrain_encoder(run, device, prepared.tokenizer, encoded, state_dir / "resume.pt", timer)
    steps, loss = outcome.steps, outcome.loss
    tokenizer = prepared.tokenizer
    head_rows = int(timer.head_rows)
    step_flops = masked_lm_step_flops(MaskedLM.model(run, tokenizer), timer.widths, head_rows, _token_id(tokenizer))
    return {
        "kind": "pretrain",
        "encoder": spec["encoder"],
        "layers": run.encoder.layers,
        "precision": device.precision,
        "loop_samples_per_s": timer.samples / timer.seconds if timer.seconds else None,
        "loop_cpu_samples_per_s": timer.samples / timer.cpu_seconds if timer.cpu_seconds else None,
        "train_flops_per_title": step_flops / timer.samples if timer.samples else None,
        "steps": steps,
        "titles": len(encoded),
        "trained_samples": timer.samples,
        "masked_tokens": int(timer.masked),
        "head_rows": head_rows,
        "head_row_bucket": HEAD_ROW_BUCKET,
        "tokens": timer.tokens,
        "final_loss": loss,
        "mask_p": run.pretrain.mask_p,
        "batch_size": run.pretrain.batch_size,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if spec["gpu"] else None,
        "self_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(),
    }


class PretrainTimer:
    """The pretraining loop's step hook: step-end to step-end times on both clocks, the first step
    excluded; the titles, padded widths and head rows of the timed steps, summed on the device
    (reading them every step would wait for a GPU)."""

    def __init__(self, device):
        self.device = device
        self.seconds = self.cpu_seconds = 0.0
        self.samples = self.tokens = 0
        self.masked = self.head_rows = 0
        self.widths = Counter()
        self._mark = self._cpu_mark = None

    def __call__(self, step: int, total: int, loss, batch) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
        now, cpu_now = time.perf_counter(), time.process_time()
        if self._mark is not None:
            self.seconds += now - self._mark
            self.cpu_seconds += cpu_now - self._cpu_mark
            titles, width = batch.original.shape
            self.samples += titles
            self.tokens += titles * width
            self.widths[width] += titles
            self.masked = self.masked + batch.picked.sum()
            self.head_rows = self.head_rows + batch.head_rows()
        self._mark, self._cpu_mark = now, cpu_now


def peak_worker(spec: dict) -> dict:
    """The matrix-product peak in the precision the training runs use (their overrides composed)."""
    from klue_tc.core.hardware import default_precision

    run = compose_run(run_overrides(spec))
    precision = default_precision(run.trainer)
    device, size = ("cuda", PEAK_MATMUL_SIZE_GPU) if spec["gpu"] else ("cpu", PEAK_MATMUL_SIZE)
    return {"precision": precision, **matmul_peak("bf16" in precision, spec.get("clock", "wall"), device, size)}


def _barrier(directory: Path, count: int, name: str, timeout_s: float = 600) -> None:
    """Start training only when all `count` concurrent workers are ready (concurrency runs)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.ready").touch()
    deadline = time.monotonic() + timeout_s
    while len(list(directory.glob("*.ready"))) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def ensemble_worker(spec: dict) -> dict:
    """An ensemble's folder of the ensemble sweep's member designs (a couple of training steps each)
    and the linear baselines, served against one fold model on the held-out titles (benchmarks/ensemble.py)."""
    import numpy as np

    from benchmarks.ensemble import build_artefact, compose_member, serving_speeds
    from klue_tc.jobs.job_setup import standalone_job
    from klue_tc.training.fold import train_fold

    work = Path(spec["work_dir"])
    work.mkdir(parents=True, exist_ok=True)
    records = []
    for member in spec["members"]:
        run = compose_member(member, spec)
        data, prepared = _prepare(run, spec)
        state = Path(tempfile.mkdtemp(dir=work, prefix="training-state-"))
        records.append(train_fold(standalone_job(run, data, work / member, state), 0, prepared))
    n_train = len(data) - len(prepared.val_index)
    artefact = build_artefact(records, spec["members"], data, np.arange(n_train), work)
    single = (Path(records[0].checkpoint), Path(records[0].tokenizer_dir))
    held = [data.texts[i] for i in range(n_train, len(data))]
    speeds = serving_speeds(artefact, single, held, spec["batch_size"], spec.get("clock", "wall"))
    return {"kind": "ensemble", "single_model": f"{spec['members'][0]}, one fold", **speeds}
