"""The folds of a results store that are not finished: what a reader (the report, the ensemble stage)
says beside the whole records it read while a sweep writes the same store.

A job holds `<key>/fold<k>.lock` (an flock, klue_tc/store/results.py's `claim`) from before the
fold trains until its job ends, and keeps the fold's resumable state in `fold<k>.training/` until its
record is written; the record itself appears whole, renamed into place (klue_tc/core/files.py), so a
reader sees it or nothing. The lock is the kernel's: it goes with the process that held it, so a fold
whose lock is held is still running, and one left with its lock or state but no record and no holder
was interrupted (a killed or failed job), which the same command resumes.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path

FOLD_LOCK = re.compile(r"fold(\d+)\.lock")
FOLD_STATE = re.compile(r"fold(\d+)\.training")


def lock_held(lock: Path) -> bool:
    """Whether a live process holds the flock on `lock`: a shared lock is refused while a job holds
    its exclusive one. Taken and given back at once; a job asking meanwhile waits that instant."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nothing can be said to hold it
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Unfinished:
    """Folds without a record yet (or being trained again over one): `running`, their lock held by a
    live job; `interrupted`, left by a job that is gone. Each as `<key>/fold<k>`."""

    running: tuple[str, ...] = ()
    interrupted: tuple[str, ...] = ()

    def __add__(self, other: Unfinished) -> Unfinished:
        return Unfinished(self.running + other.running, self.interrupted + other.interrupted)

    def line(self) -> str:
        """`1 fold still running, 2 interrupted (...)`; '' where every fold is finished."""
        parts = []
        if n := len(self.running):
            parts.append(f"{folds(n)} still running ({'its record' if n == 1 else 'their records'} not written yet)")
        if n := len(self.interrupted):
            its, it = ("its", "it") if n == 1 else ("their", "them")
            parts.append(f"{folds(n)} interrupted ({its} job killed or failed: the same sweep command resumes {it})")
        return "; ".join(parts)


def folds(n: int) -> str:
    return f"{n} fold" if n == 1 else f"{n} folds"


def unfinished_folds(store: Path) -> Unfinished:
    """The folds of `store` that a job claimed or was training, and has not finished."""
    store = Path(store)
    claimed: set[tuple[Path, str]] = set()
    for path in store.glob("*/fold*.lock"):
        if match := FOLD_LOCK.fullmatch(path.name):
            claimed.add((path.parent, match.group(1)))
    for path in store.glob("*/fold*.training"):
        if (match := FOLD_STATE.fullmatch(path.name)) and path.is_dir():
            claimed.add((path.parent, match.group(1)))
    running, interrupted = [], []
    for folder, k in sorted(claimed):
        name = f"{folder.name}/fold{k}"
        recorded = (folder / f"fold{k}.json").is_file()
        training = (folder / f"fold{k}.training").is_dir()
        if lock_held(folder / f"fold{k}.lock"):
            # A job of several folds holds every fold's lock until its last is done: the finished
            # ones, with their record and no training state, are not running.
            if not recorded or training:
                running.append(name)
        elif not recorded or training:
            interrupted.append(name)
    return Unfinished(tuple(running), tuple(interrupted))
