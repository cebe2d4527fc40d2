"""TRANS-BLSTM-SMALL (Huang et al. 2020): a BLSTM replaces the FFN of every block."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from klue_tc.core.config import EncoderConfig
from klue_tc.core.registry import ENCODERS
from klue_tc.models.blocks import BLSTMSublayer


@dataclass
class TransBLSTMConfig(EncoderConfig):
    pass  # the BLSTM is d_model wide per direction: no keys of its own


@ENCODERS.register("trans_blstm", TransBLSTMConfig)
def trans_blstm_sublayers(cfg: TransBLSTMConfig) -> list[nn.Module]:
    return [BLSTMSublayer(cfg.d_model)]
