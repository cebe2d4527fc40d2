"""One fold: fit (or load) its tokenizer, encode, train with Lightning, return its `FoldResult`.

One of the numeric modules whose code is the code version in the results key (klue_tc/store/fingerprint.py).
What only watches training (progress lines, W&B) comes in as extra callbacks from the caller.
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, ProgressBar, RichProgressBar
from lightning.pytorch.loggers import Logger

from klue_tc.core import interrupts
from klue_tc.core.checksums import sha256_of
from klue_tc.core.config import RunConfig, TrainerConfig
from klue_tc.core.files import reporting_full_disk
from klue_tc.data.batches import EncodedSplit, FoldDataModule
from klue_tc.data.titles import LabelledTitles, inner_split
from klue_tc.engine.checkpoints import (
    RESUME_CHECKPOINT_EVERY_S,
    AtomicCheckpointIO,
    ResumeCheckpoint,
    resume_point,
    save_weights_only,
)
from klue_tc.engine.random_state import RandomState
from klue_tc.pretraining.pretrain import PretrainedEncoder, load_pretrained_encoder
from klue_tc.store.records import (
    SELECTED_ON_INNER_SPLIT,
    EpochScores,
    FoldPredictions,
    FoldResult,
    TitlePredictions,
    ValidationScore,
)
from klue_tc.tokenizers import EncodedTitles, Tokenizer, TokenizerCache
from klue_tc.training.callbacks import (
    SELECTION_METRIC,
    ExponentialMovingAverage,
    FoldMonitor,
    LogEveryEpoch,
)
from klue_tc.training.evaluate import score_predictions
from klue_tc.training.inference import encoded_probs, predict_probs
from klue_tc.training.job_context import JobContext
from klue_tc.training.model_size import measure
from klue_tc.training.module import TopicClassifierModule, TrainingDiverged

log = logging.getLogger(__name__)


@dataclass
class PreparedFold:
    tokenizer: Tokenizer
    tokenizer_key: str
    train: EncodedSplit  # the titles trained on
    val: EncodedSplit  # the held-out fold: scored, never read to choose
    inner: EncodedSplit  # the inner split of the training fold: chooses the epoch and checkpoint
    val_index: np.ndarray  # the held-out titles' rows in the job's titles
    label_names: tuple[str, ...]  # the classes the model predicts, in id order


def prepare_fold(
    run: RunConfig,
    data: LabelledTitles,
    train_idx: np.ndarray,
    val_idx: np.ndarray,
    cache: TokenizerCache,
    pretrained: Optional[PretrainedEncoder] = None,
    soft_targets: Optional[np.ndarray] = None,
) -> PreparedFold:
    """The tokenizer sees the fold's training titles only (the inner split's among them: unlabelled
    text, and no title is scored on them), or, after pretraining, the pretraining corpus: the
    encoder's own; all titles are encoded once and cached. `soft_targets` (distillation): the
    teacher's probabilities for the job's training titles, by row; the titles trained on get theirs."""
    train_part = data.subset(train_idx)
    if pretrained is not None:
        tokenizer, key = pretrained.tokenizer, pretrained.tokenizer_key
    else:
        tokenizer, key = cache.tokenizer(run.tokenizer, train_part.texts, train_part.fingerprint())
    encoded = cache.encoded(tokenizer, key, data.texts, data.fingerprint())
    fit, inner = inner_split(train_part.labels, run.cv.inner_fraction, run.cv.seed)
    fit_idx, inner_idx = train_idx[fit], train_idx[inner]
    resample = None
    alpha = getattr(run.tokenizer, "sampling_alpha", 0.0)
    if alpha > 0:
        texts, seed = [data.texts[i] for i in fit_idx], run.seed

        def sampled(epoch: int) -> EncodedTitles:
            return EncodedTitles.from_lists(tokenizer.encode_sampled(texts, alpha, seed + epoch))

        resample = sampled
    return PreparedFold(
        tokenizer,
        key,
        EncodedSplit(
            encoded.take(fit_idx),
            data.labels[fit_idx],
            resample,
            soft_targets[fit_idx] if soft_targets is not None else None,
        ),
        EncodedSplit(encoded.take(val_idx), data.labels[val_idx]),
        EncodedSplit(encoded.take(inner_idx), data.labels[inner_idx]),
        np.asarray(val_idx),
        data.label_names,
    )


def lightning_flags(cfg: TrainerConfig) -> dict:
    """The trainer settings that are Lightning Trainer's own flags, passed on as they are: a new
    flag is one field in TrainerConfig. The precision is left to the job's resolved device."""
    accepted = inspect.signature(L.Trainer.__init__).parameters
    return {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name in accepted and f.name != "precision"}


def make_trainer(
    cfg: TrainerConfig,
    precision: str,
    fold_dir: Path,
    logger: Optional[Logger],
    callbacks: list,
    reload_train_data: bool = False,
) -> L.Trainer:
    show_bar = cfg.progress_bar == "rich" or (cfg.progress_bar == "auto" and sys.stdout.isatty())
    # A caller's own bar (klue_tc.jobs.progress) is used when a bar is shown, and left out when not.
    own_bars = [c for c in callbacks if isinstance(c, ProgressBar)]
    callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    callbacks = [*callbacks, LogEveryEpoch(cfg.log_every_n_steps)]
    if show_bar:
        callbacks = [*callbacks, *(own_bars[:1] or [RichProgressBar()])]
    return L.Trainer(
        **lightning_flags(cfg),
        precision=precision,
        use_distributed_sampler=False,  # the batch sampler shares out each batch itself (datamodule.py)
        logger=logger or False,
        callbacks=callbacks,
        enable_progress_bar=show_bar,
        enable_model_summary=False,
        default_root_dir=str(fold_dir),
        num_sanity_val_steps=0,
        reload_dataloaders_every_n_epochs=int(reload_train_data),
        plugins=[AtomicCheckpointIO()],
    )


def new_module(
    run: RunConfig, tokenizer: Tokenizer, label_names: Sequence[str], pretrained: Optional[PretrainedEncoder]
) -> TopicClassifierModule:
    """The fold's classifier, seeded; its encoder from the pretrained weights when given."""
    L.seed_everything(run.seed, workers=True, verbose=False)
    module = TopicClassifierModule.from_configs(
        tokenizer.vocab_size, tokenizer.specials, run.encoder, run.head, run.optim, run.augment, label_names
    )
    if run.distill.on:
        module.distill_cfg = run.distill
    if pretrained is not None:
        load_pretrained_encoder(module.model, pretrained)
    if run.trainer.compile:
        # Widths rounded to a multiple (data.pad_multiple) are few: a graph specialised to each is
        # faster than one symbolic in the width, which any width would need.
        module.model = torch.compile(module.model, dynamic=run.data.pad_multiple == 1)
    return module


def selection_callbacks(
    run: RunConfig, fold: int, state_dir: Path, monitor: FoldMonitor
) -> tuple[ModelCheckpoint, list[L.Callback]]:
    """The callbacks that make the fold's model (the best checkpoint among them, returned first):
    the inner split chooses the epoch; the training state is saved to resume from."""
    # The EMA comes first, so that FoldMonitor's step time includes its update.
    averaging = [ExponentialMovingAverage(run.optim.ema_decay)] if run.optim.ema_decay > 0 else []
    # Weights-only checkpoints skip the callbacks' save hooks, so with an EMA the best checkpoint is
    # a full one (its state_dict then holds the averaged weights that were validated), slimmed after fit.
    best = ModelCheckpoint(
        dirpath=str(state_dir),
        filename="best",
        monitor=SELECTION_METRIC,
        mode="max",
        save_top_k=1,
        save_weights_only=not averaging,
        enable_version_counter=False,
    )
    latest = ResumeCheckpoint(state_dir, RESUME_CHECKPOINT_EVERY_S, fold)
    early_stop = EarlyStopping(monitor=SELECTION_METRIC, mode="max", patience=run.trainer.early_stopping_patience)
    return best, [*averaging, monitor, RandomState(), best, latest, early_stop]


def keep_model(
    best: ModelCheckpoint, tokenizer: Tokenizer, fold_dir: Path, diverged: Optional[str]
) -> tuple[Optional[Path], Path]:
    """The chosen weights (none after a divergence) and the tokenizer, in the fold's folder."""
    checkpoint = None
    if best.best_model_path and diverged is None:
        checkpoint = fold_dir / "best.ckpt"
        save_weights_only(Path(best.best_model_path), checkpoint)
    with reporting_full_disk(fold_dir / "tokenizer"):
        tokenizer_dir = tokenizer.save(fold_dir / "tokenizer")
    return checkpoint, tokenizer_dir


def fit(trainer: L.Trainer, module: TopicClassifierModule, datamodule, resume_from: Optional[Path], fold: int):
    """Lightning's fit, stopping at a step boundary when asked; the divergence's message, or None."""
    try:
        with interrupts.at_step_boundaries():
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    except TrainingDiverged as err:
        log.warning("fold %d diverged: %s; its record is marked diverged, left out of the CV mean", fold, err)
        return str(err)
    return None


@dataclass
class FoldScores:
    """The chosen checkpoint on the held-out fold and, when given, on the validation titles."""

    scored: ValidationScore
    predictions: FoldPredictions
    validation: Optional[ValidationScore] = None


def score_fold(
    chosen: TopicClassifierModule, prepared: PreparedFold, validation: Optional[LabelledTitles], batch_size: int
) -> FoldScores:
    """Computed once, after fit (and as prediction computes it), so that nothing during training
    could have read the held-out fold's score to choose."""
    pad = prepared.tokenizer.specials.pad
    scored_probs = encoded_probs(chosen, prepared.val.encoded, pad, batch_size)
    scored = score_predictions(prepared.val.labels, scored_probs.argmax(1), "held-out fold", prepared.label_names)
    scores = FoldScores(
        scored, FoldPredictions(TitlePredictions.of(prepared.val_index, prepared.val.labels, scored_probs))
    )
    if validation is not None:
        probs = predict_probs(chosen, prepared.tokenizer, validation.texts, batch_size)
        scores.validation = score_predictions(
            validation.labels, probs.argmax(1), validation.source, prepared.label_names
        )
        scores.predictions.validation = TitlePredictions.of(np.arange(len(validation)), validation.labels, probs)
    return scores


def train_fold(
    job: JobContext,
    fold: int,
    prepared: PreparedFold,
    logger: Optional[Logger] = None,
    callbacks: Sequence[L.Callback] = (),
    pretrained: Optional[PretrainedEncoder] = None,
) -> Optional[FoldResult]:
    """Train one fold. Its training state is checkpointed into the job's state folder as epochs end
    (at most once a minute), and an interrupted fold resumes there; the best weights end up in the
    fold's folder and are scored on the job's validation titles, if any. `callbacks` watch the
    training (progress, logging) and run after the ones that make it. None on the other ranks of a
    multi-device fit. With `pretrained`, the encoder starts from its weights."""
    started = time.perf_counter()
    run, fold_dir, state_dir = job.run, job.fold_dir(fold), job.state_dir(fold)
    module = new_module(run, prepared.tokenizer, prepared.label_names, pretrained)
    datamodule = FoldDataModule(
        prepared.train, prepared.inner, prepared.val, run.data, prepared.tokenizer.specials.pad, run.seed
    )
    resume_from = resume_point(fold, state_dir, run.results.resume)
    monitor = FoldMonitor(job.clock.start, started)
    best, makers = selection_callbacks(run, fold, state_dir, monitor)
    trainer = make_trainer(
        run.trainer,
        job.device.precision,
        fold_dir,
        logger,
        [*makers, *callbacks],
        reload_train_data=prepared.train.resample is not None,
    )
    diverged = fit(trainer, module, datamodule, resume_from, fold)
    if not trainer.is_global_zero:
        return None  # the other ranks of a multi-device fit only train: rank 0 keeps the files and numbers
    checkpoint, tokenizer_dir = keep_model(best, prepared.tokenizer, fold_dir, diverged)
    train_seconds = monitor.fold_seconds
    chosen = TopicClassifierModule.load_from_checkpoint(checkpoint, map_location="cpu") if checkpoint else module
    scores = score_fold(chosen, prepared, job.inputs.validation if checkpoint else None, run.data.eval_batch_size)
    if logger is not None:  # beside the per-epoch curves, whose val/ maximum is not the fold's score
        chosen_epoch = monitor.best_epoch + 1
        logger.log_metrics(
            {"fold/f1": scores.scored.f1, "fold/accuracy": scores.scored.accuracy, "fold/epoch": chosen_epoch}
        )
        logger.save()
    trained = TrainedFold(fold, trainer, monitor, module, checkpoint, tokenizer_dir, train_seconds, diverged)
    return fold_record(job, prepared, trained, scores, pretrained)


@dataclass
class TrainedFold:
    """What one fold's training left: the numbers its record is made of besides the scores."""

    fold: int
    trainer: L.Trainer
    monitor: FoldMonitor
    module: TopicClassifierModule
    checkpoint: Optional[Path]
    tokenizer_dir: Path
    train_seconds: float
    diverged: Optional[str]


def fold_record(
    job: JobContext,
    prepared: PreparedFold,
    trained: TrainedFold,
    scores: FoldScores,
    pretrained: Optional[PretrainedEncoder],
) -> FoldResult:
    """The fold's record, whole: what trained it, for which configuration, and what it scored. A
    diverged fold's weights are not a model: no score, left out of every mean."""
    monitor, world_size, ok = trained.monitor, trained.trainer.world_size, trained.diverged is None
    model = getattr(trained.module.model, "_orig_mod", trained.module.model)  # the eager model under torch.compile
    scored_ids = prepared.val.encoded.ids
    return FoldResult(
        fold=trained.fold,
        f1=scores.scored.f1 if ok else float("nan"),
        accuracy=scores.scored.accuracy if ok else float("nan"),
        best_epoch=monitor.best_epoch + 1,
        epochs_run=trained.trainer.current_epoch,
        train_samples_per_s=monitor.samples_per_s,
        time_to_first_step_s=monitor.time_to_first_step,
        train_seconds=trained.train_seconds,
        sittings=monitor.sittings,
        train_size=len(prepared.train.encoded),
        val_size=len(prepared.val.encoded),
        checkpoint=str(trained.checkpoint.resolve()) if trained.checkpoint else None,
        checkpoint_sha256=sha256_of(trained.checkpoint) if trained.checkpoint else None,
        tokenizer_dir=str(trained.tokenizer_dir.resolve()),
        describe=job.describe,
        config_hash=job.key,
        precision=job.device.precision,
        code=job.code,
        data_source=job.inputs.train.source,
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        device=job.device.name + (f" x{world_size}" if world_size > 1 else ""),
        threads=torch.get_num_threads(),
        validation=scores.validation if ok else None,
        pretrained=pretrained.record() if pretrained is not None else None,
        diverged=trained.diverged,
        inner_f1=monitor.best_inner_f1 if monitor.best_epoch >= 0 else None,
        inner_accuracy=monitor.best_inner_accuracy if monitor.best_epoch >= 0 else None,
        inner_size=len(prepared.inner.encoded),
        selected_on=SELECTED_ON_INNER_SPLIT,
        learning_curve=[EpochScores(**point) for point in monitor.curve],
        model_size=measure(
            model,
            prepared.val.encoded.lengths,
            int(scored_ids[0]) if len(scored_ids) else prepared.tokenizer.specials.cls,
        ),
        predictions=scores.predictions if ok else None,
    )
