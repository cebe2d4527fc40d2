"""Classification heads over the encoder states, registered by name; all read real tokens only."""

from __future__ import annotations

import torch
from torch import nn

from klue_tc.core.config import HeadConfig
from klue_tc.core.registry import HEADS
from klue_tc.models.blocks import packed_lstm


def mlp(d_in: int, hidden: int, classes: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, classes))


@HEADS.register("cls", HeadConfig)
class ClsHead(nn.Module):
    """The [CLS] state through Linear-ReLU-Linear."""

    def __init__(self, d_model: int, cfg: HeadConfig, classes: int):
        super().__init__()
        self.mlp = mlp(d_model, cfg.hidden, classes, cfg.dropout)

    def forward(self, states: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.mlp(states[:, 0])


@HEADS.register("mean", HeadConfig)
class MeanHead(nn.Module):
    """Masked mean over real tokens through Linear-ReLU-Linear."""

    def __init__(self, d_model: int, cfg: HeadConfig, classes: int):
        super().__init__()
        self.mlp = mlp(d_model, cfg.hidden, classes, cfg.dropout)

    def forward(self, states: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        real = (~padding)[..., None].to(states.dtype)
        return self.mlp((states * real).sum(1) / real.sum(1).clamp(min=1.0))


@HEADS.register("blstm", HeadConfig)
class BLSTMHead(nn.Module):
    """The paper's BLSTM decoder: the final state of each direction over the real tokens.

    The notebook read output position -1, which is a pad for most titles; the packed final
    states are the last real token (forward) and the first (backward).
    """

    def __init__(self, d_model: int, cfg: HeadConfig, classes: int):
        super().__init__()
        self.lstm = nn.LSTM(d_model, cfg.hidden, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(cfg.dropout)
        self.out = nn.Linear(2 * cfg.hidden, classes)

    def forward(self, states: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        _, h_n = packed_lstm(self.lstm, states, padding)
        return self.out(self.drop(torch.cat([h_n[0], h_n[1]], dim=-1)))


def build_head(d_model: int, cfg: HeadConfig, classes: int) -> nn.Module:
    return HEADS[cfg.name].build(d_model, cfg, classes)
