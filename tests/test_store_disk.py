"""Stores that stay small and readers beside a writing sweep: what a sweep's folders hold on disk (said
as it starts and ends), `python -m klue_tc.prune` (checkpoints of configurations no sweep file's grid
holds, old W&B runs; records never), and a report run while folds are still being written.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, TINY_MODEL
from klue_tc.jobs.sweeps import expand_grid, job_folds
from klue_tc.prune import main as prune
from klue_tc.store.disk import Places, fold_sizes, measure, typical_fold
from klue_tc.store.in_progress import unfinished_folds

# --- helpers -------------------------------------------------------------------------------------


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def age(folder: Path, days: float) -> None:
    """Every file and folder below `folder` last written `days` days ago."""
    then = time.time() - days * 86_400
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (then, then))


def hand_made_store(root: Path) -> tuple[Path, Path]:
    """A sweep folder with its store: one configuration's fold 0 (record, predictions, checkpoint and
    tokenizer, hard-linked into the job's run folder as the store does) and two W&B offline runs."""
    sweep = root / "sweep"
    (sweep / "multirun.yaml").parent.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n", encoding="utf-8")
    store = sweep / "results"
    write(store / "abc" / "fold0.json", 100)
    write(store / "abc" / "fold0.predicted.npz", 50)
    run = sweep / "sentencepiece" / "transformer-post-L1" / "fold0"
    write(run / "fold0" / "best.ckpt", 4000)
    write(run / "fold0" / "tokenizer" / "spiece.model", 1000)
    (store / "abc" / "fold0" / "tokenizer").mkdir(parents=True)
    os.link(run / "fold0" / "best.ckpt", store / "abc" / "fold0" / "best.ckpt")
    os.link(run / "fold0" / "tokenizer" / "spiece.model", store / "abc" / "fold0" / "tokenizer" / "spiece.model")
    write(run / "wandb" / "offline-run-20200101_000000-old" / "run-old.wandb", 300)
    write(run / "wandb" / "offline-run-20990101_000000-new" / "run-new.wandb", 200)
    write(run / "__main__.log", 10)
    return sweep, store


def hold(lock: Path) -> subprocess.Popen:
    """A process holding `lock` as a job holds its fold's (an flock), until it is ended."""
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


# --- unit: measuring, in-progress folds, the grid's jobs ------------------------------------------


def test_a_store_is_measured_by_kind_each_linked_file_once(tmp_path):
    sweep, store = hand_made_store(tmp_path)
    write(tmp_path / "cache" / "tokenizers" / "k" / "spiece.model", 700)

    use = measure(Places(store, runs=sweep, cache=tmp_path / "cache"))

    assert use.bytes["records"] == 150 and use.bytes["checkpoints"] == 5000  # the run folder's links: not again
    assert use.bytes["wandb"] == 500 and use.bytes["caches"] == 700 and use.bytes["pretrained"] == 0
    assert use.bytes["other"] == len("hydra: {}\n") + 10
    assert use.split().startswith("records 150 bytes, checkpoints 4.9 KB, pretrained encoders 0 bytes, W&B runs")
    fold = typical_fold(fold_sizes(store))
    assert (fold.record, fold.predictions, fold.checkpoint, fold.tokenizer) == (100, 50, 4000, 1000)


def test_folds_still_running_are_told_from_interrupted_and_finished_ones(tmp_path):
    store = tmp_path / "results"
    write(store / "a" / "fold0.json", 10)
    (store / "a" / "fold0.lock").touch()  # finished: its lock file stays, no one holds it
    (store / "a" / "fold1.lock").touch()  # a killed job's: no record, no holder
    (store / "a" / "fold2.training").mkdir()  # a killed job's resumable state
    (store / "b").mkdir()
    fd = os.open(store / "b" / "fold0.lock", os.O_RDONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a job training it now
    try:
        unfinished = unfinished_folds(store)
    finally:
        os.close(fd)

    assert unfinished.running == ("b/fold0",)
    assert unfinished.interrupted == ("a/fold1", "a/fold2")
    assert unfinished.line().startswith("1 fold still running") and "2 folds interrupted" in unfinished.line()
    assert unfinished_folds(store).running == ()  # its job gone, the lock goes with it


def test_a_sweeps_folds_are_its_jobs_with_the_command_lines_values_replacing_its_axes():
    params = {"+experiment": "transformer,cnn", "encoder.layers": "2,3", "cv.fold": "range(0,2)"}
    assert len(expand_grid(params)) == 8
    jobs = expand_grid(params, ["encoder.layers=4", "data.limit=300"])
    assert len(jobs) == 4 and all("encoder.layers=4" in job and "data.limit=300" in job for job in jobs)
    assert sum(job_folds(job, None, 5) for job in jobs) == 4  # each names its fold
    assert job_folds(["+experiment=cnn"], None, 5) == 5 and job_folds(["+experiment=cnn"], 0, 5) == 1


def test_prune_removes_w_and_b_runs_by_age_and_never_a_record(tmp_path, capsys):
    sweep, store = hand_made_store(tmp_path)
    wandb = sweep / "sentencepiece" / "transformer-post-L1" / "fold0" / "wandb"
    age(wandb / "offline-run-20200101_000000-old", days=40)
    age(wandb / "offline-run-20990101_000000-new", days=2)
    empty_sweeps = tmp_path / "sweeps"
    empty_sweeps.mkdir()

    assert prune([str(store), "--sweeps", str(empty_sweeps), "--wandb-older-than", "30", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "W&B offline runs older than 30 days: 1" in dry and "would free 300 bytes" in dry
    assert "W&B runs 300 bytes" in dry
    assert (wandb / "offline-run-20200101_000000-old").is_dir()

    assert prune([str(store), "--sweeps", str(empty_sweeps), "--wandb-older-than", "30"]) == 0
    assert "freed 300 bytes" in capsys.readouterr().out
    assert not (wandb / "offline-run-20200101_000000-old").exists()
    assert (wandb / "offline-run-20990101_000000-new").is_dir()
    assert (store / "abc" / "fold0.json").is_file() and (store / "abc" / "fold0" / "best.ckpt").is_file()


def test_prune_keeps_the_configurations_a_grid_holds_and_the_encoders_they_started_from(tmp_path, capsys):
    """No training: two configurations' folders as a sweep leaves them, the sweep file then holding one."""
    import json

    import yaml

    from klue_tc.core.config import job_config
    from klue_tc.jobs.sweeps import compose_sweep

    sweeps, _ = tiny_sweep(tmp_path, tmp_path / "train.tsv", "1")
    store = tmp_path / "sweep" / "results"
    for layers, encoders in ((1, ["one", "both"]), (2, ["two", "both"])):
        job = ["+experiment=transformer", f"encoder.layers={layers}"]
        config = job_config(compose_sweep("tiny", job, sweeps_dir=sweeps))
        folder = store / f"key{layers}"
        write(folder / "config.yaml", 0).write_text(yaml.safe_dump(config), encoding="utf-8")
        for k, encoder in enumerate(encoders):
            write(folder / f"fold{k}.json", 0).write_text(
                json.dumps({"pretrained": {"key": encoder}}), encoding="utf-8"
            )
            write(folder / f"fold{k}" / "best.ckpt", 1000)
            write(folder / f"fold{k}" / "tokenizer" / "spiece.model", 100)
            write(store / "pretrained" / encoder / "encoder.pt", 10_000)
    write(store / "pretrained" / "unnamed" / "encoder.pt", 10_000)  # no record names it yet: kept

    # the settings the sweep ran with (ARGS), here those of its file, after the flags as `make prune` puts them
    assert prune([str(store), "--sweeps", str(sweeps), "trainer.max_epochs=1"]) == 0
    out = capsys.readouterr().out
    assert "settings beside the axes: trainer.max_epochs=1, given" in out
    assert "1 of the store's 2 configurations in none" in out and "key2: transformer, post-LN, 2 layers" in out
    assert "freed 11.9 KB: checkpoints 2.0 KB, tokenizers 200 bytes, pretrained encoders 9.8 KB" in out
    assert not (store / "key2" / "fold0").exists() and not (store / "pretrained" / "two").exists()
    assert (store / "key2" / "fold0.json").is_file() and (store / "key1" / "fold0" / "best.ckpt").is_file()
    assert {p.name for p in (store / "pretrained").iterdir()} == {"one", "both", "unnamed"}


def test_a_committed_store_is_pruned_only_when_asked(capsys):
    assert prune([str(REPO / "docs" / "study" / "results")]) == 2
    assert "committed" in capsys.readouterr().err


# --- integration: a tiny sweep, pruned after its file drops a configuration; a report beside it -----

TINY_SWEEP = """\
defaults:
  - _base
  - _self_

sweep: tiny
cv:
  folds: 2
trainer:
  max_epochs: 1

hydra:
  sweeper:
    params:
      +experiment: transformer
      encoder.layers: {layers}
      cv.fold: "0"
"""


def tiny_sweep(tmp_path: Path, data: Path, layers: str) -> tuple[Path, list[str]]:
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir(exist_ok=True)
    (sweeps / "_base.yaml").write_text((REPO / "sweeps" / "_base.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (sweeps / "tiny.yaml").write_text(TINY_SWEEP.format(layers=layers), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "klue_tc",
        "--multirun",
        "--config-dir",
        str(sweeps),
        "--config-name",
        "tiny",
        f"data.path={data}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *TINY_MODEL,
    ]
    return sweeps, command


@pytest.mark.integration
def test_a_sweep_says_its_disk_and_prune_frees_a_dropped_configurations_checkpoint(tmp_path, headlines_tsv, capsys):
    from test_sweeps import run_sweep

    sweeps, command = tiny_sweep(tmp_path, headlines_tsv, "1,2")
    first = run_sweep(tmp_path, command, timeout=600).stdout
    start = next(line for line in first.splitlines() if line.startswith("disk at the sweep's start"))
    assert "records 0 bytes, checkpoints 0 bytes" in start and "it adds up to" in start
    assert "2 folds x" in start and "the paper grid's size" in start  # an empty store: the stated figure
    end = next(line for line in first.splitlines() if line.startswith("disk at the sweep's end"))
    assert "checkpoints +" in end and "W&B runs +" in end and "records +0 bytes" not in end
    store = tmp_path / "sweep" / "results"
    assert len(fold_sizes(store)) == 2

    rerun = run_sweep(tmp_path, command, timeout=600).stdout  # the store now measures its own folds
    assert "2 folds x" in rerun and "the mean fold of the store's 2 records" in rerun
    assert "disk at the sweep's end: it added" in rerun

    (sweeps / "tiny.yaml").write_text(TINY_SWEEP.format(layers="1"), encoding="utf-8")  # the 2-layer cell dropped
    records = sorted(store.glob("*/fold0.json"))
    checkpoints = {p.parent.name: next(p.with_suffix("").glob("*.ckpt")) for p in records}
    every = list((tmp_path / "sweep").rglob("*.ckpt"))
    names = {key: [p for p in every if os.path.samefile(p, ckpt)] for key, ckpt in checkpoints.items()}
    assert all(len(found) == 2 for found in names.values())  # the store's and the job's run folder's

    assert prune([str(store), "--sweeps", str(sweeps), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "1 of the store's 2 configurations in none" in dry and "2 layers" in dry and "would free" in dry
    assert all(ckpt.is_file() for ckpt in checkpoints.values())

    assert prune([str(store), "--sweeps", str(sweeps)]) == 0
    out = capsys.readouterr().out
    assert "freed " in out and "freed 0 bytes" not in out and "records kept: 2 folds" in out
    dropped = [key for key, ckpt in checkpoints.items() if not ckpt.exists()]
    assert len(dropped) == 1 and all(p.is_file() for p in records)  # every record kept
    assert not any(p.exists() for p in names[dropped[0]])  # the run folder's name too: its bytes are freed
    kept = next(key for key in checkpoints if key not in dropped)
    assert checkpoints[kept].is_file()

    from klue_tc.report.cli import main as report

    assert report([str(tmp_path / "sweep"), "--no-baseline"]) == 0
    assert len(pd.read_csv(tmp_path / "sweep" / "report.csv")) == 2  # the pruned cell's scores stay


@pytest.mark.integration
def test_a_report_beside_a_writing_sweep_reads_whole_records_and_says_what_is_still_running(tmp_path, capsys):
    from jobs import tiny_trained_sweep
    from klue_tc.report.cli import main as report

    sweep, _, _ = tiny_trained_sweep(tmp_path, epochs=1)
    store = sweep / "results"
    (key,) = [p.name for p in store.iterdir() if (p / "config.yaml").is_file()]
    whole = (store / key / "fold0.json").read_bytes()
    # Another configuration's fold being written: its record half there, under the name it is written
    # under before its rename (klue_tc/core/files.py), and its lock held by the job writing it.
    writing = store / "0123456789ab"
    writing.mkdir()
    (writing / ".fold0.json.k2j4x.tmp").write_bytes(whole[: len(whole) // 2])
    (writing / "config.yaml").write_text((store / key / "config.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    holder = hold(writing / "fold0.lock")
    (writing / "fold1.lock").touch()  # a killed job's fold: no record, no holder
    try:
        assert report([str(sweep), "--no-baseline"]) == 0
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "still running" in line)
    assert "1 fold still running" in line and "1 fold interrupted" in line
    table = pd.read_csv(sweep / "report.csv")
    assert len(table) == 1 and table["folds"].tolist() == [2]  # the whole records, and only those
