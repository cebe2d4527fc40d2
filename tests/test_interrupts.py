"""A job stopped by a signal (SIGTERM, Ctrl-C, SLURM's time-limit signal) saves its training state
at the next step, says where in one line, exits non-zero and resumes from that step; a fold whose
loss stops being finite is recorded as diverged and left out of the means."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY_MODEL, make_headlines, write_tsv
from jobs import run_in_process, run_python
from klue_tc.core import interrupts

FIRST_SITTING_PAUSE = 2.0


def job_args(tmp_path: Path, data: Path, *extra: str) -> list[str]:
    # Masking and dropout on: a resumed fold must also draw the random numbers an uninterrupted one does.
    return [
        f"data.path={data}",
        f"results.dir={tmp_path / 'results'}",
        "logger=none",
        *TINY_MODEL,
        "+experiment=transformer",
        "encoder.layers=2",
        "cv.folds=2",
        "cv.fold=0",
        "trainer.early_stopping_patience=5",
        "augment.p=0.3",
        "augment.min_len=1",
        "encoder.dropout=0.3",
        *extra,
    ]


@pytest.fixture
def fresh_signal_state(monkeypatch):
    """Each in-process job starts as a new process would: no stop asked yet."""
    monkeypatch.setattr(interrupts._state, "signum", None)
    monkeypatch.setattr(interrupts._state, "at_step_boundary", False)


@pytest.mark.integration
def test_a_fold_stopped_mid_epoch_resumes_at_that_step_and_ends_as_an_uninterrupted_one(
    tmp_path, tiny_tsv, monkeypatch, fresh_signal_state
):
    """SIGTERM in epoch 2's second batch: the state is saved after that batch, the job stops with
    JobInterrupted (exit 143 at the entry point), and the rerun trains epoch 2's last batch only:
    the same weights, to the last bit, as a run never stopped."""
    from klue_tc.training import callbacks

    args = job_args(tmp_path, tiny_tsv, "trainer.max_epochs=2")
    trained, signalled = [], []  # (epoch, batch) of every training step
    real_start = callbacks.FoldMonitor.on_train_batch_start

    def count_and_signal(self, trainer, pl_module, batch, batch_idx):
        trained.append((trainer.current_epoch, batch_idx))
        if (trainer.current_epoch, batch_idx) == (1, 1) and not signalled:
            signalled.append(True)
            time.sleep(FIRST_SITTING_PAUSE)  # the first sitting's seconds must count in the record
            os.kill(os.getpid(), signal.SIGTERM)  # arrives during this step
        real_start(self, trainer, pl_module, batch, batch_idx)

    monkeypatch.setattr(callbacks.FoldMonitor, "on_train_batch_start", count_and_signal)
    with pytest.raises(interrupts.JobInterrupted) as stopped, interrupts.stop_on_signal():
        run_in_process(args, tmp_path / "first")
    stop = stopped.value
    assert stop.signum == signal.SIGTERM and stop.exit_code == 143
    assert "in fold 0, epoch 2, at step 2 of 3" in stop.line() and "resume with: python -m klue_tc" in stop.line()
    assert trained == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert not list((tmp_path / "results").glob("*/fold0.json"))  # no partial record
    assert not (tmp_path / "first" / "metrics.json").exists()
    state = next((tmp_path / "results").glob("*/fold0.training"))
    assert (state / "last.ckpt").is_file()

    trained.clear()
    interrupts._state.signum = None  # a new process
    second_sitting = time.perf_counter()
    run_in_process(args, tmp_path / "second")
    second_sitting = time.perf_counter() - second_sitting
    assert trained == [(1, 2)]  # the rest of epoch 2
    resumed = json.loads((tmp_path / "second" / "metrics.json").read_text())["folds"][0]
    assert resumed["epochs_run"] == 2 and not state.exists()
    assert resumed["sittings"] == 2
    # Its seconds cover both sittings: more than the pause of the first, and than the whole second.
    assert resumed["train_seconds"] > max(FIRST_SITTING_PAUSE, second_sitting)

    run_in_process([*args, f"results.dir={tmp_path / 'straight'}"], tmp_path / "straight")
    straight = json.loads((tmp_path / "straight" / "metrics.json").read_text())["folds"][0]
    assert straight["sittings"] == 1
    assert (resumed["f1"], resumed["accuracy"], resumed["best_epoch"]) == (
        straight["f1"],
        straight["accuracy"],
        straight["best_epoch"],
    )
    import torch

    weights = [torch.load(tmp_path / run / "fold0" / "best.ckpt")["state_dict"] for run in ("second", "straight")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_signal_before_training_stops_at_once_with_nothing_saved(tmp_path, fresh_signal_state):
    with pytest.raises(interrupts.JobInterrupted) as stopped, interrupts.stop_on_signal():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler runs between two bytecodes of this thread
    assert stopped.value.exit_code == 130 and "interrupted by SIGINT" in stopped.value.line()
    with pytest.raises(interrupts.JobInterrupted, match="before this job began"), interrupts.stop_on_signal():
        pass  # a worker that was stopped takes no further job


@pytest.mark.integration
def test_the_time_limit_signal_requeues_the_slurm_job_a_bounded_number_of_times(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SUBMITIT_FOLDER", str(tmp_path))
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    stop = interrupts.JobInterrupted(signal.SIGUSR2, "in fold 0, epoch 2, at step 5 of 9")

    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    requeued = interrupts.settle(stop, max_requeues=2)
    assert isinstance(requeued, interrupts.JobInterrupted) and requeued.requeued
    assert calls.read_text().split() == ["requeue", "41_3"]
    assert "requeued, the job resumes from there by itself" in requeued.line()

    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    refused = interrupts.settle(stop, max_requeues=2)
    assert isinstance(refused, interrupts.RequeueLimitError)
    assert "after 2 requeue(s) (slurm.max_requeues=2)" in str(refused) and len(calls.read_text().split()) == 2
    # SIGTERM (preemption, scancel, `scontrol requeue`) only stops it: SLURM decides about the queue.
    assert interrupts.settle(interrupts.JobInterrupted(signal.SIGTERM), max_requeues=2).requeued is False


@pytest.mark.integration
def test_a_loss_that_stops_being_finite_is_a_diverged_record_left_out_of_the_means(
    tmp_path, tiny_tsv, caplog, fresh_signal_state
):
    from klue_tc.report import write_report

    # An absurd learning rate: Adam's first steps move every weight by about lr, and the logits overflow.
    args = job_args(tmp_path, tiny_tsv, "trainer.max_epochs=2", "optim.lr=1e30", "optim.skip_nonfinite_steps=1")
    score = run_in_process(args, tmp_path / "run")
    assert math.isnan(score)  # a failed trial for Optuna
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["diverged_folds"] == [0]
    record = json.loads(next((tmp_path / "results").glob("*/fold0.json")).read_text())
    assert record["diverged"].startswith("loss ") and "learning rate" in record["diverged"]
    assert "after 1 skipped non-finite step(s)" in record["diverged"] and math.isnan(record["f1"])
    lines = [r.getMessage() for r in caplog.records if "diverged:" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("fold 0 diverged: loss ")
    assert any("step skipped" in r.getMessage() for r in caplog.records)

    # The rerun finds the record (the same settings diverge again) instead of training again.
    assert math.isnan(run_in_process(args, tmp_path / "again"))

    # A second fold that trains normally: the report averages it alone and lists the diverged one.
    run_in_process(job_args(tmp_path, tiny_tsv, "trainer.max_epochs=1", "cv.fold=1"), tmp_path / "fold1")
    write_report(tmp_path / "results", baseline=False)
    report = (tmp_path / "results" / "report.md").read_text()
    assert "## Diverged folds" in report and "fold 0: loss " in report


def test_old_records_without_the_diverged_field_load():
    from klue_tc.store.records import FoldResult

    old = dict(
        fold=0,
        f1=0.5,
        accuracy=0.5,
        best_epoch=1,
        epochs_run=1,
        train_samples_per_s=1.0,
        time_to_first_step_s=1.0,
        train_seconds=1.0,
        train_size=1,
        val_size=1,
        checkpoint=None,
        tokenizer_dir="t",
    )
    assert FoldResult.from_dict(old).diverged is None


def wait_for(path: Path, text: str, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert process.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, path.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signalled_run_says_where_it_stopped_exits_non_zero_and_the_same_command_resumes(tmp_path, signum, code):
    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=30))
    command = [
        sys.executable,
        "-m",
        "klue_tc",
        *job_args(tmp_path, data, "trainer.max_epochs=3"),
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = tmp_path / "first.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(log, "epoch 1/3", process)  # the first epoch's line: it trains epoch 2 now
        process.send_signal(signum)
        assert process.wait(timeout=120) == code
    finally:
        if process.poll() is None:
            process.kill()
    first = log.read_text().strip().splitlines()
    name = signal.Signals(signum).name
    assert first[-1].startswith(f"interrupted by {name} in fold 0, epoch "), first[-5:]
    assert first[-1].endswith("resume with: " + " ".join(["python", "-m", "klue_tc", *command[3:]]))
    assert "Traceback" not in log.read_text()
    assert not list((tmp_path / "results").glob("*/fold0.json")) and not (tmp_path / "run" / "metrics.json").exists()

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "fold 0: resuming " in again.stdout + again.stderr
    assert "epoch 1/3" not in again.stdout  # the finished epoch is not trained again
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["folds"][0]["epochs_run"] == 3


def worker_pids(launcher: int) -> list[int]:
    """The parallel launcher's worker processes (not multiprocessing's resource tracker)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher and b"spawn_main" in cmdline:
            pids.append(int(stat.parent.name))
    return pids


def start_two_job_parallel_sweep(tmp_path, *extra: str):
    """Two 3-epoch smoke jobs (folds 0 and 1) on two CPU workers, started in the background with
    their log in first.log; `extra` overrides go last (`cv.fold=0`: only the first job)."""
    from test_sweeps import sweep_command, sweep_env

    sweep_dir = tmp_path / "sweep"
    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=30))
    command = sweep_command(
        "smoke",
        sweep_dir,
        data,
        "+experiment=transformer",
        "encoder.layers=2",
        "data.limit=null",
        "logger=none",
        "trainer.accelerator=cpu",
        "trainer.max_epochs=3",
        "hydra/launcher=parallel",
        "hydra.launcher.gpus=[]",
        "hydra.launcher.n_jobs=2",
        *extra,
    )
    env = sweep_env(tmp_path)
    log = tmp_path / "first.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    return sweep_dir, command, env, log, process


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the workers from /proc")
def test_a_killed_worker_is_a_failed_job_in_the_sweeps_summary_and_the_next_run_finishes_it(tmp_path):
    from test_sweeps import records

    sweep_dir, command, env, log, process = start_two_job_parallel_sweep(tmp_path)
    try:
        wait_for(log, "epoch 1/3", process)
        workers = worker_pids(process.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGTERM)
        assert process.wait(timeout=300) != 0
    finally:
        if process.poll() is None:
            process.kill()
    first = log.read_text()
    assert "interrupted by SIGTERM in fold " in first
    assert "FAILED, 1/2 done" in first or "FAILED, 2/2 done" in first
    assert "sweep: 1 of 2 jobs failed (#" in first and "the same command runs them again" in first
    assert len(records(sweep_dir)) == 1  # the other job finished; the stopped one left no record

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert "resuming " in again.stdout + again.stderr
    assert len(records(sweep_dir)) == 2 and (sweep_dir / "report.md").is_file()


def test_the_parallel_launcher_reports_an_interrupted_or_lost_job_as_failed():
    from concurrent.futures.process import BrokenProcessPool

    from hydra.core.utils import JobStatus

    from hydra_plugins.klue_tc_launcher.parallel_launcher import (
        SweepJobFailed,
        SweepProgress,
        failed_return,
        failure_summary,
        why_failed,
    )

    stop = interrupts.JobInterrupted(signal.SIGTERM, "in fold 1, epoch 2, at step 3 of 9: its training state is saved")
    why = why_failed(stop)
    assert why == "interrupted by SIGTERM in fold 1, epoch 2, at step 3 of 9: its training state is saved"
    ret = failed_return(["+experiment=cnn", "cv.fold=1"], 3, why)
    assert ret.status == JobStatus.FAILED
    with pytest.raises(SweepJobFailed, match=r"sweep job #3 \(\+experiment=cnn cv.fold=1\) failed: interrupted"):
        _ = ret.return_value  # what the sweeper reads: it raises the failure
    assert "worker process died" in why_failed(BrokenProcessPool())
    line = SweepProgress(2).line(3, 0.0, False, failed=True)
    assert line.startswith("sweep: job #3 FAILED, 1/2 done")
    assert failure_summary({3: why}, 2).startswith("sweep: 1 of 2 jobs failed (#3: interrupted by SIGTERM")


@pytest.mark.integration
def test_a_stop_signal_between_jobs_is_remembered_and_stops_the_next_job_before_it_begins():
    # In a process of its own: pytest's signal handlers stay as they are.
    done = run_python(
        [
            "-c",
            "import os, signal\n"
            "from klue_tc.core import interrupts\n"
            "interrupts.remember_between_jobs()\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "try:\n"
            "    with interrupts.stop_on_signal():\n"
            "        print('the job ran')\n"
            "except interrupts.JobInterrupted as stop:\n"
            "    print(stop.line())\n",
        ],
        timeout=60,
    )
    assert done.returncode == 0, done.stderr  # the waiting process lives on
    assert "interrupted by SIGTERM before this job began" in done.stdout and "the job ran" not in done.stdout


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the workers from /proc")
def test_sigterm_while_a_worker_waits_for_a_job_still_ends_the_sweep(tmp_path):
    # Fold 0 finishes first, so in the second sweep its worker only finds it finished and waits;
    # a stop signal once killed that waiting worker inside the job queue's read, and the launcher
    # then waited for it forever.
    first_sweep_dir, command, env, log, process = start_two_job_parallel_sweep(tmp_path, "cv.fold=0")
    assert process.wait(timeout=300) == 0, log.read_text()[-3000:]
    _, _, _, log, process = start_two_job_parallel_sweep(tmp_path)
    try:
        wait_for(log, "epoch 1/3", process)
        assert "1 found finished" in log.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=300) == 143
    finally:
        if process.poll() is None:
            process.kill()
    assert log.read_text().strip().splitlines()[-1].startswith("interrupted by SIGTERM with 1 of 2 jobs finished")
    assert not worker_pids(process.pid)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the workers from /proc")
def test_sigterm_to_the_parallel_launcher_stops_every_job_at_a_step_and_the_rerun_resumes_them(tmp_path):
    from test_sweeps import records

    sweep_dir, command, env, log, process = start_two_job_parallel_sweep(tmp_path)
    try:
        wait_for(log, "epoch 1/3", process)
        process.send_signal(signal.SIGTERM)  # to the launcher alone: it passes the stop on to its workers
        assert process.wait(timeout=300) == 143
    finally:
        if process.poll() is None:
            process.kill()
    first = log.read_text()
    assert first.count("interrupted by SIGTERM in fold ") + first.count("FAILED") >= 2, first[-3000:]
    assert first.strip().splitlines()[-1].startswith("interrupted by SIGTERM with ")
    assert not worker_pids(process.pid)

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert len(records(sweep_dir)) == 2
