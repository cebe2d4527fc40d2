"""The paper's TRANS-BLSTM (Huang et al. 2020): a BLSTM beside the FFN, their outputs summed."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from klue_tc.core.registry import ENCODERS
from klue_tc.models.blocks import FFNWithBLSTM
from klue_tc.models.encoders.transformer import TransformerConfig


@dataclass
class TransBLSTMParallelConfig(TransformerConfig):
    pass  # the FFN's keys; the BLSTM beside it is d_model wide per direction


@ENCODERS.register("trans_blstm_parallel", TransBLSTMParallelConfig)
def trans_blstm_parallel_sublayers(cfg: TransBLSTMParallelConfig) -> list[nn.Module]:
    return [FFNWithBLSTM(cfg.d_model, cfg.ffn_dim, cfg.ffn_activation)]
