"""Writing a file so that readers never see half of it, with the permissions the user's umask gives
(and the group's write bit in a folder shared with its group, never the world's); a full disk is
one `DiskFullError` line naming the file, with nothing half-written left behind."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from klue_tc.core.errors import DiskFullError

log = logging.getLogger(__name__)

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS


def human_size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def disk_full_error(
    path: Path | str | None, needed: Optional[int] = None, at_least: Optional[int] = None
) -> DiskFullError:
    """The one line for a write that ran out of space: the file, what it needs, what is free there."""
    where = Path(path) if path else None
    free = None
    if where is not None:
        existing = where.absolute()
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(existing).free
    if needed is not None:
        need = f"it needs {human_size(needed)}"
    elif at_least:
        need = f"it needs more than the {human_size(at_least)} written before the disk filled"
    else:
        need = "it needs more space"
    if free is not None:
        need += f", {human_size(free)} free there"
    return DiskFullError(
        f"{where or 'a file'}: no space left on the device ({need}); nothing half-written was kept: "
        "free some space (or raise the quota) and run the same command again"
    )


def tolerate_full_disk_in_logs() -> None:
    """A log file on a full disk loses its lines quietly: logging would print a traceback for each
    line it cannot write, burying the one line that says the disk is full."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and not getattr(handler, "tolerates_full_disk", False):

            def handle_error(record: logging.LogRecord, report=handler.handleError) -> None:
                if not is_disk_full(sys.exc_info()[1]):
                    report(record)

            handler.handleError = handle_error
            handler.tolerates_full_disk = True


@contextlib.contextmanager
def reporting_full_disk(path: Path | str) -> Iterator[None]:
    """A full disk while writing `path` becomes its DiskFullError line; other errors pass through."""
    try:
        yield
    except OSError as err:
        if is_disk_full(err):
            raise disk_full_error(path) from None
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def shared_with_group(folder: Path) -> bool:
    """A folder its group may write to (a team's results store or cache, usually setgid): what is
    made in it gets the group's write bit whatever the user's umask, or the team could not update it."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IWGRP) and not mode & stat.S_IWOTH  # /tmp (1777) is everyone's, not a team's


def creation_mode(folder: Path, directory: bool = False) -> int:
    """The mode of a file (or folder) made in `folder`: the umask's, plus the group's read and write
    when `folder` is shared with its group; never writable by others, whatever the umask allows."""
    mode = (0o777 if directory else 0o666) & ~current_umask()
    if shared_with_group(folder):
        mode |= 0o070 if directory else 0o060
    return mode & ~0o002


def make_dirs(folder: Path) -> None:
    """`mkdir -p`, each new folder given `creation_mode` of its parent (mkdir alone would apply the
    umask and drop the group's write bit); setgid folders pass their group on as mkdir does."""
    folder = Path(folder)
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:  # made meanwhile by another job
            continue
        mode = creation_mode(new.parent, directory=True)
        if mode != stat.S_IMODE(new.stat().st_mode) & ~stat.S_ISGID:
            os.chmod(new, mode | (new.stat().st_mode & stat.S_ISGID))


def share_tree(root: Path) -> None:
    """Give the files and folders under `root` (made by a library's writer) `creation_mode` of the
    folder above `root`, when that folder is shared with its group."""
    if not shared_with_group(root.parent):
        return
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, creation_mode(root.parent, directory=path.is_dir()) | (path.stat().st_mode & stat.S_ISGID))


def atomic_write(path: Path, write: Callable[[Path], None], suffix: str = ".tmp", size: Optional[int] = None) -> None:
    """`write(tmp)` into a temporary file beside `path`, then rename it over `path`. A crash leaves
    the old file or the new one, never a cut one; the file is 0644 under the usual umask (a
    temporary file alone would be 0600, unreadable to a team on a shared cluster), 0664 in a folder
    shared with its group. A full disk is a DiskFullError naming `path` and `size` (the bytes it
    needs, when the caller knows them), the temporary file removed."""
    try:
        make_dirs(path.parent)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    except OSError as err:
        if is_disk_full(err):
            raise disk_full_error(path, size) from None
        raise
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, creation_mode(path.parent))
        os.replace(tmp, path)
    except BaseException as err:
        written = tmp.stat().st_size if tmp.exists() else 0
        tmp.unlink(missing_ok=True)
        if is_disk_full(err):
            raise disk_full_error(path, size, at_least=written) from None
        raise


def atomic_write_bytes(path: Path, data: bytes, suffix: str = ".tmp") -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    atomic_write(path, write, suffix=suffix, size=len(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=2))


def read_json_cache(path: Optional[Path]) -> Any:
    """A JSON cache's content; None where there is none, or (in one line) where it is cut short or
    damaged: a cache is built again, never read half."""
    if path is None or not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        log.warning("cache %s is damaged (%s); building it again", path, type(err).__name__)
        return None


@contextlib.contextmanager
def exclusive_lock(lock: Path, waiting_message: str) -> Iterator[None]:
    """Hold `lock` (an flock, released when the process dies); a second holder logs and waits."""
    make_dirs(lock.parent)
    # Read-only, and made with the folder's mode: flock needs no write access, so another user of a
    # shared store can take a lock file that the first one made.
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_EXCL)
        os.fchmod(fd, creation_mode(lock.parent))  # open's mode would lose the group's bit to the umask
    except FileExistsError:
        fd = os.open(lock, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(waiting_message)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link (no space, the same bytes), or a copy across file systems, renamed into place: a
    second job of the same run directory reading `target` meanwhile never finds it gone or half
    copied. Nothing is done where `target` already is `source`."""
    target = Path(target)
    if _same_file(source, target):
        return
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copy2(source, tmp)
        os.replace(tmp, target)  # a no-op, leaving tmp, where another job linked the same file meanwhile
    finally:
        tmp.unlink(missing_ok=True)


def link_or_copy_tree(source: Path, target: Path) -> None:
    """`link_or_copy` for a folder: built beside `target`, then swapped in; nothing is done where
    `target` already holds `source`'s files (what an identical job of the same run directory left)."""
    source, target = Path(source), Path(target)
    if _same_tree(source, target):
        return
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    replaced = []
    try:
        shutil.copytree(source, tmp, copy_function=link_or_copy)
        for _ in range(10):  # another job may put its own folder there between the two renames
            replaced.append(target.with_name(f".{target.name}.{uuid.uuid4().hex}.old"))
            with contextlib.suppress(FileNotFoundError):
                target.rename(replaced[-1])
            try:
                tmp.rename(target)
                return
            except OSError:
                if _same_tree(source, target):
                    return
        raise OSError(f"{target}: replaced by other jobs ten times while this one replaced it")
    finally:
        for folder in (tmp, *replaced):
            shutil.rmtree(folder, ignore_errors=True)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _same_tree(source: Path, target: Path) -> bool:
    """Every file of `source` is its counterpart in `target` (one inode, by a hard link), and no more."""
    try:
        if not target.is_dir():
            return False
        names = {p.relative_to(source) for p in source.rglob("*") if p.is_file()}
        return names == {p.relative_to(target) for p in target.rglob("*") if p.is_file()} and all(
            _same_file(source / name, target / name) for name in names
        )
    except OSError:  # swapped by another job while it was read
        return False
