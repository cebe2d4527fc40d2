"""Model sizes in the records: parameters split into embeddings and the rest, FLOPs counted."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from klue_tc.store.records import FoldResult, ModelSize
from klue_tc.training.model_size import forward_flops, measure, parameter_counts, recurrent_flops


class Tiny(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 8, recurrent: bool = False):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Parameter(torch.zeros(16, d))
        self.lstm = nn.LSTM(d, d, batch_first=True, bidirectional=True) if recurrent else None
        self.out = nn.Linear(2 * d if recurrent else d, 3)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions[: ids.size(1)]
        if self.lstm is not None:
            # as the BLSTM blocks do: the fused kernel called directly, past any module hook
            weights = [getattr(self.lstm, n) for n in self.lstm._flat_weights_names]
            h0 = x.new_zeros(2, x.size(0), self.lstm.hidden_size)
            x = torch.lstm(x, (h0, h0), weights, True, 1, 0.0, False, True, True)[0]
        return self.out(x).mean(1)


def test_parameters_split_into_embedding_tables_and_the_rest():
    embedding, rest = parameter_counts(Tiny(vocab=50, d=8))
    assert embedding == 50 * 8 + 16 * 8
    assert rest == 8 * 3 + 3


def test_flops_grow_with_title_length_and_count_the_linear_layer():
    model = Tiny(d=8)
    short, long = (
        forward_flops(model, torch.ones(2, 4, dtype=torch.long)),
        forward_flops(model, torch.ones(2, 8, dtype=torch.long)),
    )
    assert short == 2 * 4 * 2 * 8 * 3  # tokens x (2 x in x out) for the output layer
    assert long == 2 * short


def test_recurrent_layers_called_through_the_fused_kernel_are_counted():
    plain, recurrent = Tiny(d=8), Tiny(d=8, recurrent=True)
    ids = torch.ones(2, 5, dtype=torch.long)
    lstm_flops = recurrent_flops(recurrent.lstm, tokens=10)
    assert lstm_flops == 2.0 * 4 * 8 * (8 + 8) * 2 * 10  # 4 gates, in + hidden, two directions
    assert forward_flops(recurrent, ids) == pytest.approx(lstm_flops + 10 * 2 * 16 * 3)
    assert forward_flops(recurrent, ids) > forward_flops(plain, ids)


def test_measure_reports_per_title_flops_at_the_median_length_and_leaves_the_mode():
    model = Tiny(d=8).train()
    size = measure(model, np.array([3, 6, 9, 30]), token_id=1)
    assert size.title_length == 7
    assert size.forward_flops_per_title == 7 * 2 * 8 * 3
    assert model.training


def test_a_record_keeps_its_model_size_through_json():
    record = FoldResult(0, 0.5, 0.6, 1, 1, None, None, 1.0, 10, 5, None, "tok", model_size=ModelSize(10, 20, 3.0, 7))
    assert FoldResult.from_dict(record.to_dict()).model_size == ModelSize(10, 20, 3.0, 7)
    old = record.to_dict()
    del old["model_size"]
    assert FoldResult.from_dict(old).model_size is None
