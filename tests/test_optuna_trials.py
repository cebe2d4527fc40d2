"""The hyper-parameter search's own output: a line per trial, every trial's table when the study
ends (and trials.csv), only the best trial's checkpoints kept, and no alembic set-up lines."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf

from conftest import REPO
from klue_tc.report.optuna_trials import OptunaTrialsCallback
from klue_tc.store.records import Describe, FoldResult, RunResult

PARAMS = {"optim.lr": "tag(log, interval(1e-4, 5e-3))", "encoder.d_model": "choice(128, 256)"}


def study_config(sweep_dir, num=0):
    return OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep_dir)}, "sweeper": {"n_trials": 3, "params": PARAMS}, "job": {"num": num}}}
    )


def write_trial(sweep_dir, num: int, key: str, f1: float, lr: float) -> None:
    job = sweep_dir / str(num)
    for fold in (0, 1):
        (job / f"fold{fold}").mkdir(parents=True)
        (job / f"fold{fold}" / "best.ckpt").write_bytes(b"0" * 1000)
    folds = [FoldResult(k, f1, f1, 1, 1, 100.0, 1.0, 60.0, 40, 10, None, "") for k in (0, 1)]
    RunResult(Describe("cnn", "cnn", "post", 2, "cls", "mecab"), key, "optuna-cnn", 2, folds).save(job / "metrics.json")
    (job / ".hydra").mkdir()
    overrides = [f"optim.lr={lr}", "encoder.d_model=128", "+experiment=cnn"]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides), encoding="utf-8")


def test_the_study_ends_with_every_trials_table_and_the_best_trials_checkpoints_only(tmp_path, capsys):
    for num, (key, f1, lr) in enumerate([("a", 0.61, 0.001), ("b", 0.66, 0.002), ("c", 0.58, 0.003)]):
        write_trial(tmp_path, num, key, f1, lr)
    (tmp_path / "optimization_results.yaml").write_text(
        "name: optuna\nbest_params:\n  optim.lr: 0.002\n  encoder.d_model: 128\nbest_value: 0.66\n", encoding="utf-8"
    )

    OptunaTrialsCallback().on_multirun_end(study_config(tmp_path))

    trials = pd.read_csv(tmp_path / "trials.csv")
    assert trials["trial"].tolist() == [0, 1, 2] and trials["optim.lr"].tolist() == [0.001, 0.002, 0.003]
    assert trials["cv_f1_mean"].tolist() == [0.61, 0.66, 0.58]
    out = capsys.readouterr().out
    assert "Optuna trials (3)" in out and "1 *" in out  # the best marked
    assert "removed 4 checkpoint(s) of the others" in out
    assert sorted(p.parent.parent.name for p in tmp_path.glob("*/fold*/best.ckpt")) == ["1", "1"]
    assert all((tmp_path / str(n) / "metrics.json").is_file() for n in range(3))  # records and scores stay


def test_each_trial_says_its_parameters_and_score_as_it_ends(tmp_path, capsys):
    callback = OptunaTrialsCallback()
    for num, value in enumerate([0.61, 0.66, 0.58]):
        done = SimpleNamespace(overrides=[f"optim.lr={num}", "encoder.d_model=128"], status=JobStatus.COMPLETED)
        done.return_value = value
        callback.on_job_end(study_config(tmp_path, num), done)
    failed = SimpleNamespace(overrides=["optim.lr=9"], status=JobStatus.FAILED)
    callback.on_job_end(study_config(tmp_path, 3), failed)

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "trial 0/3: optim.lr=0 encoder.d_model=128 -> CV macro-F1 0.6100 (best so far 0.6100, trial 0)"
    assert lines[2] == "trial 2/3: optim.lr=2 encoder.d_model=128 -> CV macro-F1 0.5800 (best so far 0.6600, trial 1)"
    assert lines[3] == "trial 3/3: optim.lr=9 -> failed"


def test_the_search_config_names_the_callback():
    config = OmegaConf.load(REPO / "conf" / "hparams_search" / "optuna.yaml")
    target = config.hydra.callbacks.optuna_trials._target_
    assert target == "klue_tc.report.optuna_trials.OptunaTrialsCallback"


@pytest.mark.integration
@pytest.mark.slow
def test_optunas_import_prints_no_alembic_set_up_lines():
    """Hydra's logging shows INFO: importing optuna under it printed seven `setup plugin alembic` lines."""
    code = "import logging; logging.basicConfig(level=logging.INFO); import klue_tc.__main__; import optuna"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "alembic" not in done.stdout + done.stderr
