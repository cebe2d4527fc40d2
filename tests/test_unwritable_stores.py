"""A store or folder the job cannot write (read-only, not the user's, on a full disk) is one line
before any training, naming it: not a traceback, and not a failure at the first checkpoint after a
fold has trained."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from jobs import one_tiny_fold, run_cli, run_in_process
from klue_tc.core.errors import DiskFullError, ResourceError

pytestmark = pytest.mark.integration  # every test here runs a job, a process or a stage

STORES = {
    "results.dir": "the results store (results.dir)",
    "data.cache_dir": "the cache (data.cache_dir)",
    "pretrain.dir": "the pretrained-encoder store (pretrain.dir)",
}


def job(tmp_path: Path, data: Path, store: str, folder: Path) -> list[str]:
    folders = {"results.dir": tmp_path / "results", "data.cache_dir": tmp_path / "cache", store: folder}
    results = folders.pop("results.dir")
    extra = ("logger=none", "pretrain=mlm", "pretrain.max_steps=2", *(f"{k}={v}" for k, v in folders.items()))
    return one_tiny_fold(data, results, *extra)


def nothing_trained(tmp_path: Path) -> bool:
    return not [p for p in tmp_path.rglob("*") if p.suffix in (".ckpt", ".pt") or p.name.startswith("fold0.json")]


def under(path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


@pytest.fixture
def read_only(monkeypatch):
    """Make a folder read-only: its permissions for a user; for root, whom permissions do not stop,
    its file system answers as a read-only mount does."""

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True)
        if os.geteuid() != 0:
            os.chmod(folder, 0o555)  # given back by the test
            return folder
        real = tempfile.mkstemp

        def read_only_mount(*args, dir=None, **kwargs):
            if dir is not None and under(dir, folder):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr(tempfile, "mkstemp", read_only_mount)
        return folder

    return make


@pytest.mark.parametrize("store", list(STORES))
def test_a_read_only_store_is_one_line_before_any_training(tmp_path, tiny_tsv, read_only, store):
    folder = read_only(tmp_path / "read-only" / "store")
    try:
        with pytest.raises(ResourceError) as err:
            run_in_process(job(tmp_path, tiny_tsv, store, folder), tmp_path / "run")
    finally:
        os.chmod(folder, 0o755)
    line = str(err.value)
    assert line.startswith(f"{STORES[store]} {folder} is not writable ({folder}: ") and "\n" not in line, line
    assert nothing_trained(tmp_path)


@pytest.mark.parametrize("store", [*STORES, "the run directory"])
@pytest.mark.parametrize("how", ["nothing left", "less than a job needs"])
def test_a_store_on_a_full_disk_is_one_line_before_any_training(tmp_path, tiny_tsv, monkeypatch, store, how):
    full = tmp_path / "full-disk"
    full.mkdir()
    if how == "nothing left":  # the disk refuses the block written to it when it is flushed
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            if under(os.readlink(f"/proc/self/fd/{fd}"), full):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
    else:  # a few kilobytes free: a fold's checkpoint would not fit
        real_usage = shutil.disk_usage

        def usage(path):
            found = real_usage(path)
            return found._replace(free=8192) if under(path, full) else found

        monkeypatch.setattr(shutil, "disk_usage", usage)
    if store == "the run directory":
        args, run_dir, what = job(tmp_path, tiny_tsv, "results.dir", tmp_path / "results"), full / "run", store
    else:
        args, run_dir, what = job(tmp_path, tiny_tsv, store, full / "store"), tmp_path / "run", STORES[store]
    with pytest.raises(DiskFullError) as err:
        run_in_process(args, run_dir)
    line = str(err.value)
    assert line.startswith(f"{what} ") and "its disk is full" in line and "\n" not in line, line
    assert nothing_trained(tmp_path)


def test_a_run_folder_that_cannot_be_made_is_one_line(tmp_path, tiny_tsv):
    (tmp_path / "a-file").write_text("not a folder")
    run_dir = tmp_path / "a-file" / "run"
    done = run_cli(
        [*job(tmp_path, tiny_tsv, "results.dir", tmp_path / "results"), f"hydra.run.dir={run_dir}"], tmp_path
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"error: {run_dir}: cannot be written (Not a directory); the run folder (hydra.run.dir=, or hydra.sweep.dir= "
        "with -m) and the stores (results.dir=, data.cache_dir=) must be folders you can write"
    ]
