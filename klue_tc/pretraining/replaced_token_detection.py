"""ELECTRA's replaced-token detection (Clark et al. 2020): a small masked-LM generator fills the
picked positions with samples of its own, and the encoder (the discriminator) tells at every real
token whether it was replaced. The generator reads the encoder's token embeddings, as in ELECTRA,
so what the encoder learns about tokens serves both; only the encoder is kept after pretraining."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from klue_tc.core.config import EncoderConfig
from klue_tc.models.encoder import Encoder
from klue_tc.models.encoders.transformer import TransformerConfig
from klue_tc.models.masked_lm import HEAD_ROW_BUCKET, MaskedLMHead
from klue_tc.pretraining.masking import any_of
from klue_tc.tokenizers import SpecialIds

if TYPE_CHECKING:  # its settings' type only: the objective's module imports this one
    from klue_tc.pretraining.objectives.electra import ElectraConfig

GENERATOR_ENCODER = "transformer"  # the generator is a Transformer whatever the encoder is, as in ELECTRA


class SharedTokens(nn.Module):
    """The encoder's token embedding, projected to the generator's narrower width (ELECTRA's
    embedding projection); the embedding itself belongs to the encoder."""

    def __init__(self, tokens: nn.Embedding, width: int):
        super().__init__()
        self.shared = [tokens]  # in a list: not registered twice, so the generator holds no copy of it
        self.project = nn.Linear(tokens.embedding_dim, width, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.project(self.shared[0](input_ids))


def generator_config(encoder: EncoderConfig, cfg: ElectraConfig) -> EncoderConfig:
    """A Transformer `generator_size` times as wide as the encoder (an even width, for rotary
    positions), with as many heads of the encoder's as fit it and a FFN scaled alike."""
    width = max(2, 2 * round(encoder.d_model * cfg.generator_size / 2))
    heads = max(1, round(encoder.heads * cfg.generator_size))
    while width % heads or (width // heads) % 2:
        heads -= 1
    ffn = getattr(encoder, "ffn_dim", 2 * encoder.d_model)
    shared = {name: getattr(encoder, name) for name in ("ln", "dropout", "attention_dropout", "positions")}
    base = TransformerConfig(name=GENERATOR_ENCODER)
    return replace(
        base,
        **shared,
        max_positions=encoder.max_positions,
        zero_init_residual=encoder.zero_init_residual,
        layers=cfg.generator_layers,
        d_model=width,
        heads=heads,
        ffn_dim=max(1, round(ffn * cfg.generator_size)),
    )


def build_generator(encoder: Encoder, encoder_cfg: EncoderConfig, cfg: ElectraConfig, vocab_size: int, pad_id: int):
    """The generator's Transformer on the encoder's token embedding, initialised as a classifier's
    encoder is (Xavier-uniform matrices, residual branches at zero)."""
    config = generator_config(encoder_cfg, cfg)
    generator = Encoder(vocab_size, config, pad_id)
    generator.embeddings.tokens = SharedTokens(encoder.embeddings.tokens, config.d_model)
    for name, param in generator.named_parameters():
        if param.dim() > 1 and "positions" not in name:
            nn.init.xavier_uniform_(param)
    if config.zero_init_residual:
        for residual in generator.residuals():
            for layer in residual.sublayer.output_layers():
                nn.init.zeros_(layer.weight)
                nn.init.zeros_(layer.bias)
    return generator, config.d_model


def sample_tokens(scores: torch.Tensor, never: tuple[int, ...], rng: torch.Generator) -> torch.Tensor:
    """One token per row drawn from softmax(scores) (Gumbel-max, so `rng` alone decides it); the
    `never` ids (padding, [CLS], [SEP], [MASK]) are never drawn: they would reframe the title."""
    never_ids = torch.tensor(never, device=scores.device)
    scores = scores.detach().float().index_fill(1, never_ids, float("-inf"))  # a copy: the loss's scores stay
    uniform = torch.rand(scores.shape, generator=rng, device=scores.device).clamp_(min=1e-9, max=1 - 1e-7)
    return (scores - torch.log(-torch.log(uniform))).argmax(dim=-1)


def replaced_token_labels(
    original: torch.Tensor, picked: torch.Tensor, sampled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input (the picked positions hold the samples, in order) and its labels:
    replaced where the input differs from the original, so a sample that equals the original token
    counts as original, as in ELECTRA."""
    replaced = original.masked_scatter(picked, sampled)
    return replaced, replaced.ne(original)


class ReplacedTokenDetection(nn.Module):
    """The classifier's encoder as ELECTRA's discriminator, with a small generator beside it.

    The loss is the generator's masked-LM loss plus `discriminator_weight` times the
    discriminator's binary cross-entropy over the real tokens; no gradient passes through the
    sampling, so the generator learns from its own loss only.
    """

    def __init__(self, encoder: Encoder, encoder_cfg: EncoderConfig, cfg: ElectraConfig, vocab_size: int, specials):
        super().__init__()
        self.encoder, self.specials, self.weight = encoder, specials, cfg.discriminator_weight
        width = encoder.embeddings.tokens.embedding_dim
        self.generator, generator_width = build_generator(encoder, encoder_cfg, cfg, vocab_size, specials.pad)
        self.generator_head = MaskedLMHead(width, vocab_size, in_features=generator_width)
        self.detector = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1))

    def forward(
        self, shown: torch.Tensor, original: torch.Tensor, picked: torch.Tensor, rng: torch.Generator
    ) -> torch.Tensor:
        specials: SpecialIds = self.specials
        never = (specials.pad, specials.cls, specials.sep, specials.mask)
        padding = shown.eq(specials.pad)
        states = self.generator(shown, padding)
        # The vocabulary projection at the picked rows only (and a few ignored ones of the bucket).
        token_embedding = self.encoder.embeddings.tokens.weight
        generator_loss, scores = self.generator_head.loss(states, token_embedding, original, picked, HEAD_ROW_BUCKET)
        count = int(picked.sum())
        replaced, labels = replaced_token_labels(original, picked, sample_tokens(scores, never, rng)[:count])
        real = ~any_of(original, never)
        logits = self.detector(self.encoder(replaced, padding)).squeeze(-1)
        detection_loss = F.binary_cross_entropy_with_logits(logits[real].float(), labels[real].float())
        return generator_loss + self.weight * detection_loss
