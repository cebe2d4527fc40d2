"""What an encoder's blocks hold, read off its registered variant: the paper's claims find their
subjects by it (the encoders with a convolution, those with a BLSTM), so an added encoder of either
kind joins them without a list of names to edit."""

from __future__ import annotations

from functools import cache
from typing import Sequence

import torch
from torch import nn

from klue_tc.core.registry import ENCODERS, Variant


def is_blstm(module: nn.Module) -> bool:
    return isinstance(module, nn.LSTM) and module.bidirectional


def is_convolution(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.conv._ConvNd)


@cache
def _modules(variant: Variant) -> tuple[nn.Module, ...]:
    """Every module of one block's sub-layers, built at the variant's defaults on the meta device
    (no memory, no random numbers drawn), as the registry's check builds it."""
    with torch.device("meta"):
        sublayers = variant.build(variant.config(name=variant.name))
    return tuple(module for sublayer in sublayers for module in sublayer.modules())


def holds(encoder: str, trait) -> bool:
    """Whether the registered encoder's blocks hold a module `trait` names (False for a name no
    variant registers: records of an encoder this code does not have)."""
    return encoder in ENCODERS and any(trait(module) for module in _modules(ENCODERS[encoder]))


def encoders_with(encoders: Sequence[str], trait) -> list[str]:
    """Those of `encoders` whose blocks hold a module `trait` names, in their order."""
    return [encoder for encoder in encoders if holds(encoder, trait)]
