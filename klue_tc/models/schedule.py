"""The learning-rate schedule both training steps follow: a warm-up, then constant, linear or
cosine decay."""

from __future__ import annotations

import math


def warmup_steps(ratio: float, min_steps: int, total_steps: int) -> int:
    """`ratio` of the run, but at least `min_steps` (and at most half the run). Adam's first
    updates are about lr in size whatever the gradient, so a warm-up of two steps (10 % of a
    20-step short run) throws post-LN and CNN stacks off course, and they stay at chance."""
    return max(int(ratio * total_steps), min(min_steps, total_steps // 2))


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress

    return factor
