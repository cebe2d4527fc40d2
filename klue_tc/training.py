"""One fold: fit (or load) its tokenizer, encode, train with Lightning, return its `FoldResult`.

This module and what it imports from klue_tc make the numbers: their source is the code fingerprint
in the results key (klue_tc/fingerprint.py). What only watches training (progress lines, W&B) comes
in as extra callbacks from the caller.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, RichProgressBar
from lightning.pytorch.loggers import Logger

from klue_tc.callbacks import ExponentialMovingAverage, FoldMonitor, RandomState
from klue_tc.checkpoints import RESUME_CHECKPOINT_EVERY_S, ResumeCheckpoint, resume_point, save_weights_only
from klue_tc.config import RunConfig, TrainerConfig
from klue_tc.data import LabelledTitles
from klue_tc.datamodule import EncodedSplit, FoldDataModule
from klue_tc.evaluate import score_fold
from klue_tc.hardware import default_precision, device_name
from klue_tc.module import TopicClassifierModule
from klue_tc.pretraining import PretrainedEncoder, load_pretrained_encoder
from klue_tc.records import FoldResult
from klue_tc.tokenizers import EncodedTitles, Tokenizer, TokenizerCache

log = logging.getLogger(__name__)


@dataclass
class PreparedFold:
    tokenizer: Tokenizer
    tokenizer_key: str
    train: EncodedSplit
    val: EncodedSplit


def prepare_fold(
    run: RunConfig,
    data: LabelledTitles,
    train_idx: np.ndarray,
    val_idx: np.ndarray,
    cache: TokenizerCache,
    pretrained: Optional[PretrainedEncoder] = None,
) -> PreparedFold:
    """The tokenizer sees the fold's training titles only (or, after pretraining, the pretraining
    corpus: the encoder's own); all titles are encoded once and cached."""
    train_part = data.subset(train_idx)
    if pretrained is not None:
        tokenizer, key = pretrained.tokenizer, pretrained.tokenizer_key
    else:
        tokenizer, key = cache.tokenizer(run.tokenizer, train_part.texts, train_part.fingerprint())
    encoded = cache.encoded(tokenizer, key, data.texts, data.fingerprint())
    resample = None
    alpha = getattr(run.tokenizer, "sampling_alpha", 0.0)
    if alpha > 0:
        texts, seed = train_part.texts, run.seed

        def sampled(epoch: int) -> EncodedTitles:
            return EncodedTitles.from_lists(tokenizer.encode_sampled(texts, alpha, seed + epoch))

        resample = sampled
    return PreparedFold(
        tokenizer,
        key,
        EncodedSplit(encoded.take(train_idx), data.labels[train_idx], resample),
        EncodedSplit(encoded.take(val_idx), data.labels[val_idx]),
    )


def make_trainer(
    cfg: TrainerConfig, fold_dir: Path, logger: Optional[Logger], callbacks: list, reload_train_data: bool = False
) -> L.Trainer:
    show_bar = cfg.progress_bar == "rich" or (cfg.progress_bar == "auto" and sys.stdout.isatty())
    if show_bar:
        callbacks = [*callbacks, RichProgressBar()]
    return L.Trainer(
        accelerator=cfg.accelerator,
        devices=cfg.devices,
        precision=default_precision(cfg),
        max_epochs=cfg.max_epochs,
        gradient_clip_val=cfg.gradient_clip_val,
        logger=logger or False,
        callbacks=callbacks,
        enable_progress_bar=show_bar,
        enable_model_summary=False,
        log_every_n_steps=cfg.log_every_n_steps,
        deterministic=cfg.deterministic,
        default_root_dir=str(fold_dir),
        num_sanity_val_steps=0,
        fast_dev_run=cfg.fast_dev_run,
        limit_train_batches=cfg.limit_train_batches,
        reload_dataloaders_every_n_epochs=int(reload_train_data),
    )


def train_fold(
    run: RunConfig,
    fold: int,
    prepared: PreparedFold,
    fold_dir: Path,
    logger: Optional[Logger],
    job_start: float,
    state_dir: Path,
    callbacks: Sequence[L.Callback] = (),
    validation: Optional[LabelledTitles] = None,
    pretrained: Optional[PretrainedEncoder] = None,
) -> FoldResult:
    """Train one fold. Its training state is checkpointed into `state_dir` as epochs end (at most
    once a minute), and an interrupted fold resumes there; the best weights end up in `fold_dir`
    and, with `validation`, are scored on it. `callbacks` watch the training (progress, logging)
    and run after the ones that make it. With `pretrained`, the encoder starts from its weights."""
    started = time.perf_counter()
    L.seed_everything(run.seed, workers=True, verbose=False)
    module = TopicClassifierModule.from_configs(
        prepared.tokenizer.vocab_size, prepared.tokenizer.specials, run.encoder, run.head, run.optim, run.augment
    )
    if pretrained is not None:
        load_pretrained_encoder(module.model, pretrained)
    if run.trainer.compile:
        # Widths rounded to a multiple (data.pad_multiple) are few: a graph specialised to each is
        # faster than one symbolic in the width, which any width would need.
        module.model = torch.compile(module.model, dynamic=run.data.pad_multiple == 1)
    datamodule = FoldDataModule(prepared.train, prepared.val, run.data, prepared.tokenizer.specials.pad, run.seed)
    monitor = FoldMonitor(job_start)
    # The EMA comes first, so that FoldMonitor's step time includes its update.
    averaging = [ExponentialMovingAverage(run.optim.ema_decay)] if run.optim.ema_decay > 0 else []
    resume_from = resume_point(fold, state_dir, run.results.resume)
    # Weights-only checkpoints skip the callbacks' save hooks, so with an EMA the best checkpoint is
    # a full one (its state_dict then holds the averaged weights that were validated), slimmed after fit.
    best = ModelCheckpoint(
        dirpath=str(state_dir),
        filename="best",
        monitor="val/f1",
        mode="max",
        save_top_k=1,
        save_weights_only=not averaging,
        enable_version_counter=False,
    )
    latest = ResumeCheckpoint(state_dir, RESUME_CHECKPOINT_EVERY_S)
    early_stop = EarlyStopping(monitor="val/f1", mode="max", patience=run.trainer.early_stopping_patience)
    trainer = make_trainer(
        run.trainer,
        fold_dir,
        logger,
        [*averaging, monitor, RandomState(), best, latest, early_stop, *callbacks],
        reload_train_data=prepared.train.resample is not None,
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    checkpoint = None
    if best.best_model_path:
        checkpoint = fold_dir / "best.ckpt"
        save_weights_only(Path(best.best_model_path), checkpoint)
    tokenizer_dir = prepared.tokenizer.save(fold_dir / "tokenizer")
    result = FoldResult(
        fold=fold,
        f1=monitor.best_f1,
        accuracy=monitor.best_accuracy,
        best_epoch=monitor.best_epoch + 1,
        epochs_run=trainer.current_epoch,
        train_samples_per_s=monitor.samples_per_s,
        time_to_first_step_s=monitor.time_to_first_step,
        train_seconds=time.perf_counter() - started,
        train_size=len(prepared.train.encoded),
        val_size=len(prepared.val.encoded),
        checkpoint=str(checkpoint.resolve()) if checkpoint else None,
        tokenizer_dir=str(tokenizer_dir.resolve()),
        precision=default_precision(run.trainer),
        device=device_name(run.trainer),
        threads=torch.get_num_threads(),
        pretrained=pretrained.record() if pretrained is not None else None,
    )
    if validation is not None and checkpoint is not None:
        result.validation = score_fold(result, validation, run.data.eval_batch_size)
    return result
