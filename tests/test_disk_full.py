"""A disk that fills while a checkpoint, a cache entry or a record is written: one line naming the
file, nothing half-written left for a later run to read, and the same call works once there is space."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_MODEL, make_headlines
from jobs import run_python
from klue_tc.core import files
from klue_tc.core.errors import DiskFullError


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def full_disk(monkeypatch):
    """Every file klue_tc writes through klue_tc.core.files fails at its flush to disk, as on a full disk."""
    monkeypatch.setattr(files.os, "fsync", no_space)
    return monkeypatch


def left_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def assert_one_line(err: DiskFullError, path: Path) -> None:
    line = str(err)
    assert "\n" not in line and line.startswith(f"{path}: no space left on the device") and "free there" in line


def test_a_record_written_on_a_full_disk_is_one_line_and_leaves_the_old_one(tmp_path, full_disk):
    from klue_tc.store.records import FoldResult

    record = FoldResult(0, 0.5, 0.5, 1, 1, None, None, 1.0, 10, 5, None, "tokenizer")
    path = tmp_path / "store" / "abc" / "fold0.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}", encoding="utf-8")  # an earlier, complete record
    with pytest.raises(DiskFullError) as err:
        record.save(path)
    assert_one_line(err.value, path)
    assert "it needs" in str(err.value) and left_in(tmp_path / "store") == ["abc", "abc/fold0.json"]
    assert path.read_text(encoding="utf-8") == "{}"
    full_disk.undo()
    record.save(path)
    assert FoldResult.load(path).f1 == 0.5


def test_a_run_metrics_file_on_a_full_disk_is_one_line(tmp_path, full_disk):
    from klue_tc.store.records import Describe, RunResult

    result = RunResult(Describe("e", "transformer", "pre", 1, "cls", "sentencepiece"), "key", None, 2, [])
    with pytest.raises(DiskFullError) as err:
        result.save(tmp_path / "metrics.json")
    assert_one_line(err.value, tmp_path / "metrics.json")
    assert left_in(tmp_path) == []


def test_a_checkpoint_on_a_full_disk_keeps_the_last_complete_one(tmp_path, monkeypatch):
    import torch

    from klue_tc.engine.checkpoints import AtomicCheckpointIO, save_weights_only

    io = AtomicCheckpointIO()
    last = tmp_path / "state" / "last.ckpt"
    io.save_checkpoint({"epoch": 1, "state_dict": {"w": torch.ones(3)}}, last)
    real_fsync = files.os.fsync
    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(DiskFullError) as err:
        io.save_checkpoint({"epoch": 2, "state_dict": {"w": torch.zeros(3)}}, last)
    assert_one_line(err.value, last)
    with pytest.raises(DiskFullError):
        save_weights_only(last, tmp_path / "fold0" / "best.ckpt")
    assert left_in(tmp_path) == ["fold0", "state", "state/last.ckpt"]
    assert torch.load(last, weights_only=False)["epoch"] == 1  # the complete one a resume reads
    monkeypatch.setattr(files.os, "fsync", real_fsync)
    io.save_checkpoint({"epoch": 2, "state_dict": {"w": torch.zeros(3)}}, last)
    assert torch.load(last, weights_only=False)["epoch"] == 2


def test_a_tokenizer_cache_entry_on_a_full_disk_leaves_no_half_tokenizer(tmp_path, monkeypatch):
    from klue_tc import tokenizers as tk
    from klue_tc.core.registry import TOKENIZERS

    cfg = TOKENIZERS.config_for("sentencepiece", vocab_size=400)
    titles = [t for _, t in make_headlines(per_class=10)]
    cache = tk.TokenizerCache(tmp_path)
    save = tk.Tokenizer.save

    def save_half(self, directory):
        Path(directory).mkdir(parents=True)
        (Path(directory) / "spiece.model").write_bytes(b"half")
        no_space()

    monkeypatch.setattr(tk.Tokenizer, "save", save_half)
    with pytest.raises(DiskFullError) as err:
        cache.tokenizer(cfg, titles, "fold0")
    assert_one_line(err.value, tmp_path / "tokenizers" / tk.cache.tokenizer_key(cfg, "fold0"))
    assert left_in(tmp_path) == ["tokenizers"]
    monkeypatch.setattr(tk.Tokenizer, "save", save)
    tokenizer, key = cache.tokenizer(cfg, titles, "fold0")

    monkeypatch.setattr(np, "savez", no_space)
    with pytest.raises(DiskFullError) as err:
        cache.encoded(tokenizer, key, titles, "all")
    assert_one_line(err.value, tmp_path / "encoded" / f"{key}-all.npz")
    assert list((tmp_path / "encoded").iterdir()) == []
    monkeypatch.undo()
    assert len(cache.encoded(tokenizer, key, titles, "all")) == len(titles)


@pytest.mark.integration
@pytest.mark.slow
def test_a_full_disk_in_training_ends_the_job_in_one_line_and_the_same_command_then_finishes(
    tmp_path, headlines_tsv, monkeypatch
):
    """The fold's checkpoint write fails; the run says so, then runs to its end once there is space."""
    from jobs import run_in_process
    from klue_tc.engine import checkpoints

    overrides = [
        "+experiment=transformer",
        f"data.path={headlines_tsv}",
        "cv.folds=2",
        "cv.fold=0",
        "trainer.max_epochs=1",
        "logger=none",
        f"results.dir={tmp_path / 'results'}",
        *TINY_MODEL,
    ]
    real, real_fsync = checkpoints.atomic_write_bytes, os.fsync

    def full_for_checkpoints(path, data, suffix=".tmp"):
        if suffix == ".ckpt.tmp":
            monkeypatch.setattr(files.os, "fsync", no_space)
        try:
            real(path, data, suffix)
        finally:
            monkeypatch.setattr(files.os, "fsync", real_fsync)

    monkeypatch.setattr(checkpoints, "atomic_write_bytes", full_for_checkpoints)
    with pytest.raises(DiskFullError) as err:
        run_in_process(overrides, tmp_path / "run1")
    assert ".ckpt: no space left on the device" in str(err.value)
    leftovers = [p for p in (tmp_path / "results").rglob("*") if p.name.endswith((".tmp", ".json"))]
    assert leftovers == []  # no record and no half checkpoint
    monkeypatch.setattr(checkpoints, "atomic_write_bytes", real)
    assert 0.0 <= run_in_process(overrides, tmp_path / "run2") <= 1.0


@pytest.mark.integration
@pytest.mark.slow
def test_the_command_line_says_it_in_one_line_without_a_traceback(tmp_path, tiny_tsv):
    """A writer klue_tc does not own (a logger's file) meets the full disk: still one line, exit 2."""
    script = (
        "import errno, os, runpy, sys\n"
        "import klue_tc.jobs.run\n"
        "def job(cfg):\n"
        "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), 'outputs/csv/metrics.csv')\n"
        "klue_tc.jobs.run.run_job = job\n"
        "sys.argv = ['klue_tc', *sys.argv[1:]]\n"
        "runpy.run_module('klue_tc', run_name='__main__')\n"
    )
    done = run_python(["-c", script, "+experiment=transformer", f"data.path={tiny_tsv}"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: outputs/csv/metrics.csv: no space left on the device")
    assert "Traceback" not in done.stderr


def test_a_log_file_on_a_full_disk_prints_no_traceback(tmp_path, capsys):
    import logging

    handler = logging.FileHandler(tmp_path / "job.log")
    handler.stream.write = no_space
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        files.tolerate_full_disk_in_logs()
        logging.getLogger("klue_tc.test").warning("a line the full disk cannot take")
    finally:
        root.removeHandler(handler)
    assert "Traceback" not in capsys.readouterr().err
