"""How big a classifier is, so that a report can tell a better design from a bigger one.

Parameters are split into the embedding tables (which grow with the tokenizer's vocabulary, not with
the design) and the rest; FLOPs are counted by torch's flop counter on a forward pass over titles of
the job's typical length (matrix products, convolutions and attention), plus the recurrent layers'
matrix products, which the counter does not see inside the fused LSTM/GRU kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from klue_tc.core.config import validate
from klue_tc.data.titles import stratified_subsample, title_folds, training_titles
from klue_tc.models.classifier import build_classifier
from klue_tc.store.records import ModelSize
from klue_tc.tokenizers import TokenizerCache
from klue_tc.tokenizers.cache import tokenizer_key


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """(embedding, non-embedding) parameter counts; a tied table counts once."""
    seen: set[int] = set()
    embedding = 0
    for module in model.modules():
        # nn.EmbeddingBag: the wide path's n-gram table (klue_tc/models/wide.py), which grows with its vocabulary.
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            embedding += module.weight.numel()
    # Position tables kept as bare parameters (not nn.Embedding) are embeddings too.
    for name, param in model.named_parameters():
        if "positions" in name and id(param) not in seen:
            seen.add(id(param))
            embedding += param.numel()
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return embedding, total - embedding


GATES = {nn.LSTM: 4, nn.GRU: 3, nn.RNN: 1}


def recurrent_flops(rnn: nn.RNNBase, tokens: int) -> float:
    """The input and hidden matrix products of every gate, layer and direction over `tokens` steps."""
    gates = GATES[type(rnn)] if type(rnn) in GATES else 1
    directions = 2 if rnn.bidirectional else 1
    hidden, flops = rnn.hidden_size, 0.0
    for layer in range(rnn.num_layers):
        inputs = rnn.input_size if layer == 0 else hidden * directions
        flops += 2.0 * gates * hidden * (inputs + hidden) * directions * tokens
    return flops


def forward_flops(model: nn.Module, input_ids: torch.Tensor, *more_inputs: torch.Tensor) -> float:
    """FLOPs of one forward pass over `input_ids` (batch, length) with no padding (and any further
    inputs the model takes): counted by torch, plus every recurrent layer's run over every token
    (the BLSTM blocks call the fused kernel directly, which neither the counter nor a module hook sees)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids, *more_inputs)
    finally:
        model.train(was_training)
    tokens = input_ids.numel()
    recurrent = sum(recurrent_flops(m, tokens) for m in model.modules() if isinstance(m, nn.RNNBase))
    return float(counter.get_total_flops()) + recurrent


def measure(model: nn.Module, lengths: np.ndarray, token_id: int, titles: int = 8) -> ModelSize:
    """The model's size, its FLOPs counted on `titles` titles of the median length in `lengths`."""
    length = max(1, int(np.median(lengths))) if len(lengths) else 1
    device = next(model.parameters()).device
    input_ids = torch.full((titles, length), token_id, dtype=torch.long, device=device)
    embedding, rest = parameter_counts(model)
    return ModelSize(embedding, rest, forward_flops(model, input_ids) / titles, length)


class ModelBuilder:
    """Builds a configuration's classifier from its resolved config as training built it, and
    measures it; the training titles and each fold's tokenizer are read once and kept."""

    def __init__(self) -> None:
        self._titles: dict[str, Any] = {}
        self._tokenizers: dict[str, tuple[Any, np.ndarray]] = {}

    def size(self, config: dict, fold: int = 0) -> ModelSize:
        run = validate(config)
        data, (train_idx, val_idx) = self._fold(run, fold)
        tokenizer, lengths = self._tokenizer(run, data, train_idx, val_idx)
        model = build_classifier(tokenizer.vocab_size, tokenizer.specials.pad, run.encoder, run.head, data.num_classes)
        return measure(model, lengths, tokenizer.specials.cls)

    def _fold(self, run, fold: int):
        key = repr((run.data.path, run.data.title_column, run.data.label_column, run.data.labels, run.data.limit))
        key += repr((run.seed, run.cv.folds, run.cv.seed))
        if key not in self._titles:
            data = stratified_subsample(training_titles(run.data, announce_fallback=False), run.data.limit, run.seed)
            self._titles[key] = (data, title_folds(data, run.cv.folds, run.cv.seed))
        data, folds = self._titles[key]
        return data, folds[fold]

    def _tokenizer(self, run, data, train_idx: np.ndarray, val_idx: np.ndarray):
        train = data.subset(train_idx)
        key = tokenizer_key(run.tokenizer, train.fingerprint())
        if key not in self._tokenizers:
            cache = TokenizerCache(run.data.cache_dir)
            tokenizer, key = cache.tokenizer(run.tokenizer, train.texts, train.fingerprint())
            encoded = cache.encoded(tokenizer, key, data.texts, data.fingerprint())
            self._tokenizers[key] = (tokenizer, encoded.take(val_idx).lengths)
        return self._tokenizers[key]
