"""The vanilla Transformer block (Vaswani et al. 2017): self-attention, then the position-wise FFN."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from klue_tc.core.config import EncoderConfig, FFNActivation, at_least
from klue_tc.core.registry import ENCODERS
from klue_tc.models.blocks import FeedForward


@dataclass
class TransformerConfig(EncoderConfig):
    ffn_dim: int = 512
    ffn_activation: FFNActivation = FFNActivation.relu  # relu (the original) | gelu | swiglu

    def checks(self):
        return [*super().checks(), at_least("encoder.ffn_dim", self.ffn_dim, 1)]


@ENCODERS.register("transformer", TransformerConfig)
def transformer_sublayers(cfg: TransformerConfig) -> list[nn.Module]:
    return [FeedForward(cfg.d_model, cfg.ffn_dim, cfg.ffn_activation)]
