"""Masked-language modelling (BERT): the encoder predicts each picked token from the title around it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from klue_tc.core.config import PretrainConfig, RunConfig
from klue_tc.core.registry import OBJECTIVES
from klue_tc.models.encoder import Encoder
from klue_tc.models.masked_lm import HEAD_ROW_BUCKET, MaskedLMHead
from klue_tc.pretraining.objectives import Objective, classifier_encoder
from klue_tc.tokenizers import Tokenizer


@dataclass
class MaskedLMConfig(PretrainConfig):
    """The shared pretraining keys (klue_tc/core/config.py) and none of its own."""


class MaskedLanguageModel(nn.Module):
    """The classifier's encoder with a tied masked-LM head that scores only the picked positions."""

    def __init__(self, encoder: Encoder, vocab_size: int, pad_id: int):
        super().__init__()
        self.encoder, self.pad_id = encoder, pad_id
        self.head = MaskedLMHead(encoder.embeddings.tokens.embedding_dim, vocab_size)

    def forward(
        self, shown: torch.Tensor, original: torch.Tensor, picked: torch.Tensor, rng: Optional[torch.Generator] = None
    ) -> torch.Tensor:
        """The masked-LM loss; `rng` is unused (the masked LM draws nothing), taken as every
        objective's model takes it so that one loop drives them all."""
        states = self.encoder(shown, shown.eq(self.pad_id))
        # Gathered before the vocabulary projection: the head's cost is that of the picked rows only.
        loss, _ = self.head.loss(states, self.encoder.embeddings.tokens.weight, original, picked, HEAD_ROW_BUCKET)
        return loss


@OBJECTIVES.register("mlm", MaskedLMConfig)
class MaskedLM(Objective):
    loss_name = "MLM loss"
    frequency_plateau = True

    @classmethod
    def model(cls, run: RunConfig, tokenizer: Tokenizer) -> MaskedLanguageModel:
        return MaskedLanguageModel(classifier_encoder(run, tokenizer), tokenizer.vocab_size, tokenizer.specials.pad)
