"""One fold with the wide path on (`wide=nbsvm`, klue_tc/core/config.py's WideConfig): NB-SVM's
n-grams fitted on the fold's training titles, the classifier with NB-SVM beside its head in one
LightningModule, trained, chosen and scored as klue_tc/training/fold.py does every fold, with the
model before its first step one more candidate of the epoch choice (epoch 0: StartAsCandidate) and,
where asked, the wide path frozen for the first epochs (FreezeWidePath).

A module of its own, named in the code version only while the wide path is on
(klue_tc/store/fingerprint.py), so that with it off every results key and code version is as it was.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import Logger

from klue_tc.core.checksums import require_checksum
from klue_tc.core.config import EVAL_BATCH_SIZE, DataConfig, RunConfig, WideConfig
from klue_tc.data.batches import EncodedSplit, make_loader
from klue_tc.data.ngrams import (
    NGRAM_IDS,
    NGRAM_OFFSETS,
    FoldNgrams,
    NgramFeatures,
    NgramRows,
    WideFoldDataModule,
    with_ngrams,
)
from klue_tc.data.titles import LabelledTitles, inner_split
from klue_tc.engine.checkpoints import resume_point, save_atomically
from klue_tc.models.schedule import lr_lambda, warmup_steps
from klue_tc.models.wide import NO_NGRAMS, Bags, NBWeightedNgrams, WideAndDeep
from klue_tc.pretraining.pretrain import PretrainedEncoder, load_pretrained_encoder
from klue_tc.store.records import FoldPredictions, FoldResult, FoldValidation, RunValidation, TitlePredictions
from klue_tc.tokenizers import EncodedTitles, Tokenizer, load_tokenizer
from klue_tc.training.baseline import NB_SVM, fit_choosing_c
from klue_tc.training.calibration import fit_temperature
from klue_tc.training.callbacks import CURVE_METRICS, FoldMonitor
from klue_tc.training.evaluate import score_predictions
from klue_tc.training.fold import (
    FoldScores,
    PreparedFold,
    TrainedFold,
    fit,
    fold_record,
    keep_model,
    make_trainer,
    selection_callbacks,
)
from klue_tc.training.inference import default_device
from klue_tc.training.job_context import JobContext
from klue_tc.training.module import TopicClassifierModule, _plain
from klue_tc.training.wide_files import load_ngram_features, save_ngram_features

if TYPE_CHECKING:  # types only: the jobs room is above this one
    from klue_tc.jobs.folds import FoldTitles

log = logging.getLogger(__name__)

# The starting bias of a class none of the fold's training titles has (NB-SVM has no score for it):
# about the intercept one-vs-rest SVMs give a class that is rarely the answer.
UNSEEN_CLASS_BIAS = -1.0
# The epoch a fold's record names when it kept the model as it was before its first step.
START_EPOCH = 0


def batch_bags(batch: dict[str, torch.Tensor]) -> Bags:
    return batch[NGRAM_IDS], batch[NGRAM_OFFSETS]


class WideTopicClassifierModule(TopicClassifierModule):
    """TopicClassifierModule with the wide path beside its head: its steps, losses, masking and
    schedule as they are, each step's passes reading the batch's n-grams; the wide path's weights
    in an optimiser group of their own (wide.weight_decay, wide.lr)."""

    def __init__(
        self,
        vocab_size: int,
        specials: dict,
        encoder: dict,
        head: dict,
        optim: dict,
        augment: dict,
        label_names: Optional[list[str]] = None,
        wide: Optional[dict] = None,
    ):
        super().__init__(vocab_size, specials, encoder, head, optim, augment, label_names)
        # Plain values, as every hparam: the vocabulary's size, dropout, weight_decay, lr.
        self.wide_settings = dict(wide or {})
        path = NBWeightedNgrams(self.wide_settings["features"], len(self.label_names), self.wide_settings["dropout"])
        self.model = WideAndDeep(self.model, path)

    @classmethod
    def from_wide_configs(
        cls, run: RunConfig, tokenizer: Tokenizer, label_names: Sequence[str], features: int
    ) -> WideTopicClassifierModule:
        wide = {"features": features, "dropout": run.wide.dropout, "weight_decay": run.wide.weight_decay}
        return cls(
            tokenizer.vocab_size,
            asdict(tokenizer.specials),
            _plain(run.encoder),
            _plain(run.head),
            _plain(run.optim),
            _plain(run.augment),
            list(label_names),
            {**wide, "lr": run.wide.lr},
        )

    def forward(self, input_ids: torch.Tensor, bags: Optional[Bags] = None) -> torch.Tensor:
        """Class logits; `bags`: the titles' n-grams (inside a step: the batch's, set by the step)."""
        if bags is None:
            return self.model(input_ids)
        with self.model.reading(bags):
            return self.model(input_ids)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        with self.model.reading(batch_bags(batch)):
            return super().training_step(batch, batch_idx)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        with self.model.reading(batch_bags(batch)):
            return super().validation_step(batch, batch_idx, dataloader_idx)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        with self.model.reading(batch_bags(batch)):
            return super().predict_step(batch, batch_idx)

    def configure_optimizers(self) -> dict:
        """TopicClassifierModule's optimiser and schedule, with the wide path's weights and bias in
        groups of their own (its weights decayed by wide.weight_decay, its bias not), at wide.lr."""
        cfg, wide = self.optim_cfg, self.model.wide
        own = {id(p) for p in wide.parameters()}
        decay, no_decay = [], []
        for name, param in self.named_parameters():
            if id(param) in own:
                continue
            # As TopicClassifierModule: norms, biases and embeddings are not decayed.
            (no_decay if param.dim() < 2 or "embeddings" in name else decay).append(param)
        lr = self.wide_settings.get("lr") or cfg.lr
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": cfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
                {"params": [wide.weights.weight], "weight_decay": self.wide_settings["weight_decay"], "lr": lr},
                {"params": [wide.bias], "weight_decay": 0.0, "lr": lr},
            ],
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            foreach=True,
        )
        self.total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = warmup_steps(cfg.warmup_ratio, cfg.min_warmup_steps, self.total_steps)
        # One factor for every group: each follows the schedule from its own learning rate.
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.schedule, warmup, self.total_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


# --- the fold's n-grams ----------------------------------------------------------------------------


def fit_ngram_features(
    texts: Sequence[str], labels: np.ndarray, classes: int, wide: WideConfig, inner_fraction: float, cv_seed: int
) -> NgramFeatures:
    """NB-SVM on a fold's training titles less their inner split (the titles the encoder trains
    on: fit_choosing_c splits them as prepare_fold does), its vocabulary theirs alone; (C, beta)
    chosen on the inner split from the NB-SVM baseline's grid, as the baseline's are, unless
    wide.svm_c and wide.svm_beta fix them. A class none of those titles has gets no weights. The
    temperature its scores start divided by: wide.temperature, or (null) the one of least log-loss
    on the inner split (as the ensemble calibrates its members out of fold)."""
    grid = None if wide.svm_c is None else [(wide.svm_c, wide.svm_beta)]
    pipeline, chosen = fit_choosing_c(texts, labels, inner_fraction, cv_seed, grid, baseline=NB_SVM)
    vectorizer, svm = (step for _, step in pipeline.steps)
    seen = np.asarray(svm.classes_, dtype=int)
    ratios, svm_coef = (np.zeros((classes, svm.coef_.shape[1])) for _ in range(2))
    ratios[seen], svm_coef[seen] = svm.nb_ratios_, svm.svm_coef_
    intercept = np.full(classes, UNSEEN_CLASS_BIAS)
    intercept[seen] = svm.intercept_
    features = NgramFeatures(vectorizer, ratios, svm_coef, intercept, list(chosen["C"]), chosen["inner_f1"])
    if wide.temperature is None:
        _, inner = inner_split(labels, inner_fraction, cv_seed)  # the split fit_choosing_c chose on
        scores = features.decision_function([texts[i] for i in inner])
        features.temperature = fit_temperature(scores, labels[inner])
    else:
        features.temperature = float(wide.temperature)
    return features


def fold_ngrams(run: RunConfig, titles: FoldTitles) -> tuple[NgramFeatures, FoldNgrams]:
    """The fold's n-gram vocabulary, ratios and starting NB-SVM, from its training titles less the
    inner split (never a held-out, inner or validation title), and the n-grams of each of its
    splits, in the order prepare_fold encodes them."""
    data: LabelledTitles = titles.titles
    train_idx = np.asarray(titles.train_idx)
    texts, labels = [data.texts[i] for i in train_idx], data.labels[train_idx]
    # The SVMs' coordinate descent shuffles with numpy's global generator: seeded, a fold's n-grams
    # and its starting NB-SVM are the same on every run, a resumed one's included.
    L.seed_everything(run.seed, workers=True, verbose=False)
    features = fit_ngram_features(texts, labels, len(data.label_names), run.wide, run.cv.inner_fraction, run.cv.seed)
    fit, inner = inner_split(labels, run.cv.inner_fraction, run.cv.seed)
    rows = FoldNgrams(
        features.rows([texts[i] for i in fit]),
        features.rows([texts[i] for i in inner]),
        features.rows([data.texts[i] for i in titles.scored_idx]),
    )
    log.info(
        "wide path: %d n-grams from %d training titles; NB-SVM C/beta %s, inner-split macro-F1 %.4f, "
        "its scores divided by %.3g",
        features.size,
        len(fit),
        "/".join(f"{v:g}" for v in features.setting),
        features.inner_f1,
        features.temperature,
    )
    return features, rows


def new_wide_module(
    run: RunConfig,
    prepared: PreparedFold,
    features: NgramFeatures,
    pretrained: Optional[PretrainedEncoder],
) -> WideTopicClassifierModule:
    """The fold's classifier as klue_tc.training.fold.new_module makes it (seeded: the encoder and
    head start as they would alone), the wide path beside it starting as the fitted NB-SVM, its
    scores divided by the features' temperature."""
    L.seed_everything(run.seed, workers=True, verbose=False)
    module = WideTopicClassifierModule.from_wide_configs(run, prepared.tokenizer, prepared.label_names, features.size)
    module.model.wide.start(features.ratios, features.svm_coef, features.intercept, features.temperature)
    if run.distill.on:
        module.distill_cfg = run.distill
    if pretrained is not None:
        load_pretrained_encoder(module.model.deep, pretrained)
    if run.trainer.compile:  # the encoder and head; the wide path's bags vary in length with every batch
        module.model.deep = torch.compile(module.model.deep, dynamic=run.data.pad_multiple == 1)
    return module


# --- probabilities ---------------------------------------------------------------------------------


@torch.inference_mode()
def wide_encoded_probs(
    module: WideTopicClassifierModule,
    encoded: EncodedTitles,
    ngrams: NgramRows,
    pad_id: int,
    batch_size: int = EVAL_BATCH_SIZE,
    device: Optional[torch.device] = None,
) -> np.ndarray:
    """(n, classes) probabilities of titles encoded by the model's tokenizer, with their n-grams, in their order."""
    device = device or default_device()
    module.eval().to(device)
    loader = make_loader(EncodedSplit(encoded, None), DataConfig(eval_batch_size=batch_size), pad_id, train=False)
    probs = np.zeros((len(encoded), len(module.label_names)), dtype=np.float32)
    for batch in with_ngrams(loader, ngrams):
        bags = (batch[NGRAM_IDS].to(device), batch[NGRAM_OFFSETS].to(device))
        logits = module(batch["input_ids"].to(device), bags)
        probs[batch["index"].numpy()] = torch.softmax(logits.float(), -1).cpu().numpy()
    return probs


def wide_probs(
    module: WideTopicClassifierModule,
    tokenizer: Tokenizer,
    features: NgramFeatures,
    texts: Sequence[str],
    batch_size: int = EVAL_BATCH_SIZE,
    device: Optional[torch.device] = None,
) -> np.ndarray:
    """(n, classes) probabilities in the order of `texts`: klue_tc.training.inference.predict_probs
    for a model with the wide path."""
    encoded = EncodedTitles.from_lists(tokenizer.encode(texts))
    return wide_encoded_probs(module, encoded, features.rows(texts), tokenizer.specials.pad, batch_size, device)


def score_wide_fold(
    chosen: WideTopicClassifierModule,
    prepared: PreparedFold,
    ngrams: FoldNgrams,
    features: NgramFeatures,
    validation: Optional[LabelledTitles],
    batch_size: int,
) -> FoldScores:
    """klue_tc.training.fold.score_fold with each title's n-grams: once, after fit."""
    pad = prepared.tokenizer.specials.pad
    scored_probs = wide_encoded_probs(chosen, prepared.val.encoded, ngrams.val, pad, batch_size)
    scored = score_predictions(prepared.val.labels, scored_probs.argmax(1), "held-out fold", prepared.label_names)
    scores = FoldScores(
        scored, FoldPredictions(TitlePredictions.of(prepared.val_index, prepared.val.labels, scored_probs))
    )
    if validation is not None:
        probs = wide_probs(chosen, prepared.tokenizer, features, validation.texts, batch_size)
        scores.validation = score_predictions(
            validation.labels, probs.argmax(1), validation.source, prepared.label_names
        )
        scores.predictions.validation = TitlePredictions.of(np.arange(len(validation)), validation.labels, probs)
    return scores


def wide_fold_probs(record: FoldResult, texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
    """A fold model's probabilities (klue_tc.training.inference.load_fold, then predict_probs), its
    checkpoint checked against the record, its n-grams read beside its tokenizer."""
    if not record.checkpoint or not Path(record.checkpoint).is_file():
        raise FileNotFoundError(f"fold {record.fold}: checkpoint {record.checkpoint} is missing")
    require_checksum(Path(record.checkpoint), record.checkpoint_sha256, "the fold's record")
    module = WideTopicClassifierModule.load_from_checkpoint(record.checkpoint, map_location=default_device())
    features = load_ngram_features(record.tokenizer_dir)
    return wide_probs(module, load_tokenizer(record.tokenizer_dir), features, texts, batch_size)


def score_wide_run(
    records: list[FoldResult], validation: LabelledTitles, batch_size: int = EVAL_BATCH_SIZE
) -> RunValidation:
    """klue_tc.training.evaluate.score_run for fold models with the wide path: the fold ensemble
    (averaged probabilities) on the validation titles."""
    scored = records[0].validation if len(records) == 1 else None
    if scored and scored.confusion_matrix and (scored.source, scored.size) == (validation.source, len(validation)):
        score = scored  # a one-fold ensemble is that fold's model, scored on these titles as it finished
    else:
        probs = np.mean([wide_fold_probs(r, validation.texts, batch_size) for r in records], axis=0)
        score = score_predictions(validation.labels, probs.argmax(1), validation.source, validation.label_names)
    alone = [FoldValidation(r.fold, r.validation.f1, r.validation.accuracy) for r in records if r.validation]
    return RunValidation(score, alone)


# --- the start as a candidate, the frozen path ---------------------------------------------------


class StartAsCandidate(L.Callback):
    """The model before its first step as a candidate of the epoch choice ("epoch 0"). Lightning's
    sanity check, run over every batch of the inner split and of the held-out fold (train_wide_fold
    asks for all of them), scores it as each epoch's validation scores the model: the same loaders,
    precision and metrics, and the fit's random generators isolated from it, so that the training
    draws what it would draw without it. `monitor` takes it as the first point of the learning curve
    and as the best so far: a trained epoch is chosen only where it beats it on the inner split
    (strictly, as epochs beat each other), and early stopping counts its patience from it. A resumed
    fold runs no sanity check; its saved state holds the start's scores."""

    def __init__(self, monitor: FoldMonitor):
        self.monitor = monitor

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        monitor = self.monitor
        if not trainer.sanity_checking or monitor.curve or trainer.global_step > 0:  # an epoch, or a resumed fold
            return
        metrics = sanity_check_metrics(trainer)
        scores = {field: metrics[metric] for field, metric in CURVE_METRICS.items()}
        monitor.curve.append({"epoch": START_EPOCH, **scores})
        # FoldMonitor counts epochs from 0 and the records from 1: the start is its epoch -1.
        monitor.best_inner_f1, monitor.best_epoch = scores["inner_f1"], START_EPOCH - 1
        monitor.best_inner_accuracy = scores["inner_accuracy"]
        stop = trainer.early_stopping_callback
        if stop is not None:
            stop.best_score = torch.tensor(scores["inner_f1"])
        log.info(
            "wide path: the model before its first step (epoch 0): inner-split macro-F1 %.4f (a candidate of "
            "the epoch choice), val macro-F1 %.4f",
            scores["inner_f1"],
            scores["f1"],
        )


def sanity_check_metrics(trainer: L.Trainer) -> dict[str, float]:
    """What the sanity check under way logged, each validation loader's (the losses) with those of
    the whole check (macro-F1, accuracy), as an epoch's validation would hand them on. Lightning
    keeps each loader's apart and, in a sanity check, hands none of them on: they are read where it
    holds them until the check ends (its result collection, one loader at a time)."""
    results = trainer._results
    before, metrics = results.dataloader_idx, {}
    try:
        for loader in (None, *range(len(trainer.val_dataloaders))):
            results.dataloader_idx = loader
            metrics.update(results.metrics(on_step=False)["callback"])
    finally:
        results.dataloader_idx = before
    return {name: float(value) for name, value in metrics.items()}


def start_kept(monitor: FoldMonitor) -> bool:
    """Whether the fold's choice is the model before its first step: no trained epoch beat it."""
    return monitor.best_epoch < 0 and bool(monitor.curve) and monitor.curve[0]["epoch"] == START_EPOCH


class FreezeWidePath(L.Callback):
    """The wide path's weights and bias as they start for the first `epochs` epochs, while the
    encoder and head train around them: their gradients are dropped before each optimiser step
    (before gradient clipping, which then measures the rest alone), so AdamW leaves them bit for
    bit, weight decay included. From epoch `epochs` + 1 they train with the rest."""

    def __init__(self, epochs: int):
        self.epochs = epochs

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        if trainer.current_epoch < self.epochs:
            for param in pl_module.model.wide.parameters():
                param.grad = None


def save_start(module: WideTopicClassifierModule, start: dict[str, torch.Tensor], fold_dir: Path) -> Path:
    """The model before its first step as the fold's chosen weights, written as keep_model writes a
    trained epoch's (weights, hyperparameters, versions: what loading it needs)."""
    checkpoint = fold_dir / "best.ckpt"
    save_atomically(
        {
            "state_dict": start,
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": L.__version__,
            "epoch": START_EPOCH,
            "global_step": 0,
        },
        checkpoint,
    )
    return checkpoint


# --- the fold --------------------------------------------------------------------------------------


def train_wide_fold(
    job: JobContext,
    fold: int,
    titles: FoldTitles,
    prepared: PreparedFold,
    logger: Optional[Logger] = None,
    callbacks: Sequence[L.Callback] = (),
    pretrained: Optional[PretrainedEncoder] = None,
) -> Optional[FoldResult]:
    """klue_tc.training.fold.train_fold with the wide path: the same checkpoints, resumption, choice
    of epoch on the inner split and record, the model before its first step one more candidate
    (epoch 0: where no trained epoch beats it, the fold keeps it and its record's best_epoch is 0);
    the wide path frozen for its first wide.freeze_epochs epochs; the n-grams' files beside the
    fold's tokenizer."""
    started = time.perf_counter()
    run, fold_dir, state_dir = job.run, job.fold_dir(fold), job.state_dir(fold)
    features, ngrams = fold_ngrams(run, titles)
    module = new_wide_module(run, prepared, features, pretrained)
    # The start, as every sitting of the fold builds it again (seeded): kept where it is chosen.
    start = {name: value.detach().clone() for name, value in module.state_dict().items()}
    datamodule = WideFoldDataModule(
        prepared.train, prepared.inner, prepared.val, run.data, prepared.tokenizer.specials.pad, run.seed, ngrams
    )
    resume_from = resume_point(fold, state_dir, run.results.resume)
    monitor = FoldMonitor(job.clock.start, started)
    best, makers = selection_callbacks(run, fold, state_dir, monitor)
    wide = [StartAsCandidate(monitor), *([FreezeWidePath(run.wide.freeze_epochs)] if run.wide.freeze_epochs else [])]
    trainer = make_trainer(
        run.trainer,
        job.device.precision,
        fold_dir,
        logger,
        [*makers, *wide, *callbacks],
        reload_train_data=prepared.train.resample is not None,
    )
    trainer.num_sanity_val_steps = float("inf")  # the sanity check scores the start on every batch
    diverged = fit(trainer, module, datamodule, resume_from, fold)
    if not trainer.is_global_zero:
        return None
    checkpoint, tokenizer_dir = keep_model(best, prepared.tokenizer, fold_dir, diverged)
    if diverged is None and start_kept(monitor):
        checkpoint = save_start(module, start, fold_dir)
    save_ngram_features(features, tokenizer_dir)
    train_seconds = monitor.fold_seconds
    chosen = WideTopicClassifierModule.load_from_checkpoint(checkpoint, map_location="cpu") if checkpoint else module
    validation = job.inputs.validation if checkpoint else None
    scores = score_wide_fold(chosen, prepared, ngrams, features, validation, run.data.eval_batch_size)
    if logger is not None:
        logger.log_metrics(
            {"fold/f1": scores.scored.f1, "fold/accuracy": scores.scored.accuracy, "fold/epoch": monitor.best_epoch + 1}
        )
        logger.save()
    trained = TrainedFold(fold, trainer, monitor, module, checkpoint, tokenizer_dir, train_seconds, diverged)
    # The model's size is measured on titles without n-grams: the wide path's work per title, a sum
    # of some tens of its rows, is next to nothing beside the encoder's; its table counts as an embedding.
    with module.model.reading(NO_NGRAMS):
        record = fold_record(job, prepared, trained, scores, pretrained)
    if start_kept(monitor):  # fold_record leaves out the inner scores of a choice before epoch 1
        record = replace(record, inner_f1=monitor.best_inner_f1, inner_accuracy=monitor.best_inner_accuracy)
    return record
