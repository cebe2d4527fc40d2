"""Typed schemas for the Hydra config: the one place where every default lives.

Hydra composes the YAML files; merging the result onto these dataclasses makes a misspelt key, a
wrong type or an unknown choice fail at start-up with one line, not an hour into a sweep. Encoders,
heads and tokenizers are variants (klue_tc/core/registry.py): each has its own dataclass, built on the
base classes here, holding only its own keys. A setting that never changes a trained model's numbers
is declared with `outside_results_key`, so the results store's key (klue_tc/store/results.py) needs no list.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from klue_tc.core.errors import ConfigError

RESULTS_KEY = "in_results_key"
WHILE_ON = "while_on"  # keyed_while_on's mark
WHEN_SET = "when_set"  # keyed_when_set's mark


def outside_results_key(default: Any = dataclasses.MISSING, **kwargs) -> Any:
    """A dataclass field that never changes a trained model's numbers (where files are, what is
    shown or logged): left out of the results key, so changing it finds the finished folds."""
    return field(default=default, metadata={RESULTS_KEY: False}, **kwargs)


def keyed_while_on(default_factory: Any) -> Any:
    """A section in the results key only while its `on` property holds (pretrain.stall: a rule added
    off, so that every key made before it, and every key of a job with it off, is as it was)."""
    return field(default_factory=default_factory, metadata={RESULTS_KEY: WHILE_ON})


def keyed_when_set(default: Any = None) -> Any:
    """A field in the results key only when set away from `default` (pretrain.seed: null means the
    run's seed), so every key made before it, and every key of a job that leaves it, is as it was."""
    return field(default=default, metadata={RESULTS_KEY: WHEN_SET})


def in_results_key(item: Any, section: Any = None) -> bool:
    keyed = item.metadata.get(RESULTS_KEY, True)
    if keyed == WHILE_ON:
        return getattr(section, item.name).on
    if keyed == WHEN_SET:
        return getattr(section, item.name) != item.default
    return keyed


def may_be_in_results_key(item: Any) -> bool:
    """Whether some value of the field is in the results key (one keyed only while on or when set
    is, once a command line sets it)."""
    return item.metadata.get(RESULTS_KEY, True) is not False


class _Choice(str, Enum):
    """A config choice whose str() is its value (run directories, W&B configs, logs)."""

    def __str__(self) -> str:
        return self.value


class LayerNormPlacement(_Choice):
    post = "post"
    pre = "pre"


class PositionKind(_Choice):
    sinusoidal = "sinusoidal"  # the original's fixed table
    scaled_sinusoidal = "scaled_sinusoidal"  # the table times a learned gain
    learned = "learned"
    alibi = "alibi"  # none added: attention scores biased by distance
    rotary = "rotary"  # none added: queries and keys turned by position (RoPE)


class FFNActivation(_Choice):
    relu = "relu"  # the original
    gelu = "gelu"
    swiglu = "swiglu"  # a SiLU-gated pair of projections (Shazeer 2020)


class LoggerKind(_Choice):
    wandb = "wandb"
    csv = "csv"
    tensorboard = "tensorboard"
    none = "none"


Check = tuple[bool, str]


def at_least(name: str, value: float, low: float) -> Check:
    return value >= low, f"{name} must be >= {low}, got {value}"


def share(name: str, value: float, closed_top: bool = False) -> Check:
    """A rate in [0, 1) (or [0, 1])."""
    ok = 0.0 <= value <= 1.0 if closed_top else 0.0 <= value < 1.0
    return ok, f"{name} must be in [0, 1{']' if closed_top else ')'}, got {value}"


def one_of(name: str, value: Any, choices: tuple) -> Check:
    return value in choices, f"{name} must be one of {', '.join(map(str, choices))}; got {value}"


# Titles scored at a time (no gradients): the default of every caller that predicts, not only the job's.
EVAL_BATCH_SIZE = 512


@dataclass
class DataConfig:
    # A local training file; null: KLUE YNAT train from the hub, else the copy bundled with klue_tc.
    path: Optional[str] = outside_results_key(None)
    # A labelled file to score after training; null with path null: the hub's validation split.
    validation_path: Optional[str] = outside_results_key(None)
    limit: Optional[int] = None  # stratified subsample of N training titles
    # Column names in a local file (null: the first of title/text, and of label/topic_idx).
    title_column: Optional[str] = outside_results_key(None)
    label_column: Optional[str] = outside_results_key(None)
    # The label set, in id order (ids in a file index it); null: read from the training file, YNAT's
    # seven for KLUE YNAT data. Outside the key because the titles' fingerprint holds the label set.
    labels: Optional[list[str]] = outside_results_key(None)
    hub_repo: str = outside_results_key("klue/klue")
    hub_config: str = outside_results_key("ynat")
    batch_size: int = 256
    eval_batch_size: int = outside_results_key(EVAL_BATCH_SIZE)
    # Length-bucketed batches with per-batch padding; false pads every title to the longest
    # (the original notebook's data path, kept for the benchmark).
    bucketing: bool = True
    bucket_size_multiplier: int = 50
    # Each batch's width rounded up to a multiple of this: 8 on a GPU gives a handful of batch
    # shapes (8, 16, ..., 40 on YNAT), so kernels, cuDNN plans and a compiled graph are reused.
    pad_multiple: int = 1
    num_workers: int = outside_results_key(0)
    cache_dir: str = outside_results_key('${oc.env:KLUE_TC_CACHE,"~/.cache/klue_tc"}')

    def checks(self) -> list[Check]:
        return [
            (self.limit is None or self.limit > 0, f"data.limit must be positive, got {self.limit}"),
            at_least("data.batch_size", self.batch_size, 1),
            at_least("data.eval_batch_size", self.eval_batch_size, 1),
            at_least("data.pad_multiple", self.pad_multiple, 1),
            (
                self.labels is None or (len(self.labels) >= 2 and len(set(self.labels)) == len(self.labels)),
                f"data.labels must name two or more distinct labels, got {self.labels}",
            ),
        ]


@dataclass
class TokenizerConfig:
    """Keys every tokenizer has; each tokenizer's dataclass adds its own (klue_tc/tokenizers/)."""

    name: str = MISSING
    max_length: int = 128

    def checks(self) -> list[Check]:
        return [at_least("tokenizer.max_length", self.max_length, 3)]  # [CLS], one piece, [SEP]


@dataclass
class EncoderConfig:
    """Keys every encoder has (the attention stack and its embeddings); each variant's dataclass
    adds the keys of what it puts beside or instead of the FFN (klue_tc/models/encoders/)."""

    name: str = MISSING
    layers: int = 3
    ln: LayerNormPlacement = LayerNormPlacement.post
    d_model: int = 256
    heads: int = 4
    dropout: float = 0.1  # embeddings and every residual branch
    attention_dropout: float = 0.0  # on attention probabilities (the original: none)
    # scaled_sinusoidal (learned gain) | sinusoidal (fixed, the original) | learned | alibi | rotary
    positions: PositionKind = PositionKind.scaled_sinusoidal
    max_positions: int = 512
    zero_init_residual: bool = True  # residual branches start at zero: a fast, stable start

    def checks(self) -> list[Check]:
        return [
            at_least("encoder.layers", self.layers, 1),
            at_least("encoder.d_model", self.d_model, 1),
            at_least("encoder.heads", self.heads, 1),
            (
                self.heads >= 1 and self.d_model % self.heads == 0,
                f"encoder.d_model ({self.d_model}) must be divisible by encoder.heads ({self.heads})",
            ),
            share("encoder.dropout", self.dropout),
            share("encoder.attention_dropout", self.attention_dropout),
        ]


@dataclass
class HeadConfig:
    name: str = MISSING
    hidden: int = 256
    dropout: float = 0.1

    def checks(self) -> list[Check]:
        return [at_least("head.hidden", self.hidden, 1), share("head.dropout", self.dropout)]


@dataclass
class AugmentConfig:
    p: float = 0.0  # token masking probability (the original study: 0.15 when on)
    min_len: int = 5
    # > 0: also predict the original token under each [MASK] (an auxiliary masked-LM loss, this
    # weight times its cross-entropy), so the masked titles teach the encoder as well as the head.
    mlm_weight: float = 0.0
    # BERT's split of the picked tokens (Devlin et al. 2019: 0.1 and 0.1): this share shows a
    # random piece and this share stays as it was; the rest show [MASK]. The masked-LM loss
    # predicts every picked token, whatever it shows, so the encoder cannot trust a visible piece.
    random_share: float = 0.0
    keep_share: float = 0.0
    # Masking-ratio decay (Yang et al. 2023, time-variant masking): the probability falls linearly
    # from `p` at the first step to this at the last; null: `p` throughout.
    p_end: Optional[float] = None

    def checks(self) -> list[Check]:
        return [
            share("augment.p", self.p),
            at_least("augment.mlm_weight", self.mlm_weight, 0.0),
            (
                self.mlm_weight == 0.0 or self.p > 0.0,
                "augment.mlm_weight needs masked tokens to predict: set augment.p > 0 too",
            ),
            (
                self.p_end is None or (0.0 <= self.p_end < 1.0 and self.p > 0.0),
                f"augment.p_end must be in [0, 1) with augment.p > 0 (the masking it ends), got "
                f"augment.p_end={self.p_end}, augment.p={self.p}",
            ),
            share("augment.random_share", self.random_share, closed_top=True),
            share("augment.keep_share", self.keep_share, closed_top=True),
            (
                self.random_share + self.keep_share <= 1.0,
                f"augment.random_share + augment.keep_share must be at most 1, "
                f"got {self.random_share} + {self.keep_share}",
            ),
        ]


@dataclass
class OptimConfig:
    lr: float = 2e-3
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    warmup_ratio: float = 0.1
    min_warmup_steps: int = 8
    schedule: str = "cosine"  # cosine | linear | constant
    label_smoothing: float = 0.0
    ema_decay: float = 0.995
    # > 0: R-Drop (Liang et al. 2021): two dropout passes per batch, this weight times their
    # symmetric KL divergence added to the mean of their cross-entropies. Doubles a step's cost.
    rdrop_alpha: float = 0.0
    # Late regularization (after Liu et al. 2023): token masking, its masked-LM loss and R-Drop
    # begin at this epoch, so the first epochs fit at full speed.
    regularize_from_epoch: int = 0
    # Steps whose loss is NaN or infinite that are skipped (no update) before the fold is stopped
    # and recorded as diverged; 0: it stops at the first one.
    skip_nonfinite_steps: int = 0

    def checks(self) -> list[Check]:
        return [
            (self.lr > 0, f"optim.lr must be > 0, got {self.lr}"),
            at_least("optim.skip_nonfinite_steps", self.skip_nonfinite_steps, 0),
            at_least("optim.weight_decay", self.weight_decay, 0.0),
            share("optim.warmup_ratio", self.warmup_ratio),
            one_of("optim.schedule", self.schedule, ("cosine", "linear", "constant")),
            share("optim.label_smoothing", self.label_smoothing),
            share("optim.ema_decay", self.ema_decay),
            at_least("optim.rdrop_alpha", self.rdrop_alpha, 0.0),
            at_least("optim.regularize_from_epoch", self.regularize_from_epoch, 0),
        ]


# Lightning's names for the accelerators this package supports.
GPU_ACCELERATORS = ("gpu", "cuda")
ACCELERATORS = ("auto", "cpu", *GPU_ACCELERATORS)


# Lightning's precision settings (its short forms 16, 32, 64 and bf16 included), checked here so
# that a typo is one line at start-up, not Lightning's traceback once the data are ready.
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "32", "16", "bf16", "64")


@dataclass
class TrainerConfig:
    max_epochs: int = 10
    accelerator: str = outside_results_key("auto")  # auto | cpu | gpu (or cuda); the precision is keyed
    # One device per job by default (sweeps spread jobs over GPUs). N > 1 trains each fold on N
    # devices with the same global batch and steps, each rank taking its part of every batch.
    devices: Any = outside_results_key(1)
    strategy: str = outside_results_key("auto")  # auto | ddp: Lightning's; auto is ddp on several devices
    # null: bf16-mixed on a GPU and on CPUs with native bf16 (AMX or AVX-512 BF16), else 32-true.
    # The results key holds the precision a job resolves to, not this setting.
    precision: Any = outside_results_key(None)
    gradient_clip_val: float = 1.0
    early_stopping_patience: int = 3
    compile: bool = False
    progress_bar: str = outside_results_key("auto")  # auto (rich on a terminal) | rich | none
    log_every_n_steps: int = outside_results_key(20)
    fast_dev_run: Any = False
    limit_train_batches: Any = None
    deterministic: bool = False

    def checks(self) -> list[Check]:
        return [
            at_least("trainer.max_epochs", self.max_epochs, 1),
            at_least("trainer.early_stopping_patience", self.early_stopping_patience, 1),
            one_of("trainer.accelerator", self.accelerator, ACCELERATORS),
            one_of("trainer.progress_bar", self.progress_bar, ("auto", "rich", "none")),
            (
                self.precision is None or str(self.precision) in PRECISIONS,
                f"trainer.precision must be one of {', '.join(PRECISIONS)}, or null for the device's default;"
                f" got {self.precision}",
            ),
            one_of("trainer.strategy", self.strategy, ("auto", "ddp", "ddp_find_unused_parameters_true")),
        ]


@dataclass
class WandbConfig:
    project: str = "klue_tc"
    entity: Optional[str] = None
    mode: str = "offline"  # offline needs no account; online when asked and possible
    group: Optional[str] = None  # null: one group per configuration (sweep name, experiment, config hash)


@dataclass
class LoggerConfig:
    name: LoggerKind = LoggerKind.wandb
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class CVConfig:
    # 1: no CV, one final model on every training title, scored on the validation titles (klue_tc/jobs/folds.py)
    folds: int = 5
    fold: Optional[int] = outside_results_key(None)  # run only this fold (each fold has its own record)
    seed: int = 42  # fixed: the same fold assignment on every run and machine
    # The share of each training fold held out (stratified, seeded by cv.seed) to choose the epoch
    # and checkpoint on, so that the held-out fold's score is never the one that chose it.
    inner_fraction: float = 0.1

    def checks(self) -> list[Check]:
        return [
            at_least("cv.folds", self.folds, 1),
            (
                0.0 < self.inner_fraction <= 0.5,
                f"cv.inner_fraction must be in (0, 0.5], got {self.inner_fraction}",
            ),
            (
                self.fold is None or 0 <= self.fold < self.folds,
                f"cv.fold must be in 0..{self.folds - 1}, got {self.fold}",
            ),
        ]


@dataclass
class ResultsConfig:
    # null: <sweep dir>/results in a named sweep (a sweep file), else outputs/results (single runs, ad hoc -m)
    dir: Optional[str] = None
    resume: bool = True  # false: retrain even when a finished record exists
    # Records made by other code (another klue_tc source or library versions) are trained again;
    # `any` reuses them (a long sweep going on across a fix that does not change the numbers).
    reuse: str = "same_code"

    def checks(self) -> list[Check]:
        return [one_of("results.reuse", self.reuse, ("same_code", "any"))]


NO_PRETRAINING = "none"  # pretrain.objective when the encoder starts from scratch


@dataclass
class StallConfig:
    """The rule that restarts a masked-LM pretraining stuck on the token-frequency plateau
    (klue_tc/pretraining/stall.py): at `check_at` of the step budget, a loss (the mean over the last
    steps) still above the corpus's token-frequency entropy minus `margin` restarts the pretraining
    from its start (the same seed: the same initial weights and batches) at the learning rate times
    `lr_factor`, at most `max_restarts` times. It reads only the corpus and the loss; the check is
    recorded with the pretrained encoder whether or not the rule may act. In the keys only while it
    may act: a pretraining it never restarts is the same pretraining as with it off."""

    max_restarts: int = 0  # 0: off (the check is still recorded)
    # Share of the step budget done when the loss is checked. The end by default: earlier, a healthy
    # shallow encoder can still be near the plateau (docs/pretraining.md: a 2-layer TRANS-BLSTM at
    # 7.27 nats at mid-budget, 0.55 below the entropy), and a restart would change a sound pretraining.
    check_at: float = 1.0
    margin: float = 0.5  # nats below the entropy that still count as on it (the report's mark, PLATEAU_NATS)
    lr_factor: float = 0.5  # each restart's learning rate: the last one's times this

    @property
    def on(self) -> bool:
        return self.max_restarts > 0

    def checks(self) -> list[Check]:
        return [
            at_least("pretrain.stall.max_restarts", self.max_restarts, 0),
            (0.0 < self.check_at <= 1.0, f"pretrain.stall.check_at must be in (0, 1], got {self.check_at}"),
            at_least("pretrain.stall.margin", self.margin, 0.0),
            (0.0 < self.lr_factor < 1.0, f"pretrain.stall.lr_factor must be in (0, 1), got {self.lr_factor}"),
        ]


@dataclass
class PretrainConfig:
    """Self-pretraining of the encoder on unlabelled titles before fine-tuning (klue_tc/pretraining/pretrain.py):
    the keys every objective has; each objective's dataclass adds its own (klue_tc/pretraining/objectives/).
    With `none` the section is left out of the results key, so records made before it existed count."""

    # none | a registered objective: mlm (masked-language modelling, BERT's 80/10/10), electra
    # (replaced-token detection, with a generator that fills the positions masked as for mlm)
    objective: str = NO_PRETRAINING
    epochs: int = 8  # passes over the corpus
    max_steps: Optional[int] = None  # stop after this many optimiser steps instead (null: all epochs)
    mask_p: float = 0.15  # share of the real tokens picked as targets
    random_share: float = 0.1  # of the picked tokens: shown as a random piece ...
    keep_share: float = 0.1  # ... or as themselves; the rest show [MASK]
    # Pick whole words (all pieces after a SentencePiece word start '▁' go together); off by default.
    whole_word: bool = False
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    schedule: str = "linear"  # cosine | linear | constant
    batch_size: int = 256
    # Files of unlabelled text, one title a line, added to the corpus (their content is keyed).
    corpus: list[str] = outside_results_key(default_factory=list)
    # true: every labelled title of the job is left out, so all folds share one corpus and one
    # pretrained encoder; false: the fold's own training titles are in its corpus.
    same_corpus_every_fold: bool = False
    # true: titles that are scored (the held-out fold, the validation file) may be in the corpus.
    include_scored_titles: bool = False
    # true: the fold's held-out titles of the training file stay in its corpus as unlabelled text
    # (never the validation file's), so every fold of all of train shares one corpus and one encoder;
    # the folds' out-of-fold scores then come from encoders that read those titles, said in every record.
    include_held_out_titles: bool = keyed_when_set(False)
    dir: Optional[str] = outside_results_key(None)  # null: `pretrained` inside the results store
    save_every_steps: int = outside_results_key(200)  # how often the resumable state is written
    # The stall rule (klue_tc/pretraining/stall.py), for an objective whose loss the token-frequency
    # entropy bounds (mlm); off by default, and in the keys only while on, so no key made before it moved.
    stall: StallConfig = keyed_while_on(StallConfig)
    # The pretraining's own seed (initial weights, masking, batch order): a second pretraining of one
    # configuration, on the same titles and folds (the run's `seed` also draws data.limit's titles).
    # null: the run's seed.
    seed: Optional[int] = keyed_when_set()

    @property
    def active(self) -> bool:
        """Whether the encoder is pretrained (an objective is chosen)."""
        return self.objective != NO_PRETRAINING

    def seed_or(self, run_seed: int) -> int:
        """The seed the pretraining draws from."""
        return run_seed if self.seed is None else self.seed

    def store_dir(self, results_root: Path) -> Path:
        """`pretrain.dir`, else `pretrained` inside the results store: a sweep's jobs share it, and it
        lies in the folder the user named."""
        return Path(self.dir).expanduser() if self.dir else results_root / "pretrained"

    def checks(self) -> list[Check]:
        return [
            at_least("pretrain.epochs", self.epochs, 1),
            (
                self.max_steps is None or self.max_steps > 0,
                f"pretrain.max_steps must be positive, got {self.max_steps}",
            ),
            (0.0 < self.mask_p < 1.0, f"pretrain.mask_p must be in (0, 1), got {self.mask_p}"),
            share("pretrain.random_share", self.random_share, closed_top=True),
            share("pretrain.keep_share", self.keep_share, closed_top=True),
            (
                self.random_share + self.keep_share <= 1.0,
                f"pretrain.random_share + pretrain.keep_share must be at most 1, "
                f"got {self.random_share} + {self.keep_share}",
            ),
            (self.lr > 0, f"pretrain.lr must be > 0, got {self.lr}"),
            at_least("pretrain.weight_decay", self.weight_decay, 0.0),
            share("pretrain.warmup_ratio", self.warmup_ratio),
            one_of("pretrain.schedule", self.schedule, ("cosine", "linear", "constant")),
            at_least("pretrain.batch_size", self.batch_size, 1),
            at_least("pretrain.save_every_steps", self.save_every_steps, 1),
            (
                not (self.same_corpus_every_fold and self.include_held_out_titles),
                "pretrain.same_corpus_every_fold leaves out every labelled title and pretrain.include_held_out_titles "
                "keeps the held-out ones: set one of them",
            ),
            *self.stall.checks(),
        ]


@dataclass
class DistillConfig:
    """Knowledge distillation (Hinton et al. 2015): the model learns from a teacher's probabilities
    on its training titles as well as from their classes. The teacher is a soft-label file the
    ensemble stage writes (klue_tc/data/soft_labels.py: each training title's out-of-fold ensemble
    probabilities, by its text); the inner split still chooses the epoch on the true classes. In the
    results key only while a teacher is named (with the file's content), so no key made before it moved."""

    teacher: Optional[str] = outside_results_key(None)  # the soft-label file; its content is keyed
    temperature: float = 2.0  # both sides' logits divided by it in the soft loss (its gradient scaled by T^2)
    # The soft loss's share: (1 - alpha) x cross-entropy on the classes + alpha x T^2 x KL(teacher || model).
    alpha: float = 0.5

    @property
    def on(self) -> bool:
        return self.teacher is not None

    def checks(self) -> list[Check]:
        return [
            (self.temperature > 0, f"distill.temperature must be > 0, got {self.temperature}"),
            share("distill.alpha", self.alpha, closed_top=True),
        ]


NO_WIDE_PATH = "none"  # wide.name when the model is the encoder and its head alone
WIDE_PATHS = (NO_WIDE_PATH, "nbsvm")


@dataclass
class WideConfig:
    """A wide path beside the encoder, in the same model and the same forward pass ("wide and deep";
    Mesnil et al. 2014 combine NB-SVM with neural models): each title's binarised character 1-3-grams,
    NB-SVM's features (klue_tc/training/baseline.py), through a linear map on the features scaled by
    each class's naive-Bayes log-count ratio, its logits added to the head's (klue_tc/models/wide.py).
    The map starts as an NB-SVM fitted on the fold's training titles less its inner split, whose
    vocabulary and ratios it keeps (never a held-out or validation title's), and trains with the
    encoder. The model before its first step is a candidate of the epoch choice (epoch 0): where no
    trained epoch beats it on the inner split, the fold keeps it. In the results key only while on,
    so no key made before it moved."""

    name: str = NO_WIDE_PATH  # none | nbsvm
    dropout: float = 0.1  # share of a title's n-grams left out at each training step
    weight_decay: float = 0.01  # AdamW's, on the wide path's weights alone (its bias is not decayed)
    lr: Optional[float] = None  # its learning rate (the same schedule); null: optim.lr
    # NB-SVM's C and beta that start the path; null: chosen on the inner split from the NB-SVM
    # baseline's grid, as the baseline chooses them.
    svm_c: Optional[float] = None
    svm_beta: Optional[float] = None
    # The first epochs in which the wide path's weights and bias stay as they start, so that the
    # encoder and head learn around a fixed NB-SVM before both train together. 0: none.
    freeze_epochs: int = 0
    # The starting NB-SVM's scores are divided by it (its predicted classes stay the same), so that
    # they start on the scale of the network's logits. 1: NB-SVM's scores as they are; null: the
    # temperature of least log-loss on the inner split (klue_tc/training/calibration.py, as the
    # ensemble calibrates its members).
    temperature: Optional[float] = 1.0

    @property
    def on(self) -> bool:
        return self.name != NO_WIDE_PATH

    def checks(self) -> list[Check]:
        return [
            one_of("wide.name", self.name, WIDE_PATHS),
            share("wide.dropout", self.dropout),
            at_least("wide.weight_decay", self.weight_decay, 0.0),
            (self.lr is None or self.lr > 0, f"wide.lr must be > 0, got {self.lr}"),
            (
                (self.svm_c is None) == (self.svm_beta is None),
                "wide.svm_c and wide.svm_beta go together: set both, or neither to choose them on the inner split",
            ),
            (self.svm_c is None or self.svm_c > 0, f"wide.svm_c must be > 0, got {self.svm_c}"),
            (
                self.svm_beta is None or 0.0 <= self.svm_beta <= 1.0,
                f"wide.svm_beta must be in [0, 1], got {self.svm_beta}",
            ),
            at_least("wide.freeze_epochs", self.freeze_epochs, 0),
            (
                self.temperature is None or self.temperature > 0,
                f"wide.temperature must be > 0 (or null: chosen on the inner split), got {self.temperature}",
            ),
        ]


@dataclass
class SlurmConfig:
    # How often a job stopped by its time limit's signal puts itself back in the queue, counting
    # SLURM's own requeues (preemption, `scontrol requeue`); after that it fails with one line.
    max_requeues: int = 3

    def checks(self) -> list[Check]:
        return [at_least("slurm.max_requeues", self.max_requeues, 0)]


# The factors that name a cell of a grid beside its configuration key (the report compares levels of these).
GRID_FACTORS = ("encoder", "ln", "layers", "tokenizer", "pretrain")


@dataclass
class ExclusionConfig:
    """Configurations the report leaves out of its comparisons, by rules a sweep file declares before
    its jobs run (klue_tc/report/exclusions.py): each rule is declared by giving its one parameter
    (null: not declared; none is by default). A configuration any declared rule names is left out,
    and every verdict that changes is shown both ways."""

    # z: a configuration whose fold mean of macro-F1 does not clear 1/K (K classes: what a classifier
    # ignoring the title reaches) by z standard errors, the larger of its folds' spread and the
    # sampling noise of F1 on the titles it was scored on (1.96: 95 %).
    near_chance: Optional[float] = None
    # share: a configuration whose folds' lowest inner-split loss (their median) stays at or above
    # share x ln K, near the loss of predicting the class mix: it learnt next to nothing from the titles.
    stalled_inner_loss: Optional[float] = None
    # Factors whose comparisons keep the left-out configurations (pretrain: a pretraining that makes a
    # design fail is that pretraining's effect).
    kept_in: list[str] = field(default_factory=list)

    @property
    def rules(self) -> dict[str, float]:
        """The declared rules by name, each with its parameter."""
        return {
            name: value for name in ("near_chance", "stalled_inner_loss") if (value := getattr(self, name)) is not None
        }

    def checks(self) -> list[Check]:
        return [
            *[one_of("report.exclude.kept_in", factor, GRID_FACTORS) for factor in self.kept_in],
            (
                self.near_chance is None or self.near_chance >= 0,
                f"report.exclude.near_chance (z) must be >= 0, got {self.near_chance}",
            ),
            (
                self.stalled_inner_loss is None or 0 < self.stalled_inner_loss <= 1,
                f"report.exclude.stalled_inner_loss (share of ln K) must be in (0, 1], got {self.stalled_inner_loss}",
            ),
        ]


@dataclass
class ReportConfig:
    """What the report of these runs may do with their records, fixed before they run: saved in every
    run's config.yaml and the results store's, where the report reads it."""

    exclude: ExclusionConfig = field(default_factory=ExclusionConfig)
    # One line on what the runs are for, which the report (report.md and its last line) and the
    # sweep's last line print: sweeps/smoke.yaml's says its scores are not meant to mean anything.
    note: Optional[str] = None

    def checks(self) -> list[Check]:
        return [
            *self.exclude.checks(),
            (self.note is None or "\n" not in self.note.strip(), "report.note must be one line"),
        ]


@dataclass
class RunConfig:
    experiment: str = outside_results_key("default")  # set by +experiment=...; names the run directory
    sweep: Optional[str] = outside_results_key(None)  # set by sweeps/*.yaml; prefixes its W&B groups
    seed: int = 42
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = MISSING
    encoder: EncoderConfig = MISSING
    head: HeadConfig = MISSING
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = outside_results_key(default_factory=LoggerConfig)
    cv: CVConfig = field(default_factory=CVConfig)
    results: ResultsConfig = outside_results_key(default_factory=ResultsConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    # Off unless distill.teacher names a soft-label file; in the results key only then.
    distill: DistillConfig = keyed_while_on(DistillConfig)
    # Off unless wide=nbsvm; in the results key only then.
    wide: WideConfig = keyed_while_on(WideConfig)
    slurm: SlurmConfig = outside_results_key(default_factory=SlurmConfig)
    report: ReportConfig = outside_results_key(default_factory=ReportConfig)


def job_config(cfg: DictConfig) -> dict:
    """The job's own config, resolved, without Hydra's section."""
    return OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True, enum_to_str=True
    )


def pretrain_config(objective: str) -> PretrainConfig:
    """The pretrain section's dataclass for `objective`: the objective's own (klue_tc/pretraining/objectives/),
    or the shared keys alone for none."""
    from klue_tc.core.registry import OBJECTIVES

    if objective == NO_PRETRAINING:
        return PretrainConfig()
    if objective not in OBJECTIVES:
        choices = ", ".join([NO_PRETRAINING, *OBJECTIVES.names()])
        raise ConfigError(f"unknown pretrain.objective {objective!r}; valid choices: {choices}")
    return OBJECTIVES[objective].config(objective=objective)


def typed_schema(user: dict) -> DictConfig:
    """RunConfig, with each variant group typed by the chosen variant's own dataclass."""
    from klue_tc.core.registry import VARIANT_GROUPS

    schema = OmegaConf.structured(RunConfig)
    for group, registry in VARIANT_GROUPS.items():
        name = (user.get(group) or {}).get("name")
        if name is None:
            raise ConfigError(f"no {group} chosen; valid choices: {', '.join(registry.names())}")
        schema[group] = OmegaConf.structured(registry[name].config(name=name))
    objective = (user.get("pretrain") or {}).get("objective", NO_PRETRAINING)
    schema.pretrain = OmegaConf.structured(pretrain_config(objective))
    return schema


def without_other_objectives_defaults(user: dict) -> dict:
    """Configs written before objectives had their own dataclasses held pretrain.electra under
    every objective, at its defaults outside pretrain=electra: there it changes nothing, so it is
    left out (any other value is an unknown key, reported as such)."""
    from klue_tc.core.registry import OBJECTIVES

    pretrain = user.get("pretrain")
    if not isinstance(pretrain, dict):
        return user
    own = {f.name for f in fields(type(pretrain_config(pretrain.get("objective", NO_PRETRAINING))))}
    defaults = {}
    for name in OBJECTIVES.names():
        defaults |= OmegaConf.to_container(OmegaConf.structured(OBJECTIVES[name].config(objective=name)))
    unused = {k for k, v in pretrain.items() if k not in own and k in defaults and v == defaults[k]}
    return {**user, "pretrain": {k: v for k, v in pretrain.items() if k not in unused}} if unused else user


def validate(cfg: DictConfig | dict) -> RunConfig:
    """Merge a composed config onto the schema; any mismatch becomes one ConfigError line."""
    user = without_other_objectives_defaults(job_config(cfg) if isinstance(cfg, DictConfig) else cfg)
    schema = typed_schema(user)
    try:
        run: RunConfig = OmegaConf.to_object(OmegaConf.merge(schema, user))
    except OmegaConfBaseException as err:
        raise ConfigError(describe_config_error(err, schema)) from None
    for section in (
        run.data,
        run.tokenizer,
        run.encoder,
        run.head,
        run.augment,
        run.optim,
        run.trainer,
        run.cv,
        run.results,
        run.pretrain,
        run.distill,
        run.wide,
        run.slurm,
        run.report,
    ):
        for ok, message in section.checks():
            if not ok:
                raise ConfigError(message)
    return run


def describe_config_error(err: OmegaConfBaseException, schema: DictConfig) -> str:
    """One line for a bad value or key, with the nearest valid key for a misspelt one."""
    msg = str(err).splitlines()[0]
    key = getattr(err, "full_key", None)
    line = f"bad config value{f' at {key}' if key else ''}: {msg}"
    if isinstance(err, ConfigKeyError) and key:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(schema, parent) if parent else schema
        if node is not None and hasattr(node, "keys"):
            close = difflib.get_close_matches(leaf, [str(k) for k in node.keys()], n=1)
            if close:
                line = f"unknown config key {key}; did you mean {(parent + '.') if parent else ''}{close[0]}?"
    return line


def register_schemas() -> None:
    """The schema under `_schema`, and every group's options from the dataclasses: the single-option
    groups under their name, each registered variant (and pretraining objective) under its own."""
    from hydra.core.config_store import ConfigStore

    from klue_tc.core.registry import OBJECTIVES, VARIANT_GROUPS

    store = ConfigStore.instance()
    store.store(name="_schema", node=RunConfig)
    for group, name, node in [
        ("data", "ynat", DataConfig()),
        ("optim", "adamw", OptimConfig()),
        ("trainer", "default", TrainerConfig()),
    ]:
        store.store(group=group, name=name, node=node)
    for kind in LoggerKind:
        store.store(group="logger", name=kind.value, node=LoggerConfig(name=kind))
    for objective in [NO_PRETRAINING, *OBJECTIVES.names()]:
        store.store(group="pretrain", name=objective, node=pretrain_config(objective))
    for path in WIDE_PATHS:
        store.store(group="wide", name=path, node=WideConfig(name=path))
    for group, registry in VARIANT_GROUPS.items():
        for name in registry.names():
            store.store(group=group, name=name, node=registry[name].config(name=name))


def keyed_settings(config: Any) -> Any:
    """The settings that can change a trained model's numbers, as plain values (for hashing)."""
    if is_dataclass(config):
        return {f.name: keyed_settings(getattr(config, f.name)) for f in fields(config) if in_results_key(f, config)}
    if isinstance(config, (list, tuple)):
        return [keyed_settings(v) for v in config]
    if isinstance(config, dict):
        return {k: keyed_settings(v) for k, v in config.items()}
    return config.value if isinstance(config, Enum) else config
