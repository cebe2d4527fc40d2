"""A masked-LM head: the augmentation's auxiliary loss on [MASK] tokens, and pretraining's."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


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
