"""Writing a file so that readers never see half of it, with the permissions the user's umask gives."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Path], None], suffix: str = ".tmp") -> None:
    """`write(tmp)` into a temporary file beside `path`, then rename it over `path`. A crash leaves
    the old file or the new one, never a cut one; the file is 0644 under the usual umask (a
    temporary file alone would be 0600, unreadable to a team on a shared cluster)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    atomic_write(path, write)


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=2))


@contextlib.contextmanager
def exclusive_lock(lock: Path, waiting_message: str) -> Iterator[None]:
    """Hold `lock` (an flock, released when the process dies); a second holder logs and waits."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(waiting_message)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
