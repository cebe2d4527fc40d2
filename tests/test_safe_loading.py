"""Folders are served without running code from them: a pickle in a run directory or an ensemble's
folder is refused in one line (and never loaded), the linear baselines are kept as arrays and JSON
with the pickled models' scores, and `predict --convert` turns an older folder into that form."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_ensemble import text_store  # noqa: F401  (a fixture: records and the runs' config.yaml)

from conftest import REPO, make_headlines
from klue_tc.core.pickles import CONVERT_COMMAND, PickleRefused, pickles_in
from klue_tc.data.titles import LABEL_NAMES
from klue_tc.training.baseline import BASELINES, TFIDF_SVM, baseline_pipeline
from klue_tc.training.linear_files import arrays_path, load_linear_model, model_files, save_linear_model

pytestmark = pytest.mark.integration  # most tests here serve a trained folder or run predict in a subprocess


class SideEffect:
    """Unpickled, it creates `marker`: what a pickle can do as it loads."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def plant_pickle(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(SideEffect(marker)))
    return path


def test_the_planted_pickle_runs_code_when_loaded(tmp_path):
    """The payload the refusal tests plant is live: loading it creates its marker."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(SideEffect(marker))).close()
    assert marker.exists()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny run directory (2 folds, trained for real), an ensemble's folder built from it with the
    linear baselines among its members, and one of its fold models alone (no baselines)."""
    from jobs import tiny_trained_sweep
    from klue_tc.ensemble.artefact import write_artefact
    from klue_tc.ensemble.stage import build_ensemble

    tmp = tmp_path_factory.mktemp("served")
    sweep, validation, _ = tiny_trained_sweep(tmp, epochs=1)
    ensemble = build_ensemble(sweep, baselines=True)
    artefact = write_artefact(ensemble, tmp / "ensemble-model")
    manifest = json.loads((artefact / "ensemble.json").read_text(encoding="utf-8"))
    assert "linear" in {m["kind"] for m in manifest["members"]}  # the tiny network learnt little
    neural = write_artefact(build_ensemble(sweep, baselines=False), tmp / "neural-model")
    return sweep / "run", artefact, tmp / "train.tsv", validation, neural


def validation_titles(validation: Path) -> list[str]:
    from klue_tc.data.titles import read_labelled_file

    return read_labelled_file(validation).texts


def one_line_refusal(err: str, file: Path, folder: Path) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {file} is ") and "not loaded" in lines[0]
    assert lines[0].endswith(f"{CONVERT_COMMAND} {folder}")


# --- refused in one line, never loaded -----------------------------------------------------------


def test_a_pickle_planted_in_a_run_directory_is_refused_by_the_command_and_never_loaded(served, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(served[0], run)
    marker = tmp_path / "ran"
    planted = plant_pickle(run / "fold0" / "extra.pkl", marker)
    done = subprocess.run(
        [sys.executable, "-m", "klue_tc.predict", str(run), "코스피 상승 마감"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and not done.stdout
    one_line_refusal(done.stderr, planted, run)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["members/planted.joblib", "notes.pickle"])
def test_a_pickle_planted_in_an_ensembles_folder_is_refused_and_never_loaded(served, tmp_path, capsys, name):
    from klue_tc.predict import main as predict

    model = tmp_path / "model"
    shutil.copytree(served[1], model)
    marker = tmp_path / "ran"
    planted = plant_pickle(model / name, marker)
    assert predict([str(model), "--json", "코스피 상승 마감"]) == 2
    out, err = capsys.readouterr()
    assert not out
    one_line_refusal(err, planted, model)
    assert not marker.exists()


def test_a_checkpoint_holding_more_than_tensors_is_refused_and_never_loaded(served, tmp_path, capsys):
    from klue_tc.predict import main as predict

    model = tmp_path / "model"
    shutil.copytree(served[4], model)
    manifest = json.loads((model / "ensemble.json").read_text(encoding="utf-8"))
    neural = next(m for m in manifest["members"] if m["kind"] == "neural")
    checkpoint = model / neural["folds"][0]["checkpoint"]
    saved = torch.load(checkpoint, weights_only=True)
    marker = tmp_path / "ran"
    torch.save({**saved, "extra": SideEffect(marker)}, checkpoint)
    assert predict([str(model), "--json", "코스피 상승 마감"]) == 2
    out, err = capsys.readouterr()
    assert not out
    one_line_refusal(err, checkpoint, model)
    assert not marker.exists()


def test_an_array_file_holding_objects_is_refused_and_never_loaded(tmp_path):
    from klue_tc.core.checksums import sha256_of, with_checksum

    rows = make_headlines(per_class=6)
    model = tmp_path / "fold0.model.json"
    save_linear_model(TFIDF_SVM.pipeline().fit([t for _, t in rows], [LABEL_NAMES.index(c) for c, _ in rows]), model)
    marker = tmp_path / "ran"
    with np.load(arrays_path(model)) as stored:
        arrays = dict(stored)
    arrays["intercept"] = np.array([SideEffect(marker)], dtype=object)
    with open(arrays_path(model), "wb") as handle:
        np.savez(handle, **arrays)
    settings = json.loads(model.read_text(encoding="utf-8"))
    settings.pop("sha256")
    settings["arrays_sha256"] = sha256_of(arrays_path(model))  # as if written so: the checksum passes
    model.write_text(json.dumps(with_checksum(settings), ensure_ascii=False), encoding="utf-8")
    with pytest.raises(PickleRefused, match=r"fold0\.model\.npz is an array file holding pickled objects"):
        load_linear_model(model)
    assert not marker.exists()


# --- the linear baselines as arrays and JSON -----------------------------------------------------


@pytest.mark.parametrize(
    "pipeline, classes",
    [(b.pipeline(), 7) for b in BASELINES] + [(TFIDF_SVM.pipeline(), 2), (baseline_pipeline(untuned=True), 7)],
    ids=["tfidf-svm", "nb-svm", "tfidf-svm-two-classes", "tfidf-svm-untuned"],
)
def test_the_linear_baselines_round_trip_with_equal_scores_and_probabilities(tmp_path, pipeline, classes):
    from klue_tc.ensemble.serving import decision_scores, linear_fold_probs
    from klue_tc.training.calibration import tempered

    rows = make_headlines(per_class=10, seed=0)
    labels = np.array([LABEL_NAMES.index(c) for c, _ in rows]) % classes
    pipeline.fit([t for _, t in rows], labels)
    new = [t for _, t in make_headlines(per_class=4, seed=5)] + ["처음 보는 낱말들", "x"]
    model = tmp_path / "fold0.model.json"
    save_linear_model(pipeline, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fold0.model.json", "fold0.model.npz"]
    with np.load(arrays_path(model), allow_pickle=False) as stored:
        assert set(stored.files) <= {"coef", "intercept", "idf"}
    settings = json.loads(model.read_text(encoding="utf-8"))
    assert len(settings["vectorizer"]["vocabulary"]) == len(pipeline.steps[0][1].vocabulary_)
    loaded = load_linear_model(model)
    assert np.array_equal(loaded.decision_function(new), pipeline.decision_function(new))
    assert np.array_equal(loaded.predict(new), pipeline.predict(new))
    expected = tempered(decision_scores(pipeline, new, 7), 0.7)
    assert np.allclose(linear_fold_probs(model, 0.7, new, 7), expected, rtol=0, atol=1e-12)


def test_the_served_run_and_ensemble_give_the_probabilities_of_lightnings_loading(served):
    """Checkpoints read as tensors and plain values give the probabilities Lightning's own
    load_from_checkpoint gives."""
    from klue_tc.predict import fold_records, run_probs
    from klue_tc.training.inference import ensemble_probs

    run = served[0]
    texts = validation_titles(served[3])
    records = fold_records(run)
    assert np.array_equal(run_probs(run, records, texts, 16), ensemble_probs(records, texts, 16))


# --- the conversion of older folders -------------------------------------------------------------


def old_format(model: Path, train: Path) -> None:
    """The ensemble's folder as older versions wrote it: each linear fold model a pickled pipeline
    (fold<k>.joblib), manifest version 2."""
    import joblib

    from klue_tc.data.titles import read_labelled_file

    data = read_labelled_file(train)
    by_name = {b.short_name: b for b in BASELINES}
    manifest = json.loads((model / "ensemble.json").read_text(encoding="utf-8"))
    for member in (m for m in manifest["members"] if m["kind"] == "linear"):
        for fold in member["folds"]:
            setting = tuple(fold["setting"]) if isinstance(fold["setting"], list) else fold["setting"]
            rows = np.arange(len(data))[fold["fold"] :: 2]  # any fitted model serves for the check
            pipeline = by_name[member["key"]].pipeline(setting).fit([data.texts[i] for i in rows], data.labels[rows])
            for path in model_files(model / fold["model"]):
                path.unlink()
            fold["model"] = f"{Path(fold['model']).parent.as_posix()}/fold{fold['fold']}.joblib"
            joblib.dump(pipeline, model / fold["model"])
    manifest["version"] = 2
    (model / "ensemble.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")


def served_as_older_versions_did(model: Path, texts: list[str], monkeypatch) -> np.ndarray:
    """The probabilities older code served the folder with: its pickles loaded by joblib."""
    import joblib

    from klue_tc.ensemble import serving
    from klue_tc.ensemble.artefact import artefact_probs
    from klue_tc.training.calibration import tempered

    with monkeypatch.context() as patch:
        patch.setattr("klue_tc.core.pickles.refuse_pickles", lambda *_: None)
        patch.setattr(
            serving,
            "linear_fold_probs",
            lambda path, temperature, titles, classes: tempered(
                serving.decision_scores(joblib.load(path), titles, classes), temperature
            ),
        )
        return artefact_probs(model, texts)[0]


def test_convert_turns_an_older_ensembles_folder_into_one_predict_serves_with_equal_predictions(
    served, tmp_path, capsys, monkeypatch
):
    from klue_tc.ensemble.artefact import VERSION, artefact_probs
    from klue_tc.predict import main as predict

    model = tmp_path / "model"
    shutil.copytree(served[1], model)
    old_format(model, served[2])
    texts = validation_titles(served[3])
    before = served_as_older_versions_did(model, texts, monkeypatch)
    pickled = pickles_in(model)
    assert pickled and all(p.suffix == ".joblib" for p in pickled)

    assert predict([str(model), "--json", texts[0]]) == 2
    one_line_refusal(capsys.readouterr().err, pickled[0], model)

    assert predict(["--convert", str(model)]) == 0
    out = capsys.readouterr().out
    assert f"converted {pickled[0]} -> fold0.model.json" in out
    assert not pickles_in(model)
    manifest = json.loads((model / "ensemble.json").read_text(encoding="utf-8"))
    assert manifest["version"] == VERSION
    linear = [f["model"] for m in manifest["members"] if m["kind"] == "linear" for f in m["folds"]]
    assert linear and all(name.endswith(".model.json") and (model / name).is_file() for name in linear)

    after, names = artefact_probs(model, texts)
    assert np.allclose(after, before, rtol=0, atol=1e-6)
    assert predict([str(model), "--json", *texts[:3]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["label"] for line in lines] == [names[k] for k in before[:3].argmax(1)]
    assert predict(["--convert", str(model)]) == 0  # once: nothing is left to convert
    assert "nothing to convert" in capsys.readouterr().out


def test_convert_stops_before_loading_a_pickle_that_is_none_of_the_folders_models(served, tmp_path, capsys):
    from klue_tc.predict import main as predict

    model = tmp_path / "model"
    shutil.copytree(served[1], model)
    marker = tmp_path / "ran"
    planted = plant_pickle(model / "extra.pkl", marker)
    assert predict(["--convert", str(model)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {planted} is a pickle that is none of the folder's models: not loaded")
    assert not marker.exists() and planted.exists()


def test_convert_rewrites_a_run_directorys_checkpoint_that_needs_more_than_tensors(served, tmp_path, capsys):
    """A checkpoint whose settings are objects (here the encoder's typed config) is refused, then
    written again as plain values by --convert, its record's checksum updated: the same predictions."""
    from klue_tc.core.checksums import sha256_of
    from klue_tc.ensemble.convert import replace_checksum
    from klue_tc.predict import main as predict
    from klue_tc.predict import predict_titles
    from klue_tc.training.module import _encoder_cfg

    run = tmp_path / "run"
    shutil.copytree(served[0], run)
    texts = validation_titles(served[3])[:4]
    expected = predict_titles(run, texts)
    checkpoint = run / "fold1" / "best.ckpt"
    saved = torch.load(checkpoint, weights_only=True)
    saved["hyper_parameters"]["encoder"] = _encoder_cfg(saved["hyper_parameters"]["encoder"])
    before = sha256_of(checkpoint)
    torch.save(saved, checkpoint)
    replace_checksum(run / "metrics.json", before, sha256_of(checkpoint))  # as if its run had written it

    assert predict([str(run), texts[0]]) == 2
    one_line_refusal(capsys.readouterr().err, checkpoint, run)
    assert predict(["--convert", str(run)]) == 0
    assert f"converted {checkpoint} to tensors and plain values" in capsys.readouterr().out
    torch.load(checkpoint, weights_only=True)
    assert predict_titles(run, texts) == expected


def test_the_stage_refuses_an_older_sweeps_pickled_baselines_until_converted(request, capsys, caplog):
    """A sweep's fitted baselines kept as fold<k>.joblib: the ensemble stage refuses them in one
    line; converted, the stage scores new titles with them without fitting them again."""
    import logging

    import joblib

    from klue_tc.ensemble.cli import main as stage
    from klue_tc.predict import main as predict

    sweep, _, validation = request.getfixturevalue("text_store")
    assert stage([str(sweep), "--no-artefact"]) == 0
    store = sweep / "baselines" / "tfidf-svm"
    texts, labels = zip(*[(t, LABEL_NAMES.index(c)) for c, t in make_headlines(per_class=6)])
    for model in sorted(store.glob("fold*.model.json")):
        for path in model_files(model):
            path.unlink()
        joblib.dump(TFIDF_SVM.pipeline().fit(texts, labels), store / model.name.replace(".model.json", ".joblib"))
    capsys.readouterr()
    assert stage([str(sweep), "--no-artefact"]) == 2
    one_line_refusal(capsys.readouterr().err, store / "fold0.joblib", sweep)

    assert predict(["--convert", str(sweep)]) == 0
    assert not pickles_in(sweep) and (store / "fold0.model.json").is_file()
    converted = {p: p.stat().st_mtime_ns for p in store.glob("fold*.model.*")}
    with caplog.at_level(logging.WARNING):
        assert stage([str(sweep), "--no-artefact", "--validation", str(validation)]) == 0
    assert "refitting" not in caplog.text
    assert {p: p.stat().st_mtime_ns for p in store.glob("fold*.model.*")} == converted
