"""cv.folds=1: one final model on every training title, its epoch chosen on its inner split, scored
on the validation titles and served by `python -m klue_tc.predict` like any run."""

from __future__ import annotations

import json
import logging

import pytest
from omegaconf import OmegaConf

from conftest import TINY_MODEL, make_headlines, write_tsv
from jobs import run_in_process
from klue_tc.core.errors import ConfigError
from klue_tc.jobs.run import final_line
from klue_tc.predict import predict_titles
from klue_tc.report.sweep_callback import SweepReportCallback


def final_overrides(tmp_path, train, *extra):
    return [
        f"data.path={train}",
        f"results.dir={tmp_path / 'results'}",
        "logger=none",
        *TINY_MODEL,
        "+experiment=transformer",
        "encoder.layers=1",
        "cv.folds=1",
        "trainer.max_epochs=2",
        *extra,
    ]


@pytest.mark.integration
def test_a_final_model_trains_on_every_title_is_scored_on_validation_and_predicts(tmp_path, capsys, caplog):
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14, seed=1))
    validation = write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=4, seed=2))
    run_dir = tmp_path / "run"
    run_in_process(final_overrides(tmp_path, train, f"data.validation_path={validation}"), run_dir)

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["cv_folds"] == 1 and len(metrics["folds"]) == 1
    model = metrics["folds"][0]
    assert model["train_size"] + model["inner_size"] == 7 * 14  # every training title: fit + inner split
    assert model["val_size"] == 7 * 4  # its scored titles are the validation file's
    assert model["f1"] == pytest.approx(metrics["validation_f1"])  # one model: its score is the run's
    assert [p["epoch"] for p in model["learning_curve"]] == [1, 2]  # the inner split chose among them
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("transformer: final model on all 98 training titles (epoch ")
    assert "chosen on its inner split), no CV; validation macro-F1 " in last
    predictions = predict_titles(run_dir, ["코스피 상승 마감", "손흥민 결승골 폭발"])
    assert len(predictions) == 2 and all(0.0 <= p <= 1.0 for _, p in predictions)

    # A sweep of final models alone (sweeps/distill.yaml) ends saying why there is no table, not "failed".
    sweep = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(run_dir)}}, "logger": {"name": "none"}, "sweep": "distill"}
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        SweepReportCallback().on_multirun_end(sweep)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"no comparison table: {run_dir}: only final models (cv.folds=1)")


@pytest.mark.integration
def test_a_final_model_without_validation_titles_is_refused_in_one_line(tmp_path):
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14, seed=1))
    with pytest.raises(ConfigError, match=r"cv.folds=1 trains one final model .* pass data.validation_path="):
        run_in_process(final_overrides(tmp_path, train), tmp_path / "run")


def finished_folds(count: int, finished_at: tuple[str, ...] = ()) -> list:
    from klue_tc.store.records import FoldResult

    folds = [FoldResult(k, 0.5 + k / 10, 0.6, 1, 1, None, None, 1.0, 10, 5, None, "") for k in range(count)]
    for fold, when in zip(folds, finished_at):
        fold.finished_at = when
    return folds


def job_result(folds: list, cv_folds: int, reused: tuple[int, ...] = ()):
    from klue_tc.store.records import Describe, RunResult

    return RunResult(Describe("cnn", "cnn", "post", 2, "cls", "mecab"), "k", None, cv_folds, folds, list(reused))


def test_the_final_line_of_a_cross_validated_run_counts_its_folds():
    assert final_line(job_result(finished_folds(2), 2)) == "cnn: CV macro-F1 0.5500 ± 0.0707 over 2 folds"


def test_the_final_line_of_one_fold_gives_its_score_without_a_mean_or_spread():
    """`cv.fold=k` runs one fold of several: no CV mean, and a ± of one value would mean nothing."""
    folds = finished_folds(2)[1:]
    assert final_line(job_result(folds, 5)) == "cnn: fold 1 macro-F1 0.6000 (one fold: no CV mean or spread)"


def test_the_final_line_says_when_the_reused_folds_finished():
    when = ("2026-12-07T20:10:02", "2026-12-07T20:04:41", "2026-12-08T01:00:00")
    line = final_line(job_result(finished_folds(3, when), 3, reused=(0, 1)))
    assert line.endswith("over 3 folds; 2 folds reused (finished 2026-12-07 20:04 to 20:10 UTC)")
    line = final_line(job_result(finished_folds(3, when), 3, reused=(1, 2)))
    assert line.endswith("; 2 folds reused (finished 2026-12-07 20:04 to 2026-12-08 01:00 UTC)")
    line = final_line(job_result(finished_folds(3, when), 3, reused=(1,)))
    assert line.endswith("; 1 fold reused (finished 2026-12-07 20:04 UTC)")
