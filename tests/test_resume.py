"""Re-running a job with the default, relative results store (outputs/results under the working
folder) keeps every finished fold's checkpoint, validation score and predictions: after an
interruption, with a validation file added, in a sweep, and with a store written by earlier code
or moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import TINY_MODEL, make_headlines, write_tsv
from jobs import run_in_process, run_sweep_job_in_process
from klue_tc.predict import main as predict

pytestmark = pytest.mark.integration  # every test here runs a job, a process or a stage

LABELS = ["IT과학", "스포츠", "정치"]


def job(*extra: str) -> list[str]:
    """A two-fold job on train.tsv in the working folder, with the default results.dir."""
    return ["data.path=train.tsv", "cv.folds=2", "trainer.max_epochs=1", "logger=none", *TINY_MODEL, *extra]


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A working folder with the data, one finished run of `job()` (first/) and its store, trained
    once for the tests that re-run it; each test works in its own copy."""
    folder = tmp_path_factory.mktemp("trained")
    write_tsv(folder / "train.tsv", make_headlines(per_class=10, labels=LABELS))
    write_tsv(folder / "valid.tsv", make_headlines(per_class=4, seed=1, labels=LABELS))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KLUE_TC_CACHE", str(folder / "cache"))
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.chdir(folder)
        run_in_process(job(), folder / "first")
    return folder


@pytest.fixture
def workdir(trained, tmp_path, monkeypatch) -> Path:
    """This test's copy of the trained folder, as the working folder."""
    copy = tmp_path / "work"
    shutil.copytree(trained, copy)
    monkeypatch.chdir(copy)
    return copy


def test_the_same_command_after_an_interruption_scores_and_predicts_with_the_reused_fold(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tsv(tmp_path / "train.tsv", make_headlines(per_class=10, labels=LABELS))
    write_tsv(tmp_path / "valid.tsv", make_headlines(per_class=4, seed=1, labels=LABELS))
    run_in_process(job("data.validation_path=valid.tsv", "cv.fold=0"), tmp_path / "stopped")  # fold 0 finished
    run_in_process(job("data.validation_path=valid.tsv"), tmp_path / "resumed")
    out = capsys.readouterr().out
    assert "1 fold reused (finished " in out and "validation macro-F1" in out.splitlines()[-1]
    resumed = metrics(tmp_path / "resumed")
    assert resumed["reused_folds"] == [0] and "validation_f1" in resumed
    assert [f["checkpoint"] for f in resumed["folds"]] == ["fold0/best.ckpt", "fold1/best.ckpt"]
    assert predict([str(tmp_path / "resumed"), "손흥민 결승골 폭발", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in LABELS


def test_a_rerun_with_a_validation_file_added_scores_it_with_the_finished_folds(workdir, capsys):
    assert "validation_f1" not in metrics(workdir / "first")
    run_in_process(job("data.validation_path=valid.tsv"), workdir / "second")
    out = capsys.readouterr().out
    assert "is gone" not in out and "validation macro-F1" in out.splitlines()[-1]
    second = metrics(workdir / "second")
    assert second["reused_folds"] == [0, 1] and second["validation_size"] == 12


def test_a_store_written_under_a_relative_results_dir_by_earlier_code_finds_its_models(workdir, capsys):
    for path in sorted((workdir / "outputs" / "results").glob("*/fold*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        named = f"outputs/results/{path.parent.name}/{path.stem}"  # from the working folder, not the record's
        record["checkpoint"], record["tokenizer_dir"] = f"{named}/best.ckpt", f"{named}/tokenizer"
        record.pop("sha256", None)  # that code kept no checksum
        path.write_text(json.dumps(record), encoding="utf-8")
    run_in_process(job("data.validation_path=valid.tsv"), workdir / "second")
    assert "is gone" not in capsys.readouterr().out
    second = metrics(workdir / "second")
    assert [f["checkpoint"] for f in second["folds"]] == ["fold0/best.ckpt", "fold1/best.ckpt"]
    assert second["reused_folds"] == [0, 1] and "validation_f1" in second


def test_a_moved_store_given_as_results_dir_keeps_its_models(workdir, capsys):
    moved = (workdir / "outputs" / "results").rename(workdir / "elsewhere")
    run_in_process(job("data.validation_path=valid.tsv", f"results.dir={moved}"), workdir / "second")
    assert "is gone" not in capsys.readouterr().out
    assert metrics(workdir / "second")["reused_folds"] == [0, 1] and "validation_f1" in metrics(workdir / "second")


def test_a_rerun_sweep_keeps_its_finished_jobs_checkpoints_in_their_metrics(workdir, capsys):
    job = ["+experiment=transformer", "encoder.layers=1", "cv.fold=0", "data.path=train.tsv", "data.limit=null"]
    job += ["logger=none", *TINY_MODEL]
    first = run_sweep_job_in_process("smoke", job)
    assert first.is_relative_to(workdir / "outputs" / "sweeps" / "smoke")
    again = run_sweep_job_in_process("smoke", [*job, "data.validation_path=valid.tsv"])
    assert again == first and "is gone" not in capsys.readouterr().out
    rerun = metrics(first)
    assert rerun["reused_folds"] == [0] and rerun["folds"][0]["checkpoint"] == "fold0/best.ckpt"
    assert rerun["validation_size"] == 12
