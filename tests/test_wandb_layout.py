"""W&B runs that match the unit of work: a group per configuration (in a sweep too), an aggregate
run per configuration, failed runs marked failed, and train/loss on runs of any size."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from conftest import TINY_MODEL
from jobs import compose_job, run_in_process
from klue_tc.core.config import validate
from klue_tc.store.records import Describe, FoldResult, RunResult


class FakeRun:
    """What klue_tc asks of a W&B run, recorded."""

    def __init__(self, **kwargs):
        self.kwargs, self.summary, self.exit_code = kwargs, {}, None
        self.settings = SimpleNamespace(mode="offline", sync_dir=None)

    def log(self, *args, **kwargs) -> None:
        pass

    def define_metric(self, *args, **kwargs) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        self.exit_code = exit_code


@pytest.fixture
def fake_wandb(monkeypatch) -> list[FakeRun]:
    started: list[FakeRun] = []

    def init(**kwargs):
        started.append(FakeRun(**kwargs))
        return started[-1]

    monkeypatch.setattr("wandb.init", init)
    return started


def tiny_job(tmp_path: Path, headlines_tsv: Path, *extra: str) -> list[str]:
    return [
        "+experiment=transformer",
        f"data.path={headlines_tsv}",
        "cv.folds=2",
        "cv.fold=0",
        "encoder.layers=1",
        f"results.dir={tmp_path / 'results'}",
        *TINY_MODEL,
        *extra,
    ]


@pytest.mark.integration
def test_train_loss_is_logged_every_epoch_on_a_run_shorter_than_the_logging_interval(tmp_path, headlines_tsv):
    run_dir = tmp_path / "run"
    # 49 training titles in batches of 16: 4 steps an epoch, under log_every_n_steps (20).
    run_in_process(tiny_job(tmp_path, headlines_tsv, "logger=csv", "trainer.max_epochs=3"), run_dir)
    with open(run_dir / "csv" / "fold0" / "metrics.csv", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("train/loss")]
    assert len({row["epoch"] for row in rows}) == 3


@pytest.mark.integration
def test_an_interrupted_fold_finishes_its_wandb_run_as_failed_under_its_own_name(tmp_path, headlines_tsv, monkeypatch):
    from wandb.sdk.wandb_run import Run

    finished, finish = [], Run.finish

    def recording_finish(self, exit_code=None):
        finished.append((self.name, self.group, self.job_type, exit_code))
        return finish(self, exit_code=exit_code)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt  # Lightning turns it into sys.exit(1) after its own clean-up

    monkeypatch.setattr(Run, "finish", recording_finish)
    monkeypatch.setattr("klue_tc.training.callbacks.FoldMonitor.on_validation_end", ctrl_c)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit):
        run_in_process(tiny_job(tmp_path, headlines_tsv, "logger=wandb", "trainer.max_epochs=2"), run_dir)
    [(name, group, job_type, exit_code)] = finished
    assert name.endswith("-fold0") and group.startswith("transformer-") and job_type == "fold0"
    assert exit_code == 1  # W&B shows the run failed, not finished


@pytest.mark.integration
def test_a_sweep_has_a_group_and_an_aggregate_run_per_configuration_beside_its_report_run(tmp_path, fake_wandb):
    from klue_tc.jobs.job_setup import wandb_group
    from klue_tc.report.sweep_callback import SweepReportCallback

    cfg = compose_job(["+experiment=transformer", "sweep=smoke"], tmp_path / "job")
    assert wandb_group(validate(cfg), "abc123") == "smoke-transformer-abc123"

    sweep = tmp_path / "sweep"
    for key, experiment in (("k1", "transformer"), ("k2", "trans_blstm")):
        for fold in (0, 1):
            record = FoldResult(fold, 0.5 + fold / 10, 0.6, 1, 1, 100.0, 1.0, 2.0, 40, 10, None, "")
            describe = Describe(experiment, experiment, "post", 2, "cls", "sentencepiece")
            RunResult(describe, key, "smoke", 2, [record]).save(sweep / key / f"fold{fold}" / "metrics.json")
    config = OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(sweep)}},
            "sweep": "smoke",
            "experiment": "transformer",
            "logger": {"name": "wandb", "wandb": {"project": "p", "entity": None, "mode": "offline", "group": None}},
        }
    )
    SweepReportCallback().on_multirun_end(config)

    by_type = {}
    for run in fake_wandb:
        by_type.setdefault(run.kwargs["job_type"], []).append(run)
    assert [r.kwargs["group"] for r in by_type["report"]] == ["smoke"]
    aggregates = {r.kwargs["group"]: r for r in by_type["aggregate"]}
    assert set(aggregates) == {"smoke-transformer-k1", "smoke-trans_blstm-k2"}
    assert aggregates["smoke-transformer-k1"].summary["cv/n"] == 2
    assert all(r.exit_code == 0 for r in fake_wandb)


def test_one_line_says_how_to_view_and_upload_every_offline_run(tmp_path, caplog):
    """A job's fold runs, pretraining and aggregate are one line, not a `wandb sync` line each; a
    sweep's runs, in its jobs' folders, are one line too."""
    from klue_tc.jobs.loggers import offline_runs_line

    run = tmp_path / "run"
    for name in ("offline-run-20260101_120000-aaa", "offline-run-20260101_120100-bbb"):
        (run / "wandb" / name).mkdir(parents=True)
    line = offline_runs_line(run)
    assert line.startswith("W&B: 2 run(s) saved offline")
    assert f"`wandb leet {run / 'wandb'}`" in line and f"`wandb sync {run / 'wandb'}/offline-run-*`" in line
    (tmp_path / "job1" / "wandb" / "offline-run-20260101_120200-ccc").mkdir(parents=True)
    sweep_line = offline_runs_line(tmp_path)
    assert "3 run(s)" in sweep_line and f"find {tmp_path} -type d -path '*/wandb/offline-run-*'" in sweep_line
    assert offline_runs_line(tmp_path / "run" / "wandb" / "offline-run-20260101_120000-aaa") is None


@pytest.mark.integration
def test_an_aggregate_made_again_replaces_its_earlier_offline_run(tmp_path):
    """A sweep re-run makes its configurations' aggregate runs again from the same records: offline,
    each replaces the one before instead of piling up beside it."""
    from klue_tc.core.config import WandbConfig
    from klue_tc.jobs.loggers import log_aggregate

    record = FoldResult(0, 0.5, 0.6, 1, 1, 100.0, 1.0, 2.0, 40, 10, None, "")
    result = RunResult(Describe("cnn", "cnn", "post", 2, "cls", "sentencepiece"), "k1", "smoke", 2, [record])
    for _ in range(2):
        log_aggregate(WandbConfig(project="p"), result, tmp_path, "smoke-cnn-k1")
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1
    log_aggregate(WandbConfig(project="p"), result, tmp_path, "smoke-cnn-k2")  # another configuration's: its own
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 2
