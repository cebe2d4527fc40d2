"""Which tokens a masked objective picks, and how training shows them: the fine-tuning
augmentation's and both pretraining objectives' one place for it."""

from __future__ import annotations

from dataclasses import astuple
from functools import reduce

import torch

from klue_tc.tokenizers import SpecialIds


def any_of(ids: torch.Tensor, values: tuple[int, ...]) -> torch.Tensor:
    """Where `ids` holds one of `values`. Compared id by id: a tensor of the values built here
    would be a host-to-GPU copy every training step."""
    return reduce(torch.logical_or, (ids.eq(value) for value in values))


def masking_probability(p: float, p_end: float | None, progress: float) -> float:
    """The masking probability `progress` (0 to 1) of the way through training: `p` throughout, or
    falling linearly from `p` to `p_end`."""
    return p if p_end is None else p + (p_end - p) * min(1.0, max(0.0, progress))


def never_hidden(specials: SpecialIds) -> tuple[int, ...]:
    """The ids masking never picks."""
    return specials.pad, specials.cls, specials.sep, specials.mask


def pick_tokens(
    input_ids: torch.Tensor, specials: SpecialIds, p: float, min_len: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Which tokens the original study's augmentation hides: in titles of at least `min_len`
    tokens, each real non-special token with probability p."""
    real = ~any_of(input_ids, never_hidden(specials))
    long_enough = input_ids.ne(specials.pad).sum(1, keepdim=True) >= min_len
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device) < p
    return real & long_enough & draw


def corrupt_picked(
    input_ids: torch.Tensor,
    picked: torch.Tensor,
    specials: SpecialIds,
    vocab_size: int,
    random_share: float = 0.0,
    keep_share: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The picked tokens as training shows them: all [MASK] (the original study), or BERT's
    scheme: `random_share` of them a random piece, `keep_share` as they were, the rest [MASK]."""
    if random_share == 0 and keep_share == 0:
        # No further draws, so the original study's scheme keeps the random stream it always had.
        return input_ids.masked_fill(picked, specials.mask)
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    random_ids = torch.randint(0, vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    # A special id drawn as the random piece would pad, frame or mask the title; the token stays.
    drawn_special = any_of(random_ids, astuple(specials))
    shown = torch.where(
        draw < random_share,
        torch.where(drawn_special, input_ids, random_ids),
        torch.where(draw < random_share + keep_share, input_ids, specials.mask),
    )
    return torch.where(picked, shown, input_ids)


def pick_whole_words(
    input_ids: torch.Tensor, specials: SpecialIds, starts: torch.Tensor, p: float, generator: torch.Generator
) -> torch.Tensor:
    """Whole words picked with probability p: every piece takes the draw of its word's first piece."""
    real = ~any_of(input_ids, never_hidden(specials))
    begins = starts[input_ids] | ~real
    positions = torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)
    word_start = torch.where(begins, positions, 0).cummax(dim=1).values
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    return real & (draw.gather(1, word_start) < p)
