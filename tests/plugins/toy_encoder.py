"""A toy encoder, registered the way a new variant is: one module, its own typed config."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from klue_tc.config import EncoderConfig, at_least
from klue_tc.registry import ENCODERS


@dataclass
class ToyConfig(EncoderConfig):
    toy_width: int = 16  # a key only this encoder has

    def checks(self):
        return [*super().checks(), at_least("encoder.toy_width", self.toy_width, 1)]


class ToyMixer(nn.Module):
    """A position-wise MLP of its own width after attention (what the registry's function returns)."""

    def __init__(self, d_model: int, width: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, width), nn.Tanh(), nn.Linear(width, d_model))

    def forward(self, x, padding):
        return self.net(x)

    def output_layers(self):
        return [self.net[-1]]


@ENCODERS.register("toy", ToyConfig)
def toy_sublayers(cfg: ToyConfig) -> list[nn.Module]:
    return [ToyMixer(cfg.d_model, cfg.toy_width)]
