"""The CNN-augmented encoder: a 1-D convolution over the sequence before the FFN of every block."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from klue_tc.core.config import at_least
from klue_tc.core.registry import ENCODERS
from klue_tc.models.blocks import ConvSublayer, FeedForward
from klue_tc.models.encoders.transformer import TransformerConfig


@dataclass
class CNNConfig(TransformerConfig):
    conv_channels: int = 256
    conv_kernel: int = 3

    def checks(self):
        return [
            *super().checks(),
            at_least("encoder.conv_channels", self.conv_channels, 1),
            at_least("encoder.conv_kernel", self.conv_kernel, 1),
        ]


@ENCODERS.register("cnn", CNNConfig)
def cnn_sublayers(cfg: CNNConfig) -> list[nn.Module]:
    return [
        ConvSublayer(cfg.d_model, cfg.conv_channels, cfg.conv_kernel, cfg.dropout),
        FeedForward(cfg.d_model, cfg.ffn_dim, cfg.ffn_activation),
    ]
