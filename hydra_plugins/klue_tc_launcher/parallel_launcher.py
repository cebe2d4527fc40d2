"""Sweep jobs in a pool of worker processes on this machine, each pinned to one GPU (or none).

A worker is pinned once, before its first job can import torch: CUDA_VISIBLE_DEVICES names its
one GPU, so the job's `cuda:0` is that GPU, and OpenMP/MKL get cores // workers threads. Jobs
run through Hydra's `run_job` the way hydra-joblib-launcher runs them, so the basic and Optuna
sweepers, the callbacks and the job folders are the same as with any other launcher.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import pickle
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from ._workers import describe, execute_job, pin_worker, plural, visible_gpus, worker_slots

log = logging.getLogger(__name__)


class ParallelLauncher(Launcher):
    def __init__(self, n_jobs: int = 2, gpus: Optional[Sequence[Any]] = None, jobs_per_gpu: int = 1) -> None:
        self.n_jobs, self.jobs_per_gpu = n_jobs, jobs_per_gpu
        self.gpus = None if gpus is None else [str(gpu) for gpu in gpus]
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import cloudpickle  # the task function is wrapped by hydra.main, so plain pickle cannot name it
        from joblib import cpu_count  # the cores this process may use (affinity and cgroup quota)

        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        if not job_overrides:
            return []
        gpus = visible_gpus() if self.gpus is None else self.gpus
        slots = worker_slots(gpus, self.jobs_per_gpu, cpu_count(), self.n_jobs, jobs=len(job_overrides))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        kept = f" (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} kept)" if "OMP_NUM_THREADS" in os.environ else ""
        log.info(
            f"Launching {plural(len(job_overrides), 'job')} on {describe(slots)}{kept}, sweep output dir: {sweep_dir}"
        )
        for idx, overrides in enumerate(job_overrides):
            log.info(f"\t#{initial_job_idx + idx} : {' '.join(filter_overrides(overrides))}")

        payload = cloudpickle.dumps((self.hydra_context, self.config, self.task_function, Singleton.get_state()))
        # spawn: a fresh interpreter per worker, so nothing of CUDA or torch's thread pool is inherited.
        context = multiprocessing.get_context("spawn")
        free_slots = context.SimpleQueue()
        for slot in slots:
            free_slots.put(slot)
        with ProcessPoolExecutor(
            len(slots), mp_context=context, initializer=pin_worker, initargs=(free_slots,)
        ) as pool:
            futures = {
                pool.submit(execute_job, initial_job_idx + idx, list(overrides), payload): initial_job_idx + idx
                for idx, overrides in enumerate(job_overrides)
            }
            progress = SweepProgress(len(futures))
            returns: dict[int, JobReturn] = {}
            for future in as_completed(futures):
                pickled, seconds = future.result()
                returns[futures[future]] = ret = pickle.loads(pickled)
                log.info(progress.line(futures[future], seconds, found_finished(ret)))
            return [returns[idx] for idx in sorted(returns)]


def found_finished(ret: JobReturn) -> Optional[bool]:
    """Whether the job trained nothing: every fold its metrics.json lists is one it reused from the
    results store. None when it wrote no metrics.json this time (it failed, or is not a klue_tc run)."""
    if ret.status != JobStatus.COMPLETED or ret.hydra_cfg is None:
        return None
    try:  # the job's folder, not ret.working_dir: without hydra.job.chdir that is the launch folder
        output_dir = Path(ret.hydra_cfg.hydra.runtime.output_dir)
        metrics = json.loads((output_dir / "metrics.json").read_text(encoding="utf-8"))
        return set(metrics["reused_folds"]) >= {fold["fold"] for fold in metrics["folds"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


class SweepProgress:
    """The whole sweep's progress, a line as each job ends: a sweep of many hours says where it is.

    A resumed sweep first runs through the jobs its results store already holds, seconds each; the
    pace counts only the jobs that trained, so those do not make an ETA of hours one of minutes. A
    job says so in its metrics.json; one that wrote none counts as found finished when it took under
    `found_finished_s`.
    """

    found_finished_s = 5.0  # a job that trains anything takes longer (data, tokenizer, a fold)

    def __init__(self, jobs: int, clock=time.monotonic):
        self.jobs, self.done, self.quick, self.clock = jobs, 0, 0, clock
        self.started = clock()

    def line(self, job_number: int, job_seconds: float, found_finished: Optional[bool] = None) -> str:
        self.done += 1
        self.quick += job_seconds < self.found_finished_s if found_finished is None else found_finished
        elapsed = self.clock() - self.started
        worked = self.done - self.quick
        quick = f" ({self.quick} found finished)" if self.quick else ""
        if worked == 0 and self.done < self.jobs:
            eta = "ETA after the first job that trains"
        else:
            eta = f"ETA {_hms(elapsed / (worked or self.done) * (self.jobs - self.done))} at the pace so far"
        return f"sweep: job #{job_number} ended, {self.done}/{self.jobs} done{quick} | elapsed {_hms(elapsed)}, {eta}"


def _hms(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))
