"""Pretraining objectives, registered by name like encoders: what corrupts a batch of titles, what
scores the corruption and what its loss is called.

Every module here is imported by `klue_tc.core.registry.OBJECTIVES` the first time it is read. A new
objective is one module: `@OBJECTIVES.register("name", NameConfig)` above an `Objective` subclass,
NameConfig a `PretrainConfig` with the objective's own keys; `pretrain=name` is then a choice, its
keys are in the results key and its module in the code version. The pretraining loop
(klue_tc/pretraining/pretrain.py) asks the objective for its model and its corruption and nothing else.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable, ClassVar

import torch
from torch import nn

from klue_tc.core.config import PretrainConfig, RunConfig
from klue_tc.core.errors import ConfigError
from klue_tc.core.registry import OBJECTIVES, Variant
from klue_tc.data.titles import NUM_CLASSES
from klue_tc.models import build_classifier
from klue_tc.models.encoder import Encoder
from klue_tc.pretraining.masking import corrupt_picked, pick_tokens, pick_whole_words
from klue_tc.tokenizers import Tokenizer

# (the titles' ids, the objective's random stream) -> (the ids shown to the model, which are its targets)
Corruption = Callable[[torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


class Objective:
    """An objective, as its class says it (registered, never instantiated)."""

    loss_name: ClassVar[str]  # what the progress line and W&B call its loss
    # Its loss is a masked-LM cross-entropy, so a loss near the corpus's token-frequency entropy
    # means it learnt only how often tokens occur (klue_tc/pretraining/frequency_plateau.py).
    frequency_plateau: ClassVar[bool] = False

    @classmethod
    def model(cls, run: RunConfig, tokenizer: Tokenizer) -> nn.Module:
        """The model around a new classifier's encoder (at `.encoder`, the part that is kept),
        called as model(shown, original, picked, rng) for the loss."""
        raise NotImplementedError

    @classmethod
    def corruption(cls, cfg: PretrainConfig, tokenizer: Tokenizer, device: torch.device) -> Corruption:
        """BERT's masking, as both built-in objectives corrupt."""
        return BertMasking(cfg, tokenizer, device)


class BertMasking:
    """`mask_p` of the real tokens (or whole words) picked, shown as BERT shows them: `random_share`
    a random piece, `keep_share` as they were, the rest [MASK]."""

    def __init__(self, cfg: PretrainConfig, tokenizer: Tokenizer, device: torch.device):
        self.cfg, self.specials, self.vocab_size = cfg, tokenizer.specials, tokenizer.vocab_size
        self.starts = word_start_table(tokenizer).to(device) if cfg.whole_word else None

    def __call__(self, original: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, specials = self.cfg, self.specials
        if self.starts is None:
            picked = pick_tokens(original, specials, cfg.mask_p, 0, generator)
        else:
            picked = pick_whole_words(original, specials, self.starts, cfg.mask_p, generator)
        shown = corrupt_picked(original, picked, specials, self.vocab_size, cfg.random_share, cfg.keep_share, generator)
        return shown, picked


def word_start_table(tokenizer: Tokenizer) -> torch.Tensor:
    """Per piece id: does it begin a word (SentencePiece's '▁'; the specials count as starts)."""
    processor = getattr(tokenizer, "processor", None)
    if processor is None:
        raise ConfigError(
            f"pretrain.whole_word=true needs pieces that mark word starts (sentencepiece, kobert); "
            f"the {tokenizer.kind} tokenizer's do not"
        )
    table = torch.tensor([processor.id_to_piece(i).startswith("▁") for i in range(tokenizer.vocab_size)])
    table[list(asdict(tokenizer.specials).values())] = True
    return table


def classifier_encoder(run: RunConfig, tokenizer: Tokenizer) -> Encoder:
    """The encoder initialised exactly as a from-scratch classifier's (its parameters come first)."""
    classifier = build_classifier(tokenizer.vocab_size, tokenizer.specials.pad, run.encoder, run.head, NUM_CLASSES)
    return classifier.encoder


def objective(name: str) -> type[Objective]:
    return OBJECTIVES[name].build


def pretraining_model(run: RunConfig, tokenizer: Tokenizer) -> nn.Module:
    return objective(run.pretrain.objective).model(run, tokenizer)


def check_objective_variant(variant: Variant) -> None:
    """An objective is an Objective subclass with a loss name and a model, its config a
    PretrainConfig; otherwise one line says what is missing."""
    where = f"objective {variant.name!r} ({variant.build.__module__})"
    build, config = variant.build, variant.config
    if not (isinstance(build, type) and issubclass(build, Objective)):
        raise ConfigError(f"{where}: register a subclass of klue_tc.pretraining.objectives.Objective")
    if not (isinstance(config, type) and issubclass(config, PretrainConfig)):
        raise ConfigError(f"{where}: its config must subclass klue_tc.core.config.PretrainConfig")
    if not isinstance(getattr(build, "loss_name", None), str):
        raise ConfigError(f"{where}: set loss_name, what the progress line calls its loss")
    if build.model.__func__ is Objective.model.__func__:
        raise ConfigError(f"{where}: define model(run, tokenizer), the model whose forward is the loss")
