"""The parallel launcher (`hydra/launcher=parallel`): k workers per GPU, each pinned to its GPU.

The assignment is a pure function, tested on faked device lists; one tiny sweep runs through the
launcher on the CPU with two faked GPUs and reads back which one each job was given.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from joblib import cpu_count
from omegaconf import OmegaConf
from test_sweeps import compose_sweep, records, run_sweep, sweep_command, sweep_env

from conftest import REPO
from hydra_plugins.klue_tc_launcher._workers import (
    THREAD_VARS,
    LauncherConfigError,
    Slot,
    describe,
    thread_settings,
    visible_gpus,
    worker_slots,
)


def test_two_gpus_three_jobs_each_is_six_workers_three_per_gpu():
    slots = worker_slots(["0", "1"], jobs_per_gpu=3, cpu_count=24, n_jobs=2)
    assert len(slots) == 6 and Counter(s.gpu for s in slots) == {"0": 3, "1": 3}
    assert {s.threads for s in slots} == {24 // 6}
    assert [s.gpu for s in slots[:2]] == ["0", "1"]  # dealt round: the first two workers on different GPUs
    assert describe(slots) == "6 workers (3 on GPU 0, 3 on GPU 1), 4 threads each"


def test_sweep_progress_counts_jobs_and_projects_the_pace():
    from hydra_plugins.klue_tc_launcher.parallel_launcher import SweepProgress

    now = iter([0.0, 600.0, 1200.0])
    progress = SweepProgress(4, clock=lambda: next(now))
    assert progress.line(7, 590.0) == "sweep: job #7 ended, 1/4 done | elapsed 0:10:00, ETA 0:30:00 at the pace so far"
    assert progress.line(3, 600.0).endswith("2/4 done | elapsed 0:20:00, ETA 0:20:00 at the pace so far")


def test_a_resumed_sweeps_eta_ignores_the_jobs_it_found_finished():
    from hydra_plugins.klue_tc_launcher.parallel_launcher import SweepProgress

    now = iter([0.0, 1.0, 9.0, 609.0])
    progress = SweepProgress(5, clock=lambda: next(now))
    assert progress.line(0, 0.8, found_finished=True).endswith(
        "1/5 done (1 found finished) | elapsed 0:00:01, ETA after the first job that trains"
    )
    # A worker's first job imports torch and reads the data: slow, but it trained nothing.
    progress.line(1, 8.0, found_finished=True)
    # 600 s of training in 609 s since the start: 2 jobs left take about 2 x 609 s, not 2 x 203 s.
    assert progress.line(2, 600.0, found_finished=False).endswith(
        "3/5 done (2 found finished) | elapsed 0:10:09, ETA 0:20:18 at the pace so far"
    )


def test_a_job_without_metrics_counts_as_found_finished_only_when_quick():
    from hydra_plugins.klue_tc_launcher.parallel_launcher import SweepProgress

    progress = SweepProgress(3, clock=iter([0.0, 1.0, 61.0]).__next__)
    assert "(1 found finished)" in progress.line(0, 0.9)
    assert "(1 found finished)" in progress.line(1, 60.0)


def test_found_finished_reads_which_folds_the_job_reused(tmp_path):
    import json

    from hydra.core.utils import JobReturn, JobStatus

    from hydra_plugins.klue_tc_launcher.parallel_launcher import found_finished

    def job(output_dir, status=JobStatus.COMPLETED):
        hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(output_dir)}}})
        return JobReturn(hydra_cfg=hydra_cfg, working_dir=str(REPO), status=status)

    def wrote(reused):
        metrics = {"folds": [{"fold": 0}, {"fold": 1}], "reused_folds": reused}
        (tmp_path / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
        return tmp_path

    assert found_finished(job(wrote([0, 1]))) is True
    assert found_finished(job(wrote([1]))) is False  # fold 0 trained
    assert found_finished(job(wrote([0, 1]), JobStatus.FAILED)) is None  # its metrics.json is an older run's
    assert found_finished(job(tmp_path / "elsewhere")) is None


def test_no_gpu_is_n_jobs_cpu_workers():
    assert worker_slots([], jobs_per_gpu=4, cpu_count=8, n_jobs=2) == [Slot(None, 4)] * 2
    assert worker_slots([], jobs_per_gpu=1, cpu_count=8, n_jobs=-1) == [Slot(None, 1)] * 8  # one per core
    assert describe([Slot(None, 1)] * 2) == "2 CPU workers, 1 thread each"


def test_never_more_workers_than_jobs_nor_fewer_than_one_thread():
    # 2 jobs on 2 GPUs x 3: one worker on each GPU, and the cores shared between those two.
    assert worker_slots(["0", "1"], jobs_per_gpu=3, cpu_count=24, n_jobs=2, jobs=2) == [Slot("0", 12), Slot("1", 12)]
    assert {s.threads for s in worker_slots(["0", "1"], jobs_per_gpu=4, cpu_count=2, n_jobs=2)} == {1}


@pytest.mark.parametrize(
    "jobs_per_gpu, n_jobs, line",
    [
        (0, 2, "hydra.launcher.jobs_per_gpu must be >= 1, got 0"),
        (-1, 2, "hydra.launcher.jobs_per_gpu must be >= 1, got -1"),
        (1, 0, "hydra.launcher.n_jobs must be >= 1 (or -1: one per core), got 0"),
    ],
)
def test_out_of_range_counts_are_rejected_with_one_line(jobs_per_gpu, n_jobs, line):
    with pytest.raises(LauncherConfigError) as err:
        worker_slots(["0"], jobs_per_gpu=jobs_per_gpu, cpu_count=8, n_jobs=n_jobs)
    assert str(err.value) == line


@pytest.mark.integration
def test_visible_gpus_come_from_cuda_visible_devices_else_nvidia_smi(tmp_path, monkeypatch):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-8f3a,GPU-77c1"}) == ["GPU-8f3a", "GPU-77c1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []

    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-8f3a)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-77c1)'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert visible_gpus({}) == ["0", "1"]
    smi.unlink()
    assert visible_gpus({}) == []


def test_parallel_is_this_launcher_with_its_defaults():
    launcher = compose_sweep("smoke", ["hydra/launcher=parallel"], hydra_config=True).hydra.launcher
    assert launcher._target_ == "hydra_plugins.klue_tc_launcher.parallel_launcher.ParallelLauncher"
    assert (launcher.n_jobs, launcher.gpus, launcher.jobs_per_gpu) == (2, None, 1)
    launcher = compose_sweep(
        "smoke",
        ["hydra/launcher=parallel", "hydra.launcher.gpus=[0,1]", "hydra.launcher.jobs_per_gpu=4"],
        hydra_config=True,
    ).hydra.launcher
    assert (list(launcher.gpus), launcher.jobs_per_gpu) == (["0", "1"], 4)


@pytest.mark.integration
def test_sweep_with_zero_jobs_per_gpu_stops_with_one_line(tmp_path, headlines_tsv):
    command = sweep_command(
        "smoke", tmp_path / "sweep", headlines_tsv, "hydra/launcher=parallel", "hydra.launcher.jobs_per_gpu=0"
    )
    done = subprocess.run(command, cwd=tmp_path, env=sweep_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "error: hydra.launcher.jobs_per_gpu must be >= 1, got 0"
    assert not records(tmp_path / "sweep")


@pytest.mark.integration
@pytest.mark.slow
def test_two_job_sweep_on_two_faked_gpus_gives_each_job_its_own(tmp_path, headlines_tsv):
    """The CPU trains (trainer.accelerator=cpu); the workers are pinned to "GPUs" 0 and 1 all the same."""
    sweep_dir = tmp_path / "sweep"
    two_jobs = ["+experiment=transformer", "encoder.layers=2", "data.limit=null"]  # x cv.fold 0, 1; all 98 titles
    done = run_sweep(
        tmp_path,
        sweep_command(
            "smoke",
            sweep_dir,
            headlines_tsv,
            *two_jobs,
            "logger=none",
            "trainer.accelerator=cpu",
            "hydra/launcher=parallel",
            "hydra.launcher.gpus=[0,1]",
            "hydra.launcher.jobs_per_gpu=1",
        ),
    )

    assert "Launching 2 jobs on 2 workers (1 on GPU 0, 1 on GPU 1)" in done.stdout + done.stderr
    assert "2/2 done | elapsed" in done.stdout + done.stderr  # the sweep's own progress line
    assert len(records(sweep_dir)) == 2 and (sweep_dir / "report.md").is_file()
    seen = [OmegaConf.load(p).hydra.job.env_set for p in sorted(sweep_dir.rglob(".hydra/hydra.yaml"))]
    assert sorted(env.CUDA_VISIBLE_DEVICES for env in seen) == ["0", "1"]
    # Every thread pool of a worker sized alike: the user's value where set, else the slot's share.
    expected = thread_settings(max(1, cpu_count() // 2), os.environ)
    assert {var: {env[var] for env in seen} for var in THREAD_VARS} == {var: {n} for var, n in expected.items()}


@pytest.mark.integration
def test_a_users_omp_num_threads_sizes_every_pool_of_a_worker():
    """OMP_NUM_THREADS=1 alone (two sweeps side by side on two cores) must give each worker one
    thread: the slot's share of the cores filled MKL_NUM_THREADS, and torch took two."""
    worker = (
        "import queue\n"
        "from hydra_plugins.klue_tc_launcher._workers import Slot, pin_worker\n"
        "slots = queue.Queue(); slots.put(Slot(None, 2)); pin_worker(slots)\n"
        "import torch; print(torch.get_num_threads())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    printed = subprocess.run(
        [sys.executable, "-c", worker],
        env={**env, "OMP_NUM_THREADS": "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.split() == ["1"]
    assert describe([Slot(None, 2)], threads=1) == "1 CPU worker, 1 thread each"  # the launch line says so
    assert thread_settings(4, {}) == dict.fromkeys(THREAD_VARS, "4")
    assert thread_settings(4, {"MKL_NUM_THREADS": "3", "OMP_NUM_THREADS": "2"}) == {
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "3",
        "OPENBLAS_NUM_THREADS": "2",
    }


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_worker_dies_with_its_launcher(tmp_path):
    """A launcher killed outright (kill -9, a lost login) leaves no worker training on unseen."""
    script = tmp_path / "launcher.py"
    script.write_text(
        "import concurrent.futures, multiprocessing, os, time\n"
        "from hydra_plugins.klue_tc_launcher._workers import end_with_the_launcher\n"
        "if __name__ == '__main__':\n"
        "    pool = concurrent.futures.ProcessPoolExecutor(1, multiprocessing.get_context('spawn'),\n"
        "                                                  initializer=end_with_the_launcher)\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 120)\n"
        "    time.sleep(0.5)\n"
        "    os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    worker = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{worker}").exists()
