"""Measured subprocesses: run one to the end with its wall time and peak RSS, kill one, their environment."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


@dataclass
class Finished:
    rc: int
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str
    timed_out: bool = False

    def tail(self, lines: int = 15) -> str:
        return "\n".join((self.stdout + "\n" + self.stderr).strip().splitlines()[-lines:])


def run_measured(cmd: Sequence[str], env: dict, cwd: Path, log_dir: Path, name: str, timeout_s: float) -> Finished:
    """Run `cmd` to the end; its own wall time and peak RSS (os.wait4's rusage of that child)."""
    out_path, err_path = log_dir / f"{name}.out", log_dir / f"{name}.err"
    start = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env, cwd=str(cwd), start_new_session=True)
        try:
            status, usage, timed_out = _wait(proc, timeout_s)
        except BaseException:  # interrupted: end the run we started (its own session) before leaving
            _kill(proc)
            raise
    wall = time.perf_counter() - start
    rc = os.waitstatus_to_exitcode(status)
    return Finished(
        rc,
        wall,
        usage.ru_maxrss / 1024,
        out_path.read_text(errors="replace"),
        err_path.read_text(errors="replace"),
        timed_out,
    )


def _wait(proc: subprocess.Popen, timeout_s: float):
    deadline, timed_out = time.monotonic() + timeout_s, False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
            return status, usage, timed_out
        if time.monotonic() > deadline and not timed_out:
            timed_out = True
            _kill(proc)
        time.sleep(0.05)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL a run we started: its own session, so it and its children only."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def child_env(threads: int, gpu: bool) -> dict:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
    )
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env
