"""The workers of the parallel launcher: which GPU and how many threads each one gets, how it
is pinned to them, and how it runs a job.

The leading underscore keeps Hydra's plugin scan from re-running this module (it re-runs every
other module under hydra_plugins), so its classes stay the ones their module names.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import run_job, setup_globals
from hydra.errors import CompactHydraException
from omegaconf import open_dict

from klue_tc.core import interrupts

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class LauncherConfigError(CompactHydraException):
    """A hydra.launcher value out of range: one line, before any job starts."""


@dataclass(frozen=True)
class Slot:
    """One worker's share of the machine."""

    gpu: Optional[str]  # its CUDA_VISIBLE_DEVICES; None: a CPU worker, the environment as it is
    threads: int


def worker_slots(
    gpus: Sequence[str], jobs_per_gpu: int, cpu_count: int, n_jobs: int, jobs: Optional[int] = None
) -> list[Slot]:
    """`jobs_per_gpu` workers on each GPU, dealt round the GPUs so that a sweep of fewer jobs
    still spreads; without a GPU, `n_jobs` CPU workers (-1: one per core). Never more workers than
    `jobs`; the cores are shared out evenly among them."""
    if jobs_per_gpu < 1:
        raise LauncherConfigError(f"hydra.launcher.jobs_per_gpu must be >= 1, got {jobs_per_gpu}")
    if n_jobs < 1 and n_jobs != -1:
        raise LauncherConfigError(f"hydra.launcher.n_jobs must be >= 1 (or -1: one per core), got {n_jobs}")
    devices: list[Optional[str]] = [gpu for _ in range(jobs_per_gpu) for gpu in gpus]
    if not devices:
        devices = [None] * (cpu_count if n_jobs == -1 else n_jobs)
    if jobs is not None:
        devices = devices[: max(1, jobs)]
    threads = max(1, cpu_count // len(devices))
    return [Slot(gpu, threads) for gpu in devices]


def visible_gpus(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs a job may use: CUDA_VISIBLE_DEVICES where it is set, else one per `nvidia-smi -L`
    line, else none. Not through torch: importing it here costs seconds and would be the launcher
    process's, not the workers'."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        gpus = []
        for entry in environ["CUDA_VISIBLE_DEVICES"].split(","):
            if not entry.strip() or entry.strip().startswith("-"):  # CUDA stops at an invalid entry; -1: none
                break
            gpus.append(entry.strip())
        return gpus
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i in range(sum(line.startswith("GPU ") for line in listing.splitlines()))]


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def describe(slots: Sequence[Slot], threads: Optional[int] = None) -> str:
    """'6 workers (3 on GPU 0, 3 on GPU 1), 4 threads each' or '2 CPU workers, 1 thread each';
    `threads`: what the workers will use where the user's setting overrides the slots'."""
    per_gpu = Counter(slot.gpu for slot in slots)
    if None in per_gpu:
        workers = plural(len(slots), "CPU worker")
    else:
        workers = plural(len(slots), "worker") + f" ({', '.join(f'{n} on GPU {gpu}' for gpu, n in per_gpu.items())})"
    return f"{workers}, {plural(threads or slots[0].threads, 'thread')} each"


def end_with_the_launcher() -> None:
    """Linux: the kernel kills this worker when the launcher process dies (a kill, a lost login),
    so no orphan trains on unseen; its fold resumes from its last checkpointed epoch on the rerun.
    (Ctrl-C reaches every worker anyway: they share the terminal's process group.)"""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def thread_settings(slot_threads: int, environ: Mapping[str, str]) -> dict[str, str]:
    """Every thread-pool variable for a worker: the user's where set (as joblib keeps it), and the
    first one the user set for the others, else the slot's share of the cores: a user's
    OMP_NUM_THREADS=1 beside a filled-in MKL_NUM_THREADS=2 gave torch two threads per worker,
    several times slower wherever the cores were already busy."""
    chosen = next((environ[var] for var in THREAD_VARS if var in environ), str(slot_threads))
    return {var: environ.get(var, chosen) for var in THREAD_VARS}


def pin_worker(free_slots: Any) -> None:
    """Runs once in each new worker, before its first job: takes a slot and pins the process to it."""
    end_with_the_launcher()
    interrupts.remember_between_jobs()
    slot = free_slots.get()
    if slot.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = slot.gpu
    os.environ.update(thread_settings(slot.threads, os.environ))
    if "torch" in sys.modules:  # imported with the main module: its thread pool may be sized already
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def execute_job(idx: int, overrides: list[str], payload: bytes) -> tuple[bytes, float]:
    """One job in a worker, set up as hydra-joblib-launcher sets it up; its pickled JobReturn and
    its own wall seconds. The worker's pinning goes into the job's hydra.job.env_set, so its
    .hydra/hydra.yaml says which GPU and threads it had."""
    import cloudpickle

    started = time.monotonic()
    hydra_context, config, task_function, singleton_state = pickle.loads(payload)
    setup_globals()
    Singleton.set_state(singleton_state)
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
        for var in ("CUDA_VISIBLE_DEVICES", *THREAD_VARS):
            if var in os.environ:
                sweep_config.hydra.job.env_set[var] = os.environ[var]
    HydraConfig.instance().set_config(sweep_config)
    ret = run_job(
        hydra_context=hydra_context,
        config=sweep_config,
        task_function=task_function,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    # Not plain pickle: Hydra's plugin scan in the worker re-runs the plugin modules, so the config
    # classes the JobReturn's hydra_cfg holds are no longer the ones their modules name.
    return cloudpickle.dumps(ret), time.monotonic() - started
