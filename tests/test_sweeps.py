"""Sweeps as `make sweep` runs them: the grids, the launchers, resume after a kill, Optuna.

The sweeps run as subprocesses (`python -m klue_tc --multirun --config-dir sweeps ...`) on tiny
generated headlines, W&B offline, every output and cache under the test's tmp_path.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from conftest import EXPERIMENTS, REPO
from klue_tc.core.config import validate
from klue_tc.core.hardware import default_precision
from klue_tc.jobs.job_setup import results_key
from klue_tc.jobs.preflight import check_inputs
from klue_tc.jobs.sweeps import compose_sweep, sweep_jobs
from klue_tc.store.fingerprint import code_version
from klue_tc.store.records import FoldResult
from klue_tc.store.results import ResultsStore, config_hash

SWEEPS = REPO / "sweeps"
PAPER_EXPERIMENTS = [e for e in EXPERIMENTS if e != "transformer_pre_ln"]  # encoder.ln is an axis there
SMOKE_JOBS = 8  # sweeps/smoke.yaml: 2 experiments x 2 layer counts x 2 folds
TRAINED = "epoch 1/1: val macro-F1"  # one line per trained fold (one epoch in the smoke sweep)
SKIPPED = "already finished"


# --- helpers -------------------------------------------------------------------------------------


def sweep_command(name: str, sweep_dir: Path, data: Path, *args: str, limit: Optional[str] = "null") -> list[str]:
    """`python -m klue_tc --multirun` with sweeps/<name>.yaml on `data`; `limit` None keeps the file's."""
    return [
        sys.executable,
        "-m",
        "klue_tc",
        "--multirun",
        "--config-dir",
        str(SWEEPS),
        "--config-name",
        name,
        f"data.path={data}",
        *([f"data.limit={limit}"] if limit is not None else []),
        f"hydra.sweep.dir={sweep_dir}",
        *args,
    ]


def sweep_env(tmp_path: Path, **extra: str) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KLUE_TC_CACHE": str(tmp_path / "cache"),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "HF_HUB_OFFLINE": "1",
        **extra,
    }
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        env[var] = str(tmp_path / "wandb_home")
    env.pop("WANDB_API_KEY", None)
    return env


def run_sweep(tmp_path: Path, command: list[str], timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        command, cwd=tmp_path, env=sweep_env(tmp_path, **env), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done


def records(sweep_dir: Path) -> dict[Path, dict]:
    """Every finished (configuration, fold) record; each must be complete JSON."""
    return {p: json.loads(p.read_text(encoding="utf-8")) for p in sorted((sweep_dir / "results").glob("*/fold*.json"))}


def assert_report(sweep_dir: Path, configs: int = 4, folds: int = 2) -> pd.DataFrame:
    for name in ("report.md", "report.csv", "f1_by_layers.png"):
        assert (sweep_dir / name).is_file(), name
    report = pd.read_csv(sweep_dir / "report.csv")
    assert len(report) == configs and (report["folds"] == folds).all()
    return report


# --- fast: what the sweep files describe -----------------------------------------------------------


def test_paper_grid_is_600_jobs_of_one_configuration_and_one_fold():
    jobs = sweep_jobs("paper")
    assert len(jobs) == len(PAPER_EXPERIMENTS) * 2 * 5 * 3 * 5  # the built-in 4 experiments: 600
    assert len({tuple(job) for job in jobs}) == len(jobs)
    axes = {
        key: sorted({o.split("=", 1)[1] for job in jobs for o in job if o.startswith(key + "=")})
        for key in ("+experiment", "encoder.ln", "encoder.layers", "tokenizer", "cv.fold")
    }
    assert {"cnn", "trans_blstm", "trans_blstm_parallel", "transformer"} <= set(axes["+experiment"])
    assert axes == {
        "+experiment": PAPER_EXPERIMENTS,
        "encoder.ln": ["post", "pre"],
        "encoder.layers": ["2", "3", "4", "5", "6"],
        "tokenizer": ["kobert", "mecab", "sentencepiece"],
        "cv.fold": ["0", "1", "2", "3", "4"],
    }

    hydra = compose_sweep("paper", hydra_config=True).hydra
    assert hydra.sweep.dir == "outputs/sweeps/paper"  # not timestamped: the same command resumes
    assert hydra.launcher._target_.endswith("BasicLauncher")

    # One job per encoder x LN placement: the head follows the encoder, LN the override, the fold
    # is one of 5 and does not change the configuration's identity (its results key).
    keys = {}
    for job in jobs[::75]:
        cfg = compose_sweep("paper", job)
        run = validate(cfg)
        assert cfg.sweep == "paper" and run.cv.folds == 5 and run.trainer.devices == 1
        assert run.head.name == ("blstm" if run.encoder.name.startswith("trans_blstm") else "cls")
        assert f"encoder.ln={run.encoder.ln.value}" in job and f"+experiment={run.experiment}" in job
        keys[config_hash(run, "data", "32-true")] = job
    assert len(keys) == 2 * len(PAPER_EXPERIMENTS)
    other_fold = validate(compose_sweep("paper", [*jobs[0][:-1], "cv.fold=4"]))
    assert config_hash(other_fold, "data", "32-true") in keys


def test_full_training_sweep_is_every_experiment_on_the_regularized_recipe():
    jobs = sweep_jobs("full")
    runs = [validate(compose_sweep("full", job)) for job in jobs]
    assert [r.experiment for r in runs] == EXPERIMENTS
    assert {
        (
            r.trainer.max_epochs,
            r.cv.fold,
            r.augment.p,
            r.augment.p_end,
            r.optim.rdrop_alpha,
            r.optim.regularize_from_epoch,
        )
        for r in runs
    } == {(10, 0, 0.6, 0.2, 0.5, 1)}
    built_ins = {
        "transformer": ("post", "cls"),
        "transformer_pre_ln": ("pre", "cls"),
        "trans_blstm": ("post", "blstm"),
        "trans_blstm_parallel": ("post", "blstm"),
        "cnn": ("post", "cls"),
    }
    assert {r.experiment: (r.encoder.ln.value, r.head.name) for r in runs if r.experiment in built_ins} == built_ins


def test_smoke_grid_is_8_small_jobs_and_launchers_are_config_choices():
    jobs = sweep_jobs("smoke")
    assert len(jobs) == SMOKE_JOBS
    run = validate(compose_sweep("smoke", jobs[-1]))
    assert (run.cv.folds, run.trainer.max_epochs, run.encoder.d_model, run.data.limit) == (2, 1, 64, 500)

    launchers = {
        name: compose_sweep("smoke", [f"hydra/launcher={name}"], hydra_config=True).hydra.launcher
        for name in ("parallel", "submitit_local", "slurm")
    }
    assert launchers["parallel"]._target_.endswith("ParallelLauncher") and launchers["parallel"].n_jobs == 2
    assert launchers["submitit_local"]._target_.endswith("LocalLauncher")
    slurm = launchers["slurm"]
    assert slurm._target_.endswith("SlurmLauncher")
    assert (slurm.gpus_per_node, slurm.timeout_min, slurm.array_parallelism) == (1, 120, 64)


@pytest.mark.integration
@pytest.mark.slow  # a multirun of 8 jobs and the report in a process of its own: half a minute on 2 busy cores
def test_resumed_smoke_sweep_skips_every_finished_job(tmp_path, headlines_tsv):
    """Records already in <sweep>/results (as a killed sweep leaves them): nothing is trained again."""
    sweep_dir = tmp_path / "sweep"
    store = ResultsStore(sweep_dir / "results")
    expected = {}
    for i, job in enumerate(sweep_jobs("smoke")):
        run = validate(compose_sweep("smoke", [*job, f"data.path={headlines_tsv}", "data.limit=null"]))
        inputs = check_inputs(run, tmp_path / "check", sweep_dir / "results")
        key = results_key(run, inputs, default_precision(run.trainer))
        fold, f1 = run.cv.fold, 0.5 + i / 100
        store.put(
            key,
            fold,
            FoldResult(
                fold,
                f1,
                f1,
                best_epoch=1,
                epochs_run=1,
                train_samples_per_s=100.0,
                time_to_first_step_s=None,
                train_seconds=1.0,
                train_size=49,
                val_size=49,
                checkpoint=None,
                tokenizer_dir="",
                code=code_version(run),
            ),
        )
        expected.setdefault((run.encoder.name, run.encoder.layers), []).append(f1)
    assert len(records(sweep_dir)) == SMOKE_JOBS

    done = run_sweep(tmp_path, sweep_command("smoke", sweep_dir, headlines_tsv, "logger=none"), timeout=300)

    assert done.stdout.count(SKIPPED) == SMOKE_JOBS and TRAINED not in done.stdout
    report = assert_report(sweep_dir)
    for row in report.itertuples():
        assert row.f1_mean == pytest.approx(sum(expected[row.encoder, row.layers]) / 2)


def sweep_folder(name: str, args: list[str]) -> str:
    """The folder `make sweep SWEEP=name ARGS=...` writes into, and the one each of its jobs is
    composed with (from the overrides Hydra hands the jobs, their own appended)."""
    from klue_tc.jobs.sweep_folder import SweepFolderCallback

    cfg = compose_sweep(name, args, hydra_config=True)
    SweepFolderCallback().on_multirun_start(cfg)
    given = {arg.split("=", 1)[0] for arg in args}  # an axis given one value is that job's own
    axes = [axis for axis in sweep_jobs(name)[0] if axis.split("=", 1)[0] not in given]
    job = compose_sweep(name, [*cfg.hydra.overrides.hydra, *args, *axes], hydra_config=True)
    assert job.hydra.sweep.dir == cfg.hydra.sweep.dir
    return cfg.hydra.sweep.dir


def test_a_sweep_rerun_with_other_settings_has_a_folder_of_its_own():
    assert sweep_folder("smoke", []) == "outputs/sweeps/smoke"
    # Where the data are, what is logged, how it is launched and the axes' own values: the same jobs.
    same = ["data.path=../data/train.tsv", "logger=none", "hydra/launcher=parallel", "results.resume=false"]
    assert sweep_folder("smoke", [*same, "+experiment=transformer", "cv.fold=0"]) == "outputs/sweeps/smoke"
    assert (
        sweep_folder("smoke", ["trainer.max_epochs=3", "data.limit=3000", *same])
        == "outputs/sweeps/smoke+data.limit=3000,trainer.max_epochs=3"
    )
    other = sweep_folder("smoke", ["data.labels=[a,b]", "recipe=regularized"])
    assert re.fullmatch(r"outputs/sweeps/smoke\+data\.labels=[0-9a-f]{8},recipe=regularized", other), other
    assert sweep_folder("smoke", ["data.limit=3000", "hydra.sweep.dir=/tmp/mine"]) == "/tmp/mine"  # as given
    # Settings keyed only once set (a second pretraining, the stall rule) name the folder when set.
    assert sweep_folder("smoke", ["pretrain.seed=43"]) == "outputs/sweeps/smoke+pretrain.seed=43"
    assert (
        sweep_folder("smoke", ["pretrain.stall.max_restarts=2"]) == "outputs/sweeps/smoke+pretrain.stall.max_restarts=2"
    )


# --- slow: real sweeps --------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "parallel", "submitit_local"])
def test_smoke_sweep_with_each_launcher_writes_the_report(tmp_path, headlines_tsv, launcher):
    sweep_dir = tmp_path / "sweep"
    logger = "logger=wandb" if launcher == "basic" else "logger=none"  # W&B once: it is slow to start
    env = {"OMP_NUM_THREADS": "1"} if launcher == "submitit_local" else {}  # 8 processes at once on 2 cores
    start = time.perf_counter()
    done = run_sweep(
        tmp_path, sweep_command("smoke", sweep_dir, headlines_tsv, f"hydra/launcher={launcher}", logger), **env
    )
    print(f"{launcher}: {time.perf_counter() - start:.1f} s")

    found = records(sweep_dir)
    assert len(found) == SMOKE_JOBS and all(math.isfinite(r["f1"]) for r in found.values())
    assert len(list(sweep_dir.rglob("metrics.json"))) == SMOKE_JOBS
    assert_report(sweep_dir)
    if launcher == "basic":
        assert done.stdout.count(TRAINED) == SMOKE_JOBS
    if logger == "logger=wandb":
        # One offline W&B run per job in its configuration's group (the sweep's name first), and
        # beside the report's run one aggregate run per configuration (2 folds each).
        job_runs = sorted(sweep_dir.glob("*/*/fold*/wandb/offline-run-*/*.wandb"))
        assert len(job_runs) == SMOKE_JOBS and all(b"smoke-" in p.read_bytes() for p in job_runs)
        sweep_runs = list(sweep_dir.glob("wandb/offline-run-*"))
        report_runs = [r for r in sweep_runs if list(r.rglob("f1_table*.table.json"))]
        assert len(report_runs) == 1 and len(sweep_runs) == 1 + SMOKE_JOBS // 2


@pytest.mark.integration
@pytest.mark.slow
def test_a_sweep_rerun_with_other_args_leaves_the_first_ones_jobs_store_and_report_alone(tmp_path, headlines_tsv):
    one_job = ["+experiment=transformer", "encoder.layers=2", "cv.fold=0", "logger=none"]
    command = sweep_command("smoke", tmp_path, headlines_tsv, *one_job)
    command.remove(f"hydra.sweep.dir={tmp_path}")  # the sweep file's own folder, under outputs/sweeps
    run_sweep(tmp_path, command)
    first = tmp_path / "outputs" / "sweeps" / "smoke+data.limit=null"  # the tests' titles are fewer than 500
    job = Path("sentencepiece", "transformer-post-L2", "fold0", "metrics.json")
    before = (first / job).read_bytes()

    run_sweep(tmp_path, [*command, "trainer.max_epochs=2"])

    second = tmp_path / "outputs" / "sweeps" / "smoke+data.limit=null,trainer.max_epochs=2"
    assert (first / job).read_bytes() == before and (second / job).is_file()
    assert len(records(first)) == len(records(second)) == 1
    assert all((folder / "report.md").is_file() for folder in (first, second))


@pytest.mark.integration
@pytest.mark.slow
def test_killed_sweep_reruns_only_the_missing_jobs(tmp_path, headlines_tsv):
    sweep_dir = tmp_path / "sweep"
    command = sweep_command("smoke", sweep_dir, headlines_tsv, "logger=none")
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=sweep_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(list((sweep_dir / "results").glob("*/fold*.json"))) < 2:
            assert process.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "no job finished in time"
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    before = records(sweep_dir)  # complete JSON only, however the kill fell
    stamps = {p: p.stat().st_mtime_ns for p in before}
    assert 2 <= len(before) < SMOKE_JOBS and not (sweep_dir / "report.md").exists()

    done = run_sweep(tmp_path, command)

    assert done.stdout.count(SKIPPED) == len(before)
    assert done.stdout.count(TRAINED) == SMOKE_JOBS - len(before)
    after = records(sweep_dir)
    assert len(after) == SMOKE_JOBS
    assert all(p.stat().st_mtime_ns == stamps[p] and after[p] == before[p] for p in before)  # untouched
    assert_report(sweep_dir)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["the same command twice", "two users' sweeps, one store"])
def test_two_sweeps_at_once_train_each_job_and_encoder_once_and_leave_whole_records(tmp_path, headlines_tsv, layout):
    """Two processes over one results store and one pretrained-encoder store: the same sweep command
    started twice (one sweep folder), or two sweeps of their own folders that share the stores and
    take the same jobs in the opposite order (so that both want the one encoder at once)."""
    store = tmp_path / "team"
    shared = ["logger=none", "+experiment=transformer", "encoder.layers=1", "cv.fold=0"]
    shared += ["pretrain=mlm", "pretrain.max_steps=2", "pretrain.batch_size=16"]
    shared += ["hydra.sweep.subdir=${head.name}"]  # the heads' jobs in folders of their own
    if layout == "the same command twice":
        sweep_dirs = [tmp_path / "sweep"] * 2
        commands = [sweep_command("smoke", tmp_path / "sweep", headlines_tsv, *shared, "head=cls,mean")] * 2
        results, pretrained = tmp_path / "sweep" / "results", tmp_path / "sweep" / "pretrained"
    else:
        sweep_dirs = [tmp_path / "alice", tmp_path / "bob"]
        stores = [f"results.dir={store / 'results'}", f"pretrain.dir={store / 'pretrained'}"]
        commands = [
            sweep_command("smoke", folder, headlines_tsv, *shared, *stores, f"head={order}")
            for folder, order in zip(sweep_dirs, ("cls,mean", "mean,cls"))
        ]
        results, pretrained = store / "results", store / "pretrained"
    processes = [
        subprocess.Popen(
            command, cwd=tmp_path, env=sweep_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for command in commands
    ]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    assert [p.returncode for p in processes] == [0, 0], "\n".join(out[-3000:] for out in outputs)
    said = "".join(outputs)
    assert said.count(TRAINED) == 2, said[-4000:]  # two configurations of one fold: each trained once
    assert len(re.findall(r"pretrained encoder \w+: 2 mlm steps", said)) == 1, said[-4000:]  # one encoder, shared
    stored = sorted(results.glob("*/fold*.json"))
    assert len(stored) == 2 and all(FoldResult.load(p).fold == 0 for p in stored)  # whole, checksums and all
    from klue_tc.pretraining.pretrain import PretrainedStore

    keys = {FoldResult.load(p).pretrained["key"] for p in stored}
    assert len(keys) == 1 and PretrainedStore(pretrained).load(keys.pop()) is not None
    for sweep_dir in set(sweep_dirs):
        report = assert_report(sweep_dir, configs=2, folds=1)
        assert report["f1_mean"].notna().all()


@pytest.mark.integration
@pytest.mark.slow
def test_resume_false_retrains_and_overwrites(tmp_path, headlines_tsv):
    sweep_dir = tmp_path / "sweep"
    one_job = ["+experiment=transformer", "encoder.layers=2", "cv.fold=0", "logger=none"]  # replaces the axes
    run_sweep(tmp_path, sweep_command("smoke", sweep_dir, headlines_tsv, *one_job))
    ((path, first),) = records(sweep_dir).items()
    stamp = path.stat().st_mtime_ns

    done = run_sweep(tmp_path, sweep_command("smoke", sweep_dir, headlines_tsv, *one_job, "results.resume=false"))

    assert SKIPPED not in done.stdout and done.stdout.count(TRAINED) == 1
    ((again, second),) = records(sweep_dir).items()
    assert again == path and path.stat().st_mtime_ns > stamp and second["f1"] == pytest.approx(first["f1"])


@pytest.mark.integration
@pytest.mark.slow
def test_optuna_study_records_a_failed_trial_and_goes_on(tmp_path, headlines_tsv):
    """Two trials: `trainer.max_epochs=0` is rejected at start-up (it could never validate): a failed
    trial, recorded, not the end of the study."""
    sweep_dir = tmp_path / "study"
    tiny = [
        "encoder.d_model=choice(32,64)",
        "encoder.heads=2",
        "encoder.ffn_dim=64",
        "head.hidden=32",
        "tokenizer.vocab_size=400",
        "data.batch_size=16",
        "cv.folds=2",
        "trainer.progress_bar=none",
    ]
    command = [
        sys.executable,
        "-m",
        "klue_tc",
        "hparams_search=optuna",
        f"data.path={headlines_tsv}",
        f"hydra.sweep.dir={sweep_dir}",
        "logger=none",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=0",
        "trainer.max_epochs=choice(0,1)",
        *tiny,
    ]
    done = run_sweep(tmp_path, command)

    scores = [json.loads(p.read_text())["cv_f1_mean"] for p in sorted(sweep_dir.glob("*/metrics.json"))]
    finite = [s for s in scores if math.isfinite(s)]
    assert len(scores) == len(finite) == 1  # seed 0 samples max_epochs 0 then 1; the first never trains
    assert (done.stdout + done.stderr).count("Failed experiment") == 1
    assert "trainer.max_epochs must be >= 1, got 0" in done.stdout + done.stderr
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert result["best_value"] == pytest.approx(max(finite))
    assert set(result["best_params"]) == {
        "optim.lr",
        "encoder.dropout",
        "encoder.d_model",
        "optim.warmup_ratio",
        "trainer.max_epochs",
    }
    assert OmegaConf.load(sweep_dir / "0" / ".hydra" / "hydra.yaml").hydra.sweeper.direction == "maximize"
    # A line per trial, the trials' table at the end, and no alembic set-up lines from Optuna's import.
    output = done.stdout + done.stderr
    assert "trial 0/2: " in output and "trial 1/2: " in output and "Optuna trials (" in output
    assert "setup plugin alembic" not in output
    assert (sweep_dir / "trials.csv").is_file()


def test_study_grid_is_the_120_paper_configurations_on_3_folds_of_10000_titles():
    jobs = sweep_jobs("study")
    configurations = len(PAPER_EXPERIMENTS) * 2 * 5 * 3  # the built-in 4 experiments: 120
    assert len(jobs) == configurations * 3 and len({tuple(job) for job in jobs}) == len(jobs)
    run = validate(compose_sweep("study", jobs[-1]))
    assert (run.data.limit, run.cv.folds, run.trainer.max_epochs, run.sweep) == (10_000, 3, 6, "study")
    configs = {tuple(o for o in job if not o.startswith("cv.fold=")) for job in jobs}
    assert len(configs) == configurations


def test_ensemble_sweep_trains_four_pretrained_members_on_5_folds_and_never_pretrains_a_validation_title(tmp_path):
    from conftest import make_headlines, write_tsv
    from klue_tc.data.corpus import fold_corpus, gather_sources, normalised
    from klue_tc.data.titles import read_labelled_file, stratified_folds

    jobs = sweep_jobs("ensemble")
    assert len(jobs) == 4 * 5 and len({tuple(job) for job in jobs}) == len(jobs)
    runs = [validate(compose_sweep("ensemble", job)) for job in jobs]
    members = {
        (r.experiment, r.encoder.ln.value, r.encoder.layers, r.tokenizer.name, r.head.name, r.augment.p > 0)
        for r in runs
    }
    assert members == {
        ("transformer", "post", 3, "sentencepiece", "cls", True),  # recipe=regularized: masking and R-Drop
        ("transformer", "post", 3, "kobert", "cls", True),
        ("cnn", "post", 4, "mecab", "cls", False),
        ("trans_blstm_parallel", "post", 4, "mecab", "blstm", False),
    }
    assert {
        (r.cv.folds, r.data.limit, r.pretrain.objective, r.pretrain.include_held_out_titles, r.results.dir)
        for r in runs
    } == {(5, None, "mlm", True, "docs/ensemble/results")}
    assert {r.trainer.precision for r in runs} == {"32-true"}  # one key on any machine
    assert {r.pretrain.stall.max_restarts for r in runs} == {2}  # the stall rule, declared before any job
    assert sorted({r.cv.fold for r in runs}) == [0, 1, 2, 3, 4]
    hydra = compose_sweep("ensemble", jobs[0], hydra_config=True).hydra
    assert hydra.sweep.dir == "outputs/sweeps/ensemble" and hydra.runtime.choices.ensemble_member

    # One corpus for every fold: the training file's titles, never a validation title.
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=10, seed=0))
    validation = write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=10, seed=1))
    labelled, scored = read_labelled_file(train), read_labelled_file(validation)
    run = runs[0]
    sources = gather_sources(run, labelled, scored)
    corpora = [
        fold_corpus(run, sources, labelled, held)
        for _, held in stratified_folds(labelled.labels, run.cv.folds, run.cv.seed)
    ]
    assert len({c.fingerprint for c in corpora}) == 1  # one pretraining per member
    corpus = {normalised(t) for t in corpora[0].texts}
    assert corpus and not corpus & {normalised(t) for t in scored.texts}
    assert corpus <= {normalised(t) for t in labelled.texts}


def test_one_model_sweep_is_the_first_ensemble_members_folds_with_the_wide_path_in_a_store_of_its_own():
    """sweeps/one-model.yaml: 5 jobs, each the ensemble's first member's fold (sweeps/ensemble.yaml)
    with wide=nbsvm and nothing else in its results key changed, so its records compare fold by
    fold with the member's; its encoder is pretrained under the member's key, in a store of its own."""
    from test_pretraining import CPU, fold_corpus_from

    from conftest import make_headlines
    from klue_tc.core.config import keyed_settings
    from klue_tc.pretraining.encoder_keys import pretrained_key

    jobs = sweep_jobs("one-model")
    assert len(jobs) == 5 and len({tuple(job) for job in jobs}) == len(jobs)
    runs = sorted((validate(compose_sweep("one-model", job)) for job in jobs), key=lambda r: r.cv.fold)
    member = sorted(
        (
            validate(compose_sweep("ensemble", job))
            for job in sweep_jobs("ensemble")
            if "+ensemble_member=transformer_sentencepiece" in job
        ),
        key=lambda r: r.cv.fold,
    )
    assert [r.cv.fold for r in runs] == [r.cv.fold for r in member] == [0, 1, 2, 3, 4]
    corpus = fold_corpus_from([t for _, t in make_headlines(per_class=3)])
    for ours, theirs in zip(runs, member):
        keyed = keyed_settings(ours)
        assert keyed.pop("wide")["name"] == "nbsvm" and "wide" not in keyed_settings(theirs)
        assert keyed == keyed_settings(theirs)  # the member's settings, the wide path aside
        assert ours.wide.on and (ours.wide.freeze_epochs, ours.wide.temperature) == (0, 1.0)
        assert pretrained_key(ours, CPU, corpus, None) == pretrained_key(theirs, CPU, corpus, None)
        assert (ours.data.limit, ours.data.validation_path) == (theirs.data.limit, theirs.data.validation_path)
    assert {(r.results.dir, r.pretrain.dir) for r in runs} == {
        ("docs/one-model-full/results", "outputs/sweeps/one-model/pretrained")
    }
    assert {(r.results.dir, r.pretrain.dir) for r in member} != {(runs[0].results.dir, runs[0].pretrain.dir)}
    hydra = compose_sweep("one-model", jobs[0], hydra_config=True).hydra
    assert hydra.sweep.dir == "outputs/sweeps/one-model" and hydra.runtime.choices.ensemble_member
