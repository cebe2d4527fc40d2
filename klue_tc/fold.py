"""One fold: fit (or load) its tokenizer, encode, train with Lightning, return its record."""
from __future__ import annotations

import functools
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, RichProgressBar
from lightning.pytorch.loggers import Logger

from klue_tc.callbacks import ExponentialMovingAverage, FoldMonitor, RandomState
from klue_tc.config import GPU_ACCELERATORS, RunConfig, TrainerConfig
from klue_tc.data import LabelledTitles
from klue_tc.datamodule import EncodedSplit, FoldDataModule
from klue_tc.errors import ResourceError
from klue_tc.module import TopicClassifierModule
from klue_tc.tokenizers import EncodedTitles, Tokenizer, TokenizerCache

log = logging.getLogger(__name__)

RESUME_CHECKPOINT_EVERY_S = 60.0  # the least time between two writes of a fold's resumable state


@dataclass
class PreparedFold:
    tokenizer: Tokenizer
    tokenizer_key: str
    train: EncodedSplit
    val: EncodedSplit


def prepare_fold(run: RunConfig, data: LabelledTitles, train_idx: np.ndarray, val_idx: np.ndarray,
                 cache: TokenizerCache) -> PreparedFold:
    """The tokenizer sees the fold's training titles only; all titles are encoded once and cached."""
    train_part = data.subset(train_idx)
    tokenizer, key = cache.tokenizer(run.tokenizer, train_part.texts, train_part.fingerprint())
    encoded = cache.encoded(tokenizer, key, data.texts, data.fingerprint())
    resample = None
    if run.tokenizer.sampling_alpha > 0:
        alpha, texts, seed = run.tokenizer.sampling_alpha, train_part.texts, run.seed

        def sampled(epoch: int) -> EncodedTitles:
            return EncodedTitles.from_lists(tokenizer.encode_sampled(texts, alpha, seed + epoch))
        resample = sampled
    return PreparedFold(
        tokenizer, key,
        EncodedSplit(encoded.take(train_idx), data.labels[train_idx], resample),
        EncodedSplit(encoded.take(val_idx), data.labels[val_idx]),
    )


def uses_gpu(cfg: TrainerConfig) -> bool:
    return cfg.accelerator in GPU_ACCELERATORS or (cfg.accelerator == "auto" and torch.cuda.is_available())


def require_asked_gpu(cfg: TrainerConfig) -> None:
    """A GPU asked for by name must be there: one line now, not Lightning's traceback later."""
    if cfg.accelerator in GPU_ACCELERATORS and not torch.cuda.is_available():
        raise ResourceError(f"trainer.accelerator={cfg.accelerator}, but torch {torch.__version__} sees no CUDA GPU; "
                            f"use trainer.accelerator=auto (the GPU when there is one) or trainer.accelerator=cpu")


# The kernel's names for native bf16 matrix products: AMX tiles, AVX-512 BF16 dot products.
BF16_MATMUL_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def cpu_has_bf16_matmul() -> bool:
    """Native bf16 matrix products: Intel AMX tiles, or AVX-512 BF16 dot products (AMD Zen 4 and
    later, Intel Cooper Lake). There bf16 autocast trained faster than fp32 at the same macro-F1
    (README: Speed; with AMX the Transformer 1.7x and TRANS-BLSTM 2.7x, with AVX-512 BF16 alone
    2.35x and 1.76x); without them bf16 on CPU is emulated and slower, so fp32 stays. Read from
    the Linux kernel's CPU flags (torch exposes the same check only privately); elsewhere none is
    assumed."""
    return not BF16_MATMUL_FLAGS.isdisjoint(cpu_flags())


@functools.cache  # read once per process, not once per fold
def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:  # not Linux
        return frozenset()
    flag_lines = (line.split(":", 1)[1] for line in text.splitlines() if line.startswith("flags"))
    return frozenset(flag for flags in flag_lines for flag in flags.split())


def default_precision(cfg: TrainerConfig) -> str:
    if cfg.precision:
        return str(cfg.precision)
    return "bf16-mixed" if uses_gpu(cfg) or cpu_has_bf16_matmul() else "32-true"


def make_trainer(cfg: TrainerConfig, fold_dir: Path, logger: Optional[Logger], callbacks: list,
                 reload_train_data: bool = False) -> L.Trainer:
    precision = default_precision(cfg)
    show_bar = cfg.progress_bar == "rich" or (cfg.progress_bar == "auto" and sys.stdout.isatty())
    if show_bar:
        callbacks = [*callbacks, RichProgressBar()]
    return L.Trainer(
        accelerator=cfg.accelerator, devices=cfg.devices, precision=precision, max_epochs=cfg.max_epochs,
        gradient_clip_val=cfg.gradient_clip_val, logger=logger or False, callbacks=callbacks,
        enable_progress_bar=show_bar, enable_model_summary=False, log_every_n_steps=cfg.log_every_n_steps,
        deterministic=cfg.deterministic, default_root_dir=str(fold_dir), num_sanity_val_steps=0,
        fast_dev_run=cfg.fast_dev_run, limit_train_batches=cfg.limit_train_batches,
        reload_dataloaders_every_n_epochs=int(reload_train_data),
    )


def save_weights_only(source: Path, target: Path) -> None:
    """Write to `target` what loading the model needs from the checkpoint `source` (the EMA's full
    checkpoints also hold the optimiser state and the un-averaged weights: 4x the size, over
    hundreds of jobs)."""
    full = torch.load(source, map_location="cpu", weights_only=False)
    slim = {k: full[k] for k in ("state_dict", "hyper_parameters", "pytorch-lightning_version", "epoch",
                                 "global_step") if k in full}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    torch.save(slim, tmp)
    tmp.replace(target)


def resume_point(fold: int, state_dir: Path, resume: bool) -> Optional[Path]:
    """The latest finished epoch's checkpoint of this fold's interrupted training, if it left a
    readable one and resuming is on; otherwise the fold starts from a clean state folder."""
    last = state_dir / "last.ckpt"
    if resume and last.is_file():
        try:  # a file cut short by a kill lacks the zip directory at its end, so this load fails;
            # mmap maps the tensors rather than reading them (the file is 50 MB with the EMA)
            epoch = torch.load(last, map_location="cpu", weights_only=False, mmap=True)["epoch"]
            log.info("fold %d: resuming after epoch %d, from %s", fold, epoch + 1, last)
            return last
        except Exception as err:  # killed while it was written
            log.warning("fold %d: %s is unreadable (%s); training the fold from the start", fold, last,
                        type(err).__name__)
    shutil.rmtree(state_dir, ignore_errors=True)
    return None


class ResumeCheckpoint(ModelCheckpoint):
    """The fold's full training state (`last.ckpt`: weights, optimiser, schedule, EMA, early
    stopping, the best so far), written when an epoch has ended, after its validation, so that a
    resumed fold starts the next epoch. At most once per `min_interval_s`: the write takes about
    0.2 s (50 MB with the EMA), nothing beside a CPU epoch of minutes but several per cent of a
    GPU epoch of seconds; a kill then loses at most that long plus the epoch under way."""

    def __init__(self, dirpath: Path, min_interval_s: float):
        super().__init__(dirpath=str(dirpath), filename="last", save_on_train_epoch_end=True,
                         enable_version_counter=False)
        self.min_interval_s = min_interval_s
        self._last_write = time.monotonic()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if time.monotonic() - self._last_write >= self.min_interval_s:
            super().on_train_epoch_end(trainer, pl_module)
            self._last_write = time.monotonic()


class EpochLine(L.Callback):
    """One log line per epoch, for runs without a progress bar (CI, sweeps, SLURM logs)."""

    def __init__(self, fold: int):
        self.fold = fold

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            m = trainer.callback_metrics
            log.info("fold %d epoch %d/%d: val macro-F1 %.4f, accuracy %.4f", self.fold, trainer.current_epoch + 1,
                     trainer.max_epochs, float(m["val/f1"]), float(m["val/accuracy"]))


def train_fold(run: RunConfig, fold: int, prepared: PreparedFold, fold_dir: Path,
               logger: Optional[Logger], job_start: float, state_dir: Path) -> dict:
    """Train one fold. Its training state is checkpointed into `state_dir` as epochs end (at most
    once a minute), and an interrupted fold resumes there; the best weights end up in `fold_dir`."""
    L.seed_everything(run.seed, workers=True, verbose=False)
    module = TopicClassifierModule.from_configs(
        prepared.tokenizer.vocab_size, prepared.tokenizer.specials, run.encoder, run.head, run.optim, run.augment)
    if run.trainer.compile:
        module.model = torch.compile(module.model, dynamic=True)
    datamodule = FoldDataModule(prepared.train, prepared.val, run.data, prepared.tokenizer.specials.pad, run.seed)
    monitor = FoldMonitor(job_start)
    # The EMA comes first, so that FoldMonitor's step time includes its update.
    averaging = [ExponentialMovingAverage(run.optim.ema_decay)] if run.optim.ema_decay > 0 else []
    resume_from = resume_point(fold, state_dir, run.results.resume)
    # Weights-only checkpoints skip the callbacks' save hooks, so with an EMA the best checkpoint is
    # a full one (its state_dict then holds the averaged weights that were validated), slimmed after fit.
    best = ModelCheckpoint(dirpath=str(state_dir), filename="best", monitor="val/f1", mode="max",
                           save_top_k=1, save_weights_only=not averaging, enable_version_counter=False)
    latest = ResumeCheckpoint(state_dir, RESUME_CHECKPOINT_EVERY_S)
    early_stop = EarlyStopping(monitor="val/f1", mode="max", patience=run.trainer.early_stopping_patience)
    trainer = make_trainer(run.trainer, fold_dir, logger,
                           [*averaging, monitor, RandomState(), best, latest, early_stop, EpochLine(fold)],
                           reload_train_data=prepared.train.resample is not None)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    checkpoint = None
    if best.best_model_path:
        checkpoint = fold_dir / "best.ckpt"
        save_weights_only(Path(best.best_model_path), checkpoint)
    tokenizer_dir = prepared.tokenizer.save(fold_dir / "tokenizer")
    return {
        "fold": fold,
        "f1": monitor.best_f1,
        "accuracy": monitor.best_accuracy,
        "best_epoch": monitor.best_epoch,
        "epochs_run": trainer.current_epoch,
        "train_samples_per_s": monitor.samples_per_s,
        "time_to_first_step_s": monitor.time_to_first_step,
        "train_size": len(prepared.train.encoded),
        "val_size": len(prepared.val.encoded),
        "checkpoint": str(checkpoint.resolve()) if checkpoint else None,
        "tokenizer_dir": str(tokenizer_dir.resolve()),
    }
