"""Embeddings and the stack of encoder blocks; each variant (models/encoders/) says what follows attention."""

from __future__ import annotations

import inspect
import math

import torch
from torch import nn

from klue_tc.core.config import EncoderConfig, LayerNormPlacement, PositionKind
from klue_tc.core.errors import ConfigError
from klue_tc.core.registry import ENCODERS, Variant
from klue_tc.models.blocks import Residual, SelfAttention


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    position = torch.arange(length)[:, None]
    frequency = torch.exp(-torch.arange(0, d_model, 2) * math.log(10000.0) / d_model)
    table = torch.zeros(length, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
    return table


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d) plus positions, then dropout.

    Positions: `sinusoidal` (fixed table, as in the original), `scaled_sinusoidal` (the same table
    times a learned gain that starts at d^-0.5, as in Hua et al. 2022), `learned`, or none here
    with `alibi` and `rotary` (attention biases its scores by distance, or turns queries and keys
    by position, instead). With the fixed table at full strength every token looks different at
    every position, and a from-scratch model needs many more steps before it learns anything.
    """

    def __init__(self, vocab_size: int, cfg: EncoderConfig, pad_id: int):
        super().__init__()
        self.scale = math.sqrt(cfg.d_model)
        self.tokens = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.drop = nn.Dropout(cfg.dropout)
        self.add_positions = cfg.positions not in (PositionKind.alibi, PositionKind.rotary)
        if cfg.positions == PositionKind.learned:
            self.positions = nn.Parameter(torch.zeros(cfg.max_positions, cfg.d_model))
            nn.init.normal_(self.positions, std=0.02)
        elif self.add_positions:
            self.register_buffer("positions", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False)
        if self.add_positions:
            scaled = cfg.positions == PositionKind.scaled_sinusoidal
            self.position_gain = nn.Parameter(torch.tensor(cfg.d_model**-0.5 if scaled else 1.0), requires_grad=scaled)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) * self.scale
        if self.add_positions:
            x = x + self.positions[: input_ids.size(1)] * self.position_gain
        return self.drop(x)


def check_encoder_variant(variant: Variant) -> None:
    """An encoder variant, built once at its defaults (on the meta device: no memory, no random
    numbers drawn), must give sub-layers that take (x, padding) and name their output layers
    (klue_tc.models.blocks.Sublayer gives a default); otherwise one line says what is missing."""
    where = f"encoder {variant.name!r} ({variant.build.__module__})"
    if not (isinstance(variant.config, type) and issubclass(variant.config, EncoderConfig)):
        raise ConfigError(f"{where}: its config {variant.config!r} must be a dataclass extending EncoderConfig")
    try:
        with torch.device("meta"):
            sublayers = variant.build(variant.config(name=variant.name))
    except Exception as err:  # a variant's own bug, named in one line with what it raised
        raise ConfigError(f"{where}: building it at its config's defaults failed: {err!r}") from None
    if not isinstance(sublayers, (list, tuple)) or not sublayers:
        raise ConfigError(f"{where}: must return a non-empty list of sub-layers, got {sublayers!r}")
    for sublayer in sublayers:
        kind = type(sublayer).__name__
        if not isinstance(sublayer, nn.Module):
            raise ConfigError(f"{where}: sub-layer {kind} is not a torch.nn.Module")
        if not callable(getattr(sublayer, "output_layers", None)):
            raise ConfigError(
                f"{where}: sub-layer {kind} lacks output_layers(); subclass klue_tc.models.blocks.Sublayer"
            )
        try:
            inspect.signature(sublayer.forward).bind("x", "padding")
        except TypeError:
            raise ConfigError(f"{where}: sub-layer {kind}.forward must take (x, padding)") from None


class EncoderBlock(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        pre_ln = cfg.ln == LayerNormPlacement.pre
        alibi, rotary = cfg.positions == PositionKind.alibi, cfg.positions == PositionKind.rotary
        attention = SelfAttention(
            cfg.d_model,
            cfg.heads,
            cfg.attention_dropout,
            alibi=alibi,
            rotary_positions=cfg.max_positions if rotary else 0,
        )
        sublayers = [attention, *ENCODERS[cfg.name].build(cfg)]
        self.sublayers = nn.ModuleList(Residual(s, cfg.d_model, cfg.dropout, pre_ln) for s in sublayers)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        for sublayer in self.sublayers:
            x = sublayer(x, padding)
        return x


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, cfg: EncoderConfig, pad_id: int):
        super().__init__()
        self.embeddings = Embeddings(vocab_size, cfg, pad_id)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.layers))
        # Pre-LN leaves the residual stream un-normalised; one final norm as in pre-LN Transformers.
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.ln == LayerNormPlacement.pre else nn.Identity()

    def residuals(self) -> list[Residual]:
        return [sublayer for block in self.blocks for sublayer in block.sublayers]

    def forward(self, input_ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(input_ids)
        for block in self.blocks:
            x = block(x, padding)
        return self.final_norm(x)
