"""Achieved GFLOP/s: the FLOPs of the timed training steps, and the machine's matrix-product peak.

FLOPs are counted by klue_tc.training.model_size.forward_flops (torch's flop counter plus the recurrent
layers' matrix products) on one title of each padded width the timed steps met, times the titles
trained at that width; a training step is taken as 3x its forward pass (the backward computes the
gradients of both the inputs and the weights). The peak is a large square matrix product in the
same precision, thread count and clock as the training runs: what this machine's BLAS achieves,
not its data sheet's figure.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

import torch
from torch import nn

from klue_tc.training.model_size import forward_flops

TRAIN_STEP_FACTOR = 3  # forward, plus a backward of about twice its work
PEAK_MATMUL_SIZE = 2048
PEAK_MATMUL_SIZE_GPU = 8192  # a GPU finishes a 2048 product in microseconds: launch and sync would dominate
PEAK_SECONDS = 3.0
PEAK_REPETITIONS = 10  # at least: on a busy machine the fastest of a few is still slowed


def _titles(token_id: int, width: int) -> torch.Tensor:
    return torch.full((1, width), token_id, dtype=torch.long)


def classifier_step_flops(model: nn.Module, widths: Counter, token_id: int) -> float:
    """FLOPs of the fine-tuning steps that trained `widths[w]` titles padded to width w."""
    forward = sum(titles * forward_flops(model, _titles(token_id, w)) for w, titles in widths.items())
    return TRAIN_STEP_FACTOR * forward


def masked_lm_step_flops(model: nn.Module, widths: Counter, head_rows: int, token_id: int) -> float:
    """FLOPs of the pretraining steps: the encoder over every title's padded width, and the
    masked-LM head over the `head_rows` rows it scored (klue_tc.pretraining.pretrain.MaskedBatch.head_rows)."""

    def encoder(width: int) -> float:
        ids = _titles(token_id, width)
        return forward_flops(model, ids, ids, torch.zeros_like(ids, dtype=torch.bool))

    forward = sum(titles * encoder(w) for w, titles in widths.items())
    embedding = model.encoder.embeddings.tokens.weight
    per_row = forward_flops(model.head, torch.zeros(1, embedding.size(1)), embedding)
    return TRAIN_STEP_FACTOR * (forward + head_rows * per_row)


def clock(name: str) -> Callable[[], float]:
    """The benchmark's clock: wall (time.perf_counter) or the process's CPU time (all its threads)."""
    return time.process_time if name == "cpu" else time.perf_counter


def matmul_peak(
    bf16: bool, clock_name: str, device: str = "cpu", size: int = PEAK_MATMUL_SIZE, seconds: float = PEAK_SECONDS
) -> dict:
    """GFLOP/s of a `size` x `size` matrix product (bf16 where training autocasts to bf16), the
    fastest of the repetitions that fit in `seconds` after one warm-up: interference from other work
    on a shared machine only ever slows a repetition."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(device, dtype) for _ in range(2))
    now = clock(clock_name)

    def product() -> None:
        torch.mm(a, b)
        if a.is_cuda:
            torch.cuda.synchronize()

    product()
    best, started, repetitions = float("inf"), time.perf_counter(), 0
    while repetitions < PEAK_REPETITIONS or time.perf_counter() - started < seconds:
        t0 = now()
        product()
        best, repetitions = min(best, now() - t0), repetitions + 1
    return {
        "size": size,
        "dtype": str(dtype).removeprefix("torch."),
        "repetitions": repetitions,
        "best_s": best,
        "gflops_per_s": 2 * size**3 / best / 1e9,
        "threads": torch.get_num_threads(),
        "clock": clock_name,
    }
