"""Which device and precision a job trains with: Lightning's flags, resolved once per job."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from klue_tc.config import GPU_ACCELERATORS, TrainerConfig
from klue_tc.errors import ResourceError


def uses_gpu(cfg: TrainerConfig) -> bool:
    return cfg.accelerator in GPU_ACCELERATORS or (cfg.accelerator == "auto" and torch.cuda.is_available())


def require_asked_gpu(cfg: TrainerConfig) -> None:
    """A GPU asked for by name must be there: one line now, not Lightning's traceback later."""
    if cfg.accelerator in GPU_ACCELERATORS and not torch.cuda.is_available():
        raise ResourceError(
            f"trainer.accelerator={cfg.accelerator}, but torch {torch.__version__} sees no CUDA GPU; "
            f"use trainer.accelerator=auto (the GPU when there is one) or trainer.accelerator=cpu"
        )


# The kernel's names for native bf16 matrix products: AMX tiles, AVX-512 BF16 dot products.
BF16_MATMUL_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def cpu_has_bf16_matmul() -> bool:
    """Native bf16 matrix products: Intel AMX tiles, or AVX-512 BF16 dot products (AMD Zen 4 and
    later, Intel Cooper Lake). There bf16 autocast trains faster than fp32 at the same macro-F1
    (docs/speed.md); without them bf16 on CPU is emulated and slower, so fp32 stays. Read from
    the Linux kernel's CPU flags (torch exposes the same check only privately); elsewhere none is
    assumed."""
    return not BF16_MATMUL_FLAGS.isdisjoint(cpu_flags())


@functools.cache  # read once per process, not once per fold
def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:  # not Linux
        return frozenset()
    flag_lines = (line.split(":", 1)[1] for line in text.splitlines() if line.startswith("flags"))
    return frozenset(flag for flags in flag_lines for flag in flags.split())


def default_precision(cfg: TrainerConfig) -> str:
    if cfg.precision:
        return str(cfg.precision)
    return "bf16-mixed" if uses_gpu(cfg) or cpu_has_bf16_matmul() else "32-true"


def device_name(cfg: TrainerConfig) -> str:
    """The GPU's name, or the CPU's model, for the record of what trained a fold."""
    if uses_gpu(cfg):
        return torch.cuda.get_device_name(0)
    try:
        names = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
    except OSError:
        names = []
    return names[0] if names else "cpu"
