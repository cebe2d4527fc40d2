"""Stopping a job cleanly on a signal: SIGTERM (a scheduler, `kill`, a SLURM preemption or time
limit), Ctrl-C (SIGINT) or submitit's time-limit signal.

While a fold trains, a signal only asks it to stop: the fold's resumable checkpoint writes the
whole training state at the next step boundary and raises `JobInterrupted` there
(klue_tc/engine/checkpoints.py). Outside training (data, tokenizer, scoring) there is no step to wait
for, so the signal raises at once; every file the job writes is written atomically, so nothing is
left half-written. A second signal a few seconds after the first stops the job at once. The entry
point turns `JobInterrupted` into one line and the exit status 128 + signal (143, 130).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Iterator, Optional

from klue_tc.core.errors import KlueTcError

log = logging.getLogger(__name__)

INSIST_AFTER_S = 2.0  # a repeat sooner than this is the same stop delivered twice (group and launcher)


class JobInterrupted(BaseException):
    """A job stopped by a signal. A BaseException, as KeyboardInterrupt is, so that no `except
    Exception` on the way (a logger, a fold's bookkeeping) takes it for an error and goes on."""

    def __init__(self, signum: int, where: str = "", requeued: bool = False):
        super().__init__(signum, where, requeued)
        self.signum, self.where, self.requeued = signum, where, requeued
        self.announced = False  # its line has been printed

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self) -> str:
        name = signal.Signals(self.signum).name
        where = f" {self.where}" if self.where else ""
        if self.requeued:
            return f"stopped by {name}{where}; requeued, the job resumes from there by itself"
        return f"interrupted by {name}{where}; resume with: {resume_command()}"

    def __str__(self) -> str:
        return self.line()


class _State:
    signum: Optional[int] = None
    at: float = 0.0
    at_step_boundary = False  # a fold is training: its checkpoint callback acts on the request


_state = _State()


def requested() -> Optional[int]:
    """The signal that asked this process to stop, if one did."""
    return _state.signum


def resume_command() -> str:
    """The command that started this process (the same command resumes it)."""
    if in_submitit():  # its process was started by submitit, not by the user's command
        return "the sweep's command again (a job SLURM requeued resumes by itself)"
    return shlex.join(["python", "-m", "klue_tc", *sys.argv[1:]])


def in_submitit() -> bool:
    """Whether this process is a submitit job (hydra/launcher=slurm or submitit_local)."""
    return "SUBMITIT_FOLDER" in os.environ


def requeue_signal() -> Optional[int]:
    """The signal SLURM sends before a submitit job's time limit (submitit's --signal), in a
    submitit job on SLURM; None elsewhere."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return None
    return getattr(signal, f"SIG{os.environ.get('SUBMITIT_PREEMPT_SIGNAL', 'USR2')}", None)


def stop_signals() -> list[int]:
    signals = [signal.SIGTERM, signal.SIGINT]
    extra = requeue_signal()
    if extra is not None:
        signals.append(extra)
    return signals


def _handle(signum: int, frame) -> None:
    now = time.monotonic()
    if _state.signum is None:
        _state.signum, _state.at = signum, now
        if not _state.at_step_boundary:
            # Data, tokenizer or scoring: no step to finish, so at once; files are written atomically.
            raise JobInterrupted(signum, "outside training steps (stopped at once, from the state saved last)")
        log.warning("%s received: saving the training state at the next step", signal.Signals(signum).name)
    elif now - _state.at >= INSIST_AFTER_S:
        raise JobInterrupted(signum, "again: stopped at once, from the training state saved last")


def _remember(signum: int, frame) -> None:
    if _state.signum is None:
        _state.signum, _state.at = signum, time.monotonic()


def remember_between_jobs() -> None:
    """A process that runs jobs one after another (a parallel launcher's worker): a stop signal
    that comes while it waits for its next job is remembered, so that job stops before it begins
    (stop_on_signal), and neither kills the process nor raises. Either would end it inside the
    pool's queue read with the queue's lock held, and the launcher would wait for it forever."""
    if sys.platform == "win32":
        return
    for signum in stop_signals():
        signal.signal(signum, _remember)


def install() -> None:
    """(Re)install the handlers: Lightning's fit puts its own SIGTERM handler in front of them."""
    if sys.platform == "win32":
        return
    for signum in stop_signals():
        with contextlib.suppress(ValueError):  # not the main thread: signals cannot be handled there
            signal.signal(signum, _handle)


@contextlib.contextmanager
def stop_on_signal() -> Iterator[None]:
    """Handle the stop signals while a job runs; a signal that already came stops the next job of
    this process before it begins (a parallel launcher's worker gets no further jobs)."""
    if _state.signum is not None:
        raise JobInterrupted(_state.signum, "before this job began")
    previous = {signum: signal.getsignal(signum) for signum in stop_signals()}
    install()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signum, handler)


@contextlib.contextmanager
def at_step_boundaries() -> Iterator[None]:
    """While training runs: a signal is acted upon at the next step boundary."""
    _state.at_step_boundary = True
    try:
        yield
    finally:
        _state.at_step_boundary = False


def requeue_slurm_job(max_requeues: int) -> tuple[bool, str]:
    """Put this SLURM job back in the queue (its array slot), unless it has been requeued
    `max_requeues` times already. (Whether it did, and why not.)"""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if restarts >= max_requeues:
        return False, f"after {restarts} requeue(s) (slurm.max_requeues={max_requeues})"
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "")
    if not job:
        return False, "outside a SLURM job"
    try:
        subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return False, f"`scontrol requeue {job}` failed ({err})"
    return True, f"requeue {restarts + 1} of {max_requeues}"


class RequeueLimitError(KlueTcError):
    """A SLURM job stopped by its time limit once more than it may be requeued."""


def settle(stop: JobInterrupted, max_requeues: int) -> JobInterrupted | RequeueLimitError:
    """What a stop means for the job: submitit's time-limit signal requeues it (its state is
    saved), at most `max_requeues` times; any other signal just ends it."""
    if stop.signum != requeue_signal() or stop.requeued:
        return stop
    requeued, why = requeue_slurm_job(max_requeues)
    if requeued:
        return JobInterrupted(stop.signum, f"{stop.where} ({why})", requeued=True)
    return RequeueLimitError(
        f"time limit reached {stop.where}; not requeued {why}: re-run the sweep's command to go on from there"
    )
