"""Encoder + head: the whole topic classifier as a plain nn.Module."""

from __future__ import annotations

import torch
from torch import nn

from klue_tc.core.config import EncoderConfig, HeadConfig
from klue_tc.models.encoder import Encoder
from klue_tc.models.heads import build_head


class TopicClassifier(nn.Module):
    def __init__(self, vocab_size: int, pad_id: int, encoder: EncoderConfig, head: HeadConfig, classes: int):
        super().__init__()
        self.pad_id = pad_id
        self.encoder = Encoder(vocab_size, encoder, pad_id)
        self.head = build_head(encoder.d_model, head, classes)
        self._init_weights(encoder.zero_init_residual)

    def _init_weights(self, zero_init_residual: bool) -> None:
        # As in the original study: Xavier-uniform for every weight matrix.
        for name, param in self.named_parameters():
            if param.dim() > 1 and "positions" not in name:
                nn.init.xavier_uniform_(param)
        with torch.no_grad():
            self.encoder.embeddings.tokens.weight[self.pad_id].zero_()
        if zero_init_residual:
            # Each residual branch starts as zero, so at step 0 every block passes its input on
            # and the head sees the embeddings directly; the branches then learn from there.
            # Post-LN stacks otherwise sit at chance for the first tens of steps.
            for residual in self.encoder.residuals():
                for layer in residual.sublayer.output_layers():
                    nn.init.zeros_(layer.weight)
                    nn.init.zeros_(layer.bias)

    def encode(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states (batch, length, d) and the padding mask."""
        padding = input_ids.eq(self.pad_id)
        return self.encoder(input_ids, padding), padding

    def forward(self, input_ids: torch.Tensor, return_states: bool = False):
        """Class logits; with `return_states`, also the token states (for a masked-LM loss)."""
        states, padding = self.encode(input_ids)
        logits = self.head(states, padding)
        return (logits, states) if return_states else logits


def build_classifier(
    vocab_size: int, pad_id: int, encoder: EncoderConfig, head: HeadConfig, classes: int
) -> TopicClassifier:
    return TopicClassifier(vocab_size, pad_id, encoder, head, classes)
