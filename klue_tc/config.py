"""Typed schemas for the Hydra config.

Hydra composes plain YAML; merging the result onto these dataclasses makes a misspelt key,
a wrong type or an unknown choice fail at start-up with one line, not an hour into a sweep.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from klue_tc.errors import ConfigError


class _Choice(str, Enum):
    """A config choice whose str() is its value (run directories, W&B configs, logs)."""

    def __str__(self) -> str:
        return self.value


class EncoderKind(_Choice):
    transformer = "transformer"
    trans_blstm = "trans_blstm"
    trans_blstm_parallel = "trans_blstm_parallel"
    cnn = "cnn"


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


class HeadKind(_Choice):
    cls = "cls"
    blstm = "blstm"
    mean = "mean"


class TokenizerKind(_Choice):
    sentencepiece = "sentencepiece"
    mecab = "mecab"
    kobert = "kobert"


class LoggerKind(_Choice):
    wandb = "wandb"
    csv = "csv"
    none = "none"


@dataclass
class DataConfig:
    path: Optional[str] = None
    validation_path: Optional[str] = None
    limit: Optional[int] = None
    hub_repo: str = "klue/klue"
    hub_config: str = "ynat"
    batch_size: int = 256
    eval_batch_size: int = 512
    # Length-bucketed batches with per-batch padding; false pads every title to the longest
    # (the original notebook's data path, kept for the benchmark).
    bucketing: bool = True
    bucket_size_multiplier: int = 50
    num_workers: int = 0
    cache_dir: str = "~/.cache/klue_tc"


@dataclass
class TokenizerConfig:
    name: TokenizerKind = TokenizerKind.sentencepiece
    vocab_size: int = 6000
    model_type: str = "unigram"
    character_coverage: float = 0.9995
    min_freq: int = 2
    max_length: int = 128
    model_path: Optional[str] = None
    hub_repo: str = "skt/kobert-base-v1"
    sampling_alpha: float = 0.0


@dataclass
class EncoderConfig:
    name: EncoderKind = EncoderKind.transformer
    layers: int = 3
    ln: LayerNormPlacement = LayerNormPlacement.post
    d_model: int = 256
    heads: int = 4
    ffn_dim: int = 512
    ffn_activation: FFNActivation = FFNActivation.relu
    conv_channels: int = 256
    conv_kernel: int = 3
    dropout: float = 0.1
    attention_dropout: float = 0.0
    positions: PositionKind = PositionKind.scaled_sinusoidal
    max_positions: int = 512
    zero_init_residual: bool = True


@dataclass
class HeadConfig:
    name: HeadKind = HeadKind.cls
    hidden: int = 256
    dropout: float = 0.1


@dataclass
class AugmentConfig:
    p: float = 0.0
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
    # from `p` at the first step to this at the last, so late training sees titles closer to the
    # ones it will score; null: `p` throughout.
    p_end: Optional[float] = None


@dataclass
class OptimConfig:
    lr: float = 2e-3
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    warmup_ratio: float = 0.1
    min_warmup_steps: int = 8
    schedule: str = "cosine"
    label_smoothing: float = 0.0
    ema_decay: float = 0.995
    # > 0: R-Drop (Liang et al. 2021): two dropout passes per batch, this weight times their
    # symmetric KL divergence added to the mean of their cross-entropies. Doubles a step's cost.
    rdrop_alpha: float = 0.0
    # Late regularization (after Liu et al. 2023, "Dropout Reduces Underfitting"): token masking,
    # its masked-LM loss and R-Drop begin at this epoch, so the first epochs fit at full speed.
    # Together from step 0 they held a 2-epoch run on 3,000 titles near chance (macro-F1 0.14).
    regularize_from_epoch: int = 0


@dataclass
class TrainerConfig:
    max_epochs: int = 10
    accelerator: str = "auto"
    devices: Any = 1
    precision: Any = None
    gradient_clip_val: float = 1.0
    early_stopping_patience: int = 3
    compile: bool = False
    progress_bar: str = "auto"
    log_every_n_steps: int = 20
    fast_dev_run: Any = False
    limit_train_batches: Any = None
    deterministic: bool = False


@dataclass
class WandbConfig:
    project: str = "klue_tc"
    entity: Optional[str] = None
    mode: str = "offline"
    group: Optional[str] = None


@dataclass
class LoggerConfig:
    name: LoggerKind = LoggerKind.wandb
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class CVConfig:
    folds: int = 5
    fold: Optional[int] = None
    seed: int = 42


@dataclass
class ResultsConfig:
    # null: <sweep dir>/results in a multirun, outputs/results beside a single run.
    dir: Optional[str] = None
    resume: bool = True


@dataclass
class RunConfig:
    experiment: str = "default"
    sweep: Optional[str] = None
    seed: int = 42
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    cv: CVConfig = field(default_factory=CVConfig)
    results: ResultsConfig = field(default_factory=ResultsConfig)


def job_config(cfg: DictConfig) -> dict:
    """The job's own config, resolved, without Hydra's section."""
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True,
                                  enum_to_str=True)


def validate(cfg: DictConfig) -> RunConfig:
    """Merge a composed config onto the schema; any mismatch becomes one ConfigError line."""
    user = job_config(cfg)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), user)
        run: RunConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        msg = str(err).splitlines()[0]
        key = getattr(err, "full_key", None)
        raise ConfigError(f"bad config value{f' at {key}' if key else ''}: {msg}") from None
    _check_ranges(run)
    return run


# Lightning's names for the accelerators this package supports (the auto|cpu|gpu).
GPU_ACCELERATORS = ("gpu", "cuda")
ACCELERATORS = ("auto", "cpu", *GPU_ACCELERATORS)


def _one_of(name: str, value: Any, choices: tuple) -> tuple[bool, str]:
    return value in choices, f"{name} must be one of {', '.join(map(str, choices))}; got {value}"


def _at_least(name: str, value: float, low: float) -> tuple[bool, str]:
    return value >= low, f"{name} must be >= {low}, got {value}"


def _share(name: str, value: float, closed_top: bool = False) -> tuple[bool, str]:
    """A rate in [0, 1) (or [0, 1])."""
    ok = 0.0 <= value <= 1.0 if closed_top else 0.0 <= value < 1.0
    return ok, f"{name} must be in [0, 1{']' if closed_top else ')'}, got {value}"


def _check_ranges(run: RunConfig) -> None:
    enc, opt, tok, data = run.encoder, run.optim, run.tokenizer, run.data
    checks = [
        _at_least("encoder.layers", enc.layers, 1),
        _at_least("encoder.d_model", enc.d_model, 1),
        _at_least("encoder.heads", enc.heads, 1),
        (enc.heads >= 1 and enc.d_model % enc.heads == 0,
         f"encoder.d_model ({enc.d_model}) must be divisible by encoder.heads ({enc.heads})"),
        _at_least("encoder.ffn_dim", enc.ffn_dim, 1),
        _at_least("encoder.conv_kernel", enc.conv_kernel, 1),
        _share("encoder.dropout", enc.dropout),
        _share("encoder.attention_dropout", enc.attention_dropout),
        _at_least("head.hidden", run.head.hidden, 1),
        _share("head.dropout", run.head.dropout),
        _at_least("cv.folds", run.cv.folds, 2),
        (run.cv.fold is None or 0 <= run.cv.fold < run.cv.folds,
         f"cv.fold must be in 0..{run.cv.folds - 1}, got {run.cv.fold}"),
        (data.limit is None or data.limit > 0, f"data.limit must be positive, got {data.limit}"),
        _at_least("data.batch_size", data.batch_size, 1),
        _at_least("data.eval_batch_size", data.eval_batch_size, 1),
        _at_least("tokenizer.vocab_size", tok.vocab_size, 1),
        (0.0 < tok.character_coverage <= 1.0,
         f"tokenizer.character_coverage must be in (0, 1], got {tok.character_coverage}"),
        _at_least("tokenizer.max_length", tok.max_length, 3),  # [CLS], one piece, [SEP]
        _one_of("tokenizer.model_type", tok.model_type, ("unigram", "bpe", "char", "word")),
        _share("tokenizer.sampling_alpha", tok.sampling_alpha, closed_top=True),
        (tok.sampling_alpha == 0.0 or tok.name != TokenizerKind.mecab,
         "tokenizer.sampling_alpha needs a SentencePiece tokenizer (sentencepiece or kobert), not mecab"),
        (opt.lr > 0, f"optim.lr must be > 0, got {opt.lr}"),
        _at_least("optim.weight_decay", opt.weight_decay, 0.0),
        _share("optim.warmup_ratio", opt.warmup_ratio),
        _one_of("optim.schedule", opt.schedule, ("cosine", "linear", "constant")),
        _share("optim.label_smoothing", opt.label_smoothing),
        _share("optim.ema_decay", opt.ema_decay),
        _at_least("optim.rdrop_alpha", opt.rdrop_alpha, 0.0),
        _at_least("optim.regularize_from_epoch", opt.regularize_from_epoch, 0),
        _share("augment.p", run.augment.p),
        _at_least("augment.mlm_weight", run.augment.mlm_weight, 0.0),
        (run.augment.mlm_weight == 0.0 or run.augment.p > 0.0,
         "augment.mlm_weight needs masked tokens to predict: set augment.p > 0 too"),
        (run.augment.p_end is None or (0.0 <= run.augment.p_end < 1.0 and run.augment.p > 0.0),
         f"augment.p_end must be in [0, 1) with augment.p > 0 (the masking it ends), got "
         f"augment.p_end={run.augment.p_end}, augment.p={run.augment.p}"),
        _share("augment.random_share", run.augment.random_share, closed_top=True),
        _share("augment.keep_share", run.augment.keep_share, closed_top=True),
        (run.augment.random_share + run.augment.keep_share <= 1.0,
         f"augment.random_share + augment.keep_share must be at most 1, got "
         f"{run.augment.random_share} + {run.augment.keep_share}"),
        _at_least("trainer.max_epochs", run.trainer.max_epochs, 1),
        _at_least("trainer.early_stopping_patience", run.trainer.early_stopping_patience, 1),
        _one_of("trainer.accelerator", run.trainer.accelerator, ACCELERATORS),
        _one_of("trainer.progress_bar", run.trainer.progress_bar, ("auto", "rich", "none")),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def register_schemas() -> None:
    """Put the schemas under every config group as `_schema`, the first entry of its defaults."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="_schema", node=RunConfig)
    for group, node in [("data", DataConfig), ("tokenizer", TokenizerConfig), ("encoder", EncoderConfig),
                        ("head", HeadConfig), ("optim", OptimConfig), ("trainer", TrainerConfig),
                        ("logger", LoggerConfig)]:
        store.store(group=group, name="_schema", node=node)
