"""Which device and precision a job trains with: Lightning's flags, resolved once per job."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from klue_tc.core.config import GPU_ACCELERATORS, TrainerConfig
from klue_tc.core.errors import ResourceError


def uses_gpu(cfg: TrainerConfig) -> bool:
    return cfg.accelerator in GPU_ACCELERATORS or (cfg.accelerator == "auto" and torch.cuda.is_available())


def require_asked_gpu(cfg: TrainerConfig) -> None:
    """A GPU asked for by name must be there: one line now, not Lightning's traceback later."""
    if cfg.accelerator in GPU_ACCELERATORS and not torch.cuda.is_available():
        raise ResourceError(
            f"trainer.accelerator={cfg.accelerator}, but torch {torch.__version__} sees no CUDA GPU; "
            f"use trainer.accelerator=auto (the GPU when there is one) or trainer.accelerator=cpu"
        )


# The kernel's name for Intel AMX bf16 tiles; AVX-512 BF16 dot products are taken on AMD only.
AMX_FLAG = "amx_bf16"
AVX512_BF16_FLAG = "avx512_bf16"


def cpu_has_fast_bf16_matmul() -> bool:
    """Whether bf16 autocast trains faster than fp32 on this CPU (docs/speed.md): with AMX tiles,
    or with AVX-512 BF16 on AMD (Zen 4: 2.35x for the Transformer). An Intel Xeon listing
    avx512_bf16 without AMX trained 0.70x as fast in bf16, and without either bf16 is emulated,
    so fp32 stays there. Read from the Linux kernel's CPU flags; elsewhere none is assumed."""
    info = cpu_info()
    return AMX_FLAG in info.flags or (AVX512_BF16_FLAG in info.flags and info.vendor == "AuthenticAMD")


@dataclass(frozen=True)
class CpuInfo:
    vendor: str
    flags: frozenset[str]
    model: str = ""  # the first core's model name


@functools.cache  # read once per process, not once per fold
def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:  # not Linux
        return CpuInfo("", frozenset())
    values = [line.split(":", 1) for line in lines if ":" in line]
    vendor = next((v.strip() for k, v in values if k.strip() == "vendor_id"), "")
    flags = frozenset(flag for k, v in values if k.strip() == "flags" for flag in v.split())
    model = next((v.strip() for k, v in values if k.strip() == "model name"), "")
    return CpuInfo(vendor, flags, model)


def default_precision(cfg: TrainerConfig) -> str:
    if cfg.precision:
        return str(cfg.precision)
    return "bf16-mixed" if uses_gpu(cfg) or cpu_has_fast_bf16_matmul() else "32-true"


@dataclass(frozen=True)
class Device:
    """What one job trains on, resolved once before its first step (klue_tc/training/job_context.py)."""

    gpu: bool
    precision: str  # Lightning's precision setting, in the results key
    name: str  # the GPU's name, or the CPU's model, for the record of what trained a fold

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda" if self.gpu else "cpu")


def resolve_device(cfg: TrainerConfig) -> Device:
    gpu = uses_gpu(cfg)
    return Device(gpu, default_precision(cfg), torch.cuda.get_device_name(0) if gpu else cpu_info().model or "cpu")
