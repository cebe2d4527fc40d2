"""Sweep jobs in a pool of worker processes on this machine, each pinned to one GPU (or none).

A worker is pinned once, before its first job can import torch: CUDA_VISIBLE_DEVICES names its
one GPU, so the job's `cuda:0` is that GPU, and OpenMP/MKL get cores // workers threads. Jobs
run through Hydra's `run_job` the way hydra-joblib-launcher runs them, so the basic and Optuna
sweepers, the callbacks and the job folders are the same as with any other launcher.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import pickle
import signal
import time
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from klue_tc.core.errors import KlueTcError
from klue_tc.core.interrupts import JobInterrupted

from ._workers import (
    THREAD_VARS,
    describe,
    execute_job,
    pin_worker,
    plural,
    thread_settings,
    visible_gpus,
    worker_slots,
)

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
        threads = int(thread_settings(slots[0].threads, os.environ)["OMP_NUM_THREADS"])
        kept = next((f" ({var}={os.environ[var]} kept)" for var in THREAD_VARS if var in os.environ), "")
        log.info(
            f"Launching {plural(len(job_overrides), 'job')} on {describe(slots, threads)}{kept}, "
            f"sweep output dir: {sweep_dir}"
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
            failed: dict[int, str] = {}
            with stop_on_signal(pool, futures) as stop:
                for future in as_completed(futures):
                    idx = futures[future]
                    try:
                        pickled, seconds = future.result()
                        returns[idx] = ret = pickle.loads(pickled)
                    except (JobInterrupted, BrokenProcessPool, CancelledError) as err:
                        failed[idx] = why_failed(err)
                        returns[idx] = ret = failed_return(job_overrides[idx - initial_job_idx], idx, failed[idx])
                        seconds = 0.0
                    did_fail = idx in failed or ret.status == JobStatus.FAILED
                    log.info(progress.line(idx, seconds, False if did_fail else found_finished(ret), did_fail))
        if failed:
            log.error(failure_summary(failed, len(futures)))
        if stop.signum is not None:
            raise JobInterrupted(stop.signum, f"with {len(futures) - len(failed)} of {len(futures)} jobs finished")
        return [returns[idx] for idx in sorted(returns)]


class SweepJobFailed(KlueTcError):
    """A job of the sweep did not finish (interrupted, or its worker died); the next run of the
    same command runs it again."""


def why_failed(err: BaseException) -> str:
    if isinstance(err, JobInterrupted):
        return err.line().split("; resume with")[0]
    if isinstance(err, CancelledError):
        return "not started: the sweep was stopped"
    return "its worker process died (killed?); its fold resumes from its last saved state"


def failed_return(overrides: Sequence[str], idx: int, why: str) -> JobReturn:
    ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
    ret.return_value = SweepJobFailed(
        f"sweep job #{idx} ({' '.join(filter_overrides(overrides))}) failed: {why}; "
        "run the same command again to run it"
    )
    return ret


def failure_summary(failed: dict[int, str], jobs: int) -> str:
    listed = "; ".join(f"#{idx}: {why}" for idx, why in sorted(failed.items()))
    return f"sweep: {len(failed)} of {jobs} jobs failed ({listed}); the same command runs them again"


class _Stop:
    signum: Optional[int] = None


@contextlib.contextmanager
def stop_on_signal(pool: ProcessPoolExecutor, futures: dict[Future, int]):
    """SIGTERM or Ctrl-C to the launcher: no job starts any more, each running worker is sent the
    signal (it saves its fold's state at the next step and reports back), and the sweep ends once
    they have. A worker that got the same signal from the terminal counts the two as one."""
    stop = _Stop()

    def handle(signum, frame) -> None:
        if stop.signum is None:
            name = signal.Signals(signum).name
            log.warning("sweep: %s received: waiting for the running jobs to save their state", name)
        stop.signum = signum
        for future in futures:
            future.cancel()  # only the ones no worker has taken
        for process in list(getattr(pool, "_processes", {}).values()):
            with contextlib.suppress(OSError):
                os.kill(process.pid, signum)

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    for signum in previous:
        signal.signal(signum, handle)
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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

    def line(
        self, job_number: int, job_seconds: float, found_finished: Optional[bool] = None, failed: bool = False
    ) -> str:
        self.done += 1
        self.quick += job_seconds < self.found_finished_s if found_finished is None else found_finished
        elapsed = self.clock() - self.started
        worked = self.done - self.quick
        quick = f" ({self.quick} found finished)" if self.quick else ""
        if worked == 0 and self.done < self.jobs:
            eta = "ETA after the first job that trains"
        else:
            eta = f"ETA {_hms(elapsed / (worked or self.done) * (self.jobs - self.done))} at the pace so far"
        ended = "FAILED" if failed else "ended"
        return f"sweep: job #{job_number} {ended}, {self.done}/{self.jobs} done{quick} | elapsed {_hms(elapsed)}, {eta}"


def _hms(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))
