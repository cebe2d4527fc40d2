"""The smoke sweep on a real SLURM cluster (`hydra/launcher=slurm`), killed with `scancel` and resumed.

`make test-slurm` starts a single-node cluster on this machine (`scripts/slurm-local.sh`) and runs
this file; without `sbatch` or a cluster that answers, the test is skipped. Marked `slow` too, so
`make test` leaves it out. The jobs run as array tasks under slurmd, so their output is in
submitit's logs (`<sweep>/.submitit/<array>_<task>/`), not in the submitting command's stdout.
On a multi-node cluster, pass pytest a `--basetemp` in a folder the compute nodes share.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import pandas as pd
import pytest
from test_sweeps import SKIPPED, SMOKE_JOBS, TRAINED, records, sweep_command, sweep_env

from conftest import SHARED_TRAIN, make_headlines, write_tsv

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(1800)]

SWEEP_TIMEOUT_S = 900  # one submitting command: 8 jobs, 2 at a time, on 2 shared cores


def slurm(*args: str, timeout: float = 20) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=True).stdout


@pytest.fixture(scope="module")
def partition() -> str:
    """The cluster's default partition (SLURM marks it with a `*`), or skip when there is no cluster."""
    if shutil.which("sbatch") is None:
        pytest.skip("no SLURM here (`sbatch` is not on PATH): `make test-slurm` starts a local cluster")
    try:
        rows = slurm("sinfo", "-h", "-o", "%P %a").split()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        pytest.skip(f"the SLURM cluster does not answer (`sinfo` failed: {e}); start it with scripts/slurm-local.sh")
    names = rows[::2]
    default = [p for p in names if p.endswith("*")] or names
    if not default:
        pytest.skip("the SLURM cluster has no partition")
    return default[0].rstrip("*")


@pytest.fixture
def train_tsv(tmp_path) -> Path:
    """KLUE YNAT's training file when the shared folder has it, else generated headlines: as many as
    the jobs here take (the smoke sweep's data.limit=500, the requeued job's 3,000)."""
    if SHARED_TRAIN.is_file():
        return SHARED_TRAIN
    return write_tsv(tmp_path / "train.tsv", make_headlines(per_class=430))


def array_ids(sweep_dir: Path) -> list[str]:
    """The sbatch array ids submitit has written logs for, oldest first."""
    ids = {m.group(1) for p in (sweep_dir / ".submitit").glob("*_*") if (m := re.fullmatch(r"(\d+)_\d+", p.name))}
    return sorted(ids, key=int)


def running_tasks(array: str) -> list[tuple[str, float]]:
    """(`<array>_<task>`, start time) of the array's tasks that are running now."""
    try:
        out = slurm("squeue", "-h", "-j", array, "-t", "RUNNING", "-o", "%i %S")
    except subprocess.CalledProcessError:  # the array has left the queue
        return []
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return [(task, datetime.fromisoformat(start).timestamp()) for task, start in rows]


def wait_until_drained(array: str, timeout: float) -> None:
    """The rest of an array goes on after its submitting command ends: wait for it to leave the queue."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not slurm("squeue", "-h", "-j", array, "-o", "%i").strip():
                return
        except subprocess.CalledProcessError:
            return
        assert time.monotonic() < deadline, f"array {array} still queued after {timeout:.0f} s"
        time.sleep(2)


def job_logs(sweep_dir: Path, array: str) -> str:
    """What the array's tasks printed (submitit's stdout and stderr logs), all tasks together."""
    return "".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((sweep_dir / ".submitit").glob(f"{array}_*/*_log.*"))
    )


def test_smoke_sweep_on_slurm_resumes_after_scancel(tmp_path, partition, train_tsv):
    sweep_dir = tmp_path / "sweep"
    command = sweep_command(
        "smoke",
        sweep_dir,
        train_tsv,
        "logger=none",
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={partition}",
        "hydra.launcher.gpus_per_node=null",  # a CPU node
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=2",
        "hydra.launcher.timeout_min=20",
        "hydra.launcher.array_parallelism=2",
        limit=None,
    )
    env = sweep_env(tmp_path)

    # First run: once a job has finished and another is running, cancel one running array task.
    first_log = tmp_path / "first.log"
    with first_log.open("w") as log:
        process = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        cancelled = None
        while cancelled is None:
            assert process.poll() is None, (
                "the sweep ended before a task could be cancelled:\n" + first_log.read_text()[-4000:]
            )
            assert time.monotonic() < deadline, "no job finished in time:\n" + first_log.read_text()[-4000:]
            arrays, finished = array_ids(sweep_dir), records(sweep_dir)
            if arrays and finished:
                # A task that started after the first record was written has not written its own
                # yet (a task that is still running may already have).
                first = int(min(p.stat().st_mtime for p in finished))
                fresh = [task for task, start in running_tasks(arrays[-1]) if start >= first]
                if fresh:
                    cancelled = fresh[-1]
                    slurm("scancel", cancelled)
            time.sleep(0.5)
        first_array = cancelled.split("_")[0]
        process.wait(timeout=SWEEP_TIMEOUT_S)  # it reports the cancelled job as failed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    wait_until_drained(first_array, SWEEP_TIMEOUT_S)
    state = slurm("sacct", "-n", "-X", "-j", cancelled, "-o", "State").split()
    assert state and state[0].startswith("CANCELLED"), f"sacct says {cancelled} is {state}"
    first_out = first_log.read_text()
    before = records(sweep_dir)
    stamps = {p: p.stat().st_mtime_ns for p in before}
    assert 1 <= len(before) < SMOKE_JOBS, f"{len(before)} records after cancelling {cancelled}:\n{first_out[-4000:]}"
    (sweep_dir / "report.md").unlink(missing_ok=True)  # the rerun must write it

    # The same command again: a new array, finished jobs skipped, only the missing ones trained.
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    arrays = array_ids(sweep_dir)
    assert len(arrays) == 2 and arrays[0] == first_array, arrays
    rerun = job_logs(sweep_dir, arrays[1])
    skipped, trained = rerun.count(SKIPPED), rerun.count(TRAINED)
    print(
        f"array {first_array}: {len(before)} of {SMOKE_JOBS} jobs finished, {cancelled} cancelled, "
        f"the command exited {process.returncode}; "
        f"rerun as array {arrays[1]}: {skipped} skipped, {trained} trained; report {sweep_dir / 'report.md'}"
    )
    assert skipped == len(before) and trained == SMOKE_JOBS - len(before), rerun[-4000:]
    after = records(sweep_dir)
    assert len(after) == SMOKE_JOBS
    assert all(p.stat().st_mtime_ns == stamps[p] and after[p] == before[p] for p in before)  # untouched
    for name in ("report.md", "report.csv"):
        assert (sweep_dir / name).is_file(), name
    report = pd.read_csv(sweep_dir / "report.csv")
    assert len(report) == 4 and (report["folds"] == 2).all(), report


# --- a time limit and `scontrol requeue`: the job saves its state, is requeued and resumes -------

ONE_FOLD = ["+experiment=transformer", "encoder.layers=2", "cv.fold=0", "logger=none"]


def one_job_command(sweep_dir: Path, train_tsv: Path, partition: str, timeout_min: int, *extra: str) -> list[str]:
    return sweep_command(
        "smoke",
        sweep_dir,
        train_tsv,
        *ONE_FOLD,
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={partition}",
        "hydra.launcher.gpus_per_node=null",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=2",
        f"hydra.launcher.timeout_min={timeout_min}",
        *extra,
        limit=None,
    )


def only_task(sweep_dir: Path) -> Optional[str]:
    """The SLURM id of a one-job sweep's task (submitit submits an array of one as a plain job),
    once submitit has written its folder."""
    folders = [p.name for p in (sweep_dir / ".submitit").glob("*") if re.fullmatch(r"\d+(_\d+)?", p.name)]
    assert len(folders) <= 1, folders
    return folders[0] if folders else None


def task_logs(sweep_dir: Path, task: str) -> str:
    logs = sorted((sweep_dir / ".submitit" / task).glob("*_log.*"))
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in logs)


def release_if_held(task: Optional[str]) -> None:
    """SLURM holds a requeued job for two minutes before it may start again (Reason=BeginTime):
    let it start at once, so that the test takes minutes less; what it checks is unchanged."""
    if task is None:
        return
    try:
        reason = slurm("squeue", "-h", "-j", task, "-o", "%r").strip()
        if reason == "BeginTime":
            slurm("scontrol", "update", f"JobId={task}", "StartTime=now")
    except subprocess.CalledProcessError:
        pass  # it left the queue meanwhile


def allocations(task: str) -> list[str]:
    """The states of every allocation the array task had (sacct -D lists the requeued ones too)."""
    return slurm("sacct", "-n", "-X", "-D", "-j", task, "-o", "State").split()


def finished_fold(sweep_dir: Path) -> dict:
    found = records(sweep_dir)
    assert len(found) == 1, found
    return next(iter(found.values()))


def test_a_requeued_job_and_one_past_its_time_limit_resume_by_themselves(tmp_path, partition, train_tsv):
    """One job, a 2-minute limit with the time-limit signal 30 s before it, and more training than
    one allocation leaves after start-up: `scontrol requeue` once it has trained an epoch (SLURM
    sends SIGTERM: it saves at the next step and is put back in its slot); if what is left outlasts
    the next allocation too, the time-limit signal (it saves at a step and requeues itself, at most
    slurm.max_requeues times). Each allocation resumes from the step the one before saved, and the
    job ends with the record of the same job trained in one allocation (a twin beside it, with a
    20-minute limit). How many allocations it takes is the machine's speed, not what is tested."""
    sweep_dir, twin_dir = tmp_path / "sweep", tmp_path / "twin"
    # Enough training that the job outlives one 90-second allocation on an idle machine too.
    epochs = 40
    same_job = [
        "slurm.max_requeues=6",
        "data.limit=3000",
        "tokenizer.vocab_size=2000",
        f"trainer.max_epochs={epochs}",
        f"trainer.early_stopping_patience={epochs}",
    ]
    command = one_job_command(sweep_dir, train_tsv, partition, 2, "hydra.launcher.signal_delay_s=30", *same_job)
    twin_command = one_job_command(twin_dir, train_tsv, partition, 20, *same_job)
    log_path, twin_log = tmp_path / "submit.log", tmp_path / "twin.log"
    with log_path.open("w") as log, twin_log.open("w") as twin_out:
        process = subprocess.Popen(
            command, cwd=tmp_path, env=sweep_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        twin = subprocess.Popen(
            twin_command,
            cwd=tmp_path,
            env=sweep_env(tmp_path),
            stdout=twin_out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while True:  # once the task has trained its first epoch
            assert process.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, log_path.read_text()[-4000:]
            task = only_task(sweep_dir)
            if task and f"epoch 1/{epochs}" in task_logs(sweep_dir, task):
                break
            time.sleep(0.5)
        slurm("scontrol", "requeue", task)
        while process.poll() is None:
            assert time.monotonic() < deadline, log_path.read_text()[-4000:]
            release_if_held(task)
            time.sleep(1)
        assert process.returncode == 0, log_path.read_text()[-4000:]
        assert twin.wait(timeout=max(deadline - time.monotonic(), 1)) == 0, twin_log.read_text()[-4000:]
    finally:
        for started in (process, twin):
            if started.poll() is None:
                started.kill()
                started.wait()
    states = allocations(task)
    logs = task_logs(sweep_dir, task)
    print(f"task {task}: allocations {states}")
    assert states.count("REQUEUED") >= 1 and states[-1] == "COMPLETED", states  # more than one allocation
    assert "interrupted by SIGTERM in fold 0, epoch " in logs  # the scontrol requeue
    if "stopped by SIGUSR2 " in logs:  # an allocation past its time limit too
        assert "requeued, the job resumes from there by itself" in logs
    # Each stop saved where it was (mid-epoch at a step, or at an epoch's end if the signal came
    # during validation) and the next allocation resumed from exactly there.
    stops = {
        (int(epoch), int(step) if step else None)
        for epoch, step in re.findall(r"by SIG\w+ in fold 0, epoch (\d+), at (?:step (\d+) of \d+|its end)", logs)
    }
    resumes = {
        (int(mid_epoch), int(step)) if mid_epoch else (int(after_epoch), None)
        for mid_epoch, step, after_epoch in re.findall(
            r"fold 0: resuming (?:epoch (\d+) after its step (\d+)|after epoch (\d+))", logs
        )
    }
    assert stops and stops <= resumes, (stops, resumes, logs[-3000:])
    fold, straight = finished_fold(sweep_dir), finished_fold(twin_dir)
    assert fold["epochs_run"] == epochs and fold["diverged"] is None and fold["sittings"] >= 2
    assert straight["sittings"] == 1
    same = ("f1", "accuracy", "best_epoch", "epochs_run", "inner_f1", "inner_accuracy", "learning_curve")
    assert {k: fold[k] for k in same} == {k: straight[k] for k in same}  # as if it had never stopped
