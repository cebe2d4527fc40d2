"""The wide path beside the encoder ("wide and deep"): NB-SVM as a layer, its class scores added to
the head's logits in the same forward pass (klue_tc/core/config.py's WideConfig)."""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

Bags = tuple[torch.Tensor, torch.Tensor]  # the titles' n-gram ids one after another, and each title's offset
NO_NGRAMS = "no n-grams"  # WideAndDeep.reading's stand-in for titles that hold none (where a model is measured)


class NBWeightedNgrams(nn.Module):
    """NB-SVM (Wang & Manning 2012) as a layer: a title's score for class c is the sum, over the
    n-grams it holds, of a weight times c's naive-Bayes log-count ratio, plus a bias:
    x . (w_c * r_c) + b_c, the form klue_tc/training/nbsvm.py fits. The ratios r stay fixed (a
    buffer); the weights w train, as NB-SVM's SVM learnt them on NB-scaled features, from where
    `start` puts them. Dropout leaves out a share of each title's n-grams in training."""

    def __init__(self, features: int, classes: int, dropout: float = 0.0):
        super().__init__()
        # Zeros until `start` or a checkpoint fills them: no random draw, so that the encoder beside
        # it starts from the weights it would start from alone.
        self.weights = nn.EmbeddingBag(features, classes, mode="sum", _weight=torch.zeros(features, classes))
        self.register_buffer("ratios", torch.zeros(features, classes))
        self.bias = nn.Parameter(torch.zeros(classes))
        self.dropout = dropout

    @torch.no_grad()
    def start(self, ratios: np.ndarray, svm_coef: np.ndarray, intercept: np.ndarray, temperature: float = 1.0) -> None:
        """From a fitted NB-SVM: its ratios and interpolated SVM weights (classes, features) and
        intercepts; its scores divided by `temperature` (weights and intercepts alike: its classes stay)."""
        self.ratios.copy_(torch.as_tensor(ratios.T, dtype=self.ratios.dtype))
        self.weights.weight.copy_(torch.as_tensor(svm_coef.T / temperature, dtype=self.weights.weight.dtype))
        self.bias.copy_(torch.as_tensor(intercept / temperature, dtype=self.bias.dtype))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        kept = None
        if self.training and self.dropout > 0:
            kept = torch.bernoulli(torch.full(ids.shape, 1 - self.dropout, device=ids.device)) / (1 - self.dropout)
        table = self.weights.weight * self.ratios  # (features, classes): w * r, each n-gram's class scores
        return F.embedding_bag(ids, table, offsets, mode="sum", per_sample_weights=kept) + self.bias


class WideAndDeep(nn.Module):
    """The classifier (encoder and head) with the wide path beside it: their logits summed, one
    forward pass per title. A batch's n-grams are set by `reading` for the calls inside it (a
    training step's passes, R-Drop's second included), so that the code that calls the classifier
    with token ids alone (TopicClassifierModule's steps) runs unchanged."""

    def __init__(self, deep: nn.Module, wide: NBWeightedNgrams):
        super().__init__()
        self.deep, self.wide = deep, wide
        self.bags: Optional[Bags | str] = None
        classes = wide.bias.numel()
        with torch.no_grad():  # the head's last layer starts at zero: the first step's scores are NB-SVM's
            last = [m for m in deep.head.modules() if isinstance(m, nn.Linear) and m.out_features == classes][-1]
            last.weight.zero_()
            last.bias.zero_()

    @property
    def encoder(self) -> nn.Module:
        """The deep classifier's encoder (pretrained weights, the masked-LM head's tied embeddings)."""
        return self.deep.encoder

    @contextlib.contextmanager
    def reading(self, bags: Bags | str) -> Iterator[None]:
        """The n-grams of the titles the calls inside are given (NO_NGRAMS: none, each its bias alone)."""
        before, self.bags = self.bags, bags
        try:
            yield
        finally:
            self.bags = before

    def forward(self, input_ids: torch.Tensor, return_states: bool = False):
        if self.bags is None:
            raise RuntimeError("the wide path needs the titles' n-grams: call the model inside reading(...)")
        if self.bags is NO_NGRAMS:
            ids = torch.zeros(0, dtype=torch.long, device=input_ids.device)
            offsets = torch.zeros(len(input_ids), dtype=torch.long, device=input_ids.device)
        else:
            ids, offsets = self.bags
        deep = self.deep(input_ids, return_states=return_states)
        logits, states = deep if return_states else (deep, None)
        logits = logits + self.wide(ids, offsets)
        return (logits, states) if return_states else logits
