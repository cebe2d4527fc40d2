"""A masked-LM head: the augmentation's auxiliary loss on [MASK] tokens, and pretraining's."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# Pretraining's (both objectives') head rows are rounded up to a multiple of this: a few dozen
# shapes for oneDNN's kernel cache, where fine-tuning's 256 (module.MLM_ROW_BUCKET) padded a
# batch of 256 titles' ~650 masked rows by a third (make bench counts the rows). The bucket sets
# the matrix shapes and so the rounding: encoders pretrained with another bucket (the study's code
# used 256) re-train equal within noise, not bit for bit.
HEAD_ROW_BUCKET = 64


def round_up(count, bucket: int):
    """`count` (an int or a tensor) rounded up to a multiple of `bucket`."""
    return count + (-count) % bucket


def masked_rows(
    states: torch.Tensor, targets: torch.Tensor, where: torch.Tensor, bucket: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked positions' rows, their count rounded up to a multiple of `bucket` (the extra
    rows are ignored targets): on a CPU every new matrix shape gets its own oneDNN kernel, kept in a
    cache of up to 1,024, and a new count every step grew a 10-epoch run to 6.6 GB."""
    rows = where.nonzero().squeeze(1)
    masked = len(rows)
    rows = F.pad(rows, (0, round_up(masked, bucket) - masked))
    targets = targets[rows]
    targets[masked:] = -100
    return states[rows], targets


class MaskedLMHead(nn.Module):
    """Dense-GELU-LayerNorm, then scores against the token embedding matrix (tied, as in BERT).

    The embedding is passed in at call time rather than registered here, so it is stored once in
    a checkpoint and the classifier's state dict keeps its keys whether or not this head exists.
    """

    def __init__(self, d_model: int, vocab_size: int, in_features: int | None = None):
        """`in_features`: the width of the states scored, where narrower than the embedding (an
        ELECTRA generator's); the transform brings them to the embedding's `d_model`."""
        super().__init__()
        self.transform = nn.Sequential(nn.Linear(in_features or d_model, d_model), nn.GELU(), nn.LayerNorm(d_model))
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, states: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(states), token_embedding, self.bias)

    def loss(
        self,
        states: torch.Tensor,
        token_embedding: torch.Tensor,
        original: torch.Tensor,
        picked: torch.Tensor,
        bucket: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy of the `original` tokens at the `picked` positions of `states` (batch x
        length x width), and the scores. With a `bucket` only the picked rows are scored (rows in
        order, then ignored ones up to a multiple of `bucket`); with None every position is (the
        rest as ignored targets): picking rows needs their count on the host, a GPU sync a step."""
        where = picked.flatten()
        targets = original.flatten().masked_fill(~where, -100)
        states = states.flatten(0, 1)
        if bucket is not None:
            states, targets = masked_rows(states, targets, where, bucket)
        scores = self(states, token_embedding)
        # Summed, then divided by at least 1: a batch with nothing picked adds 0 and keeps the graph.
        loss = F.cross_entropy(scores.float(), targets, ignore_index=-100, reduction="sum") / where.sum().clamp(min=1)
        return loss, scores
