"""Blind titles (labels withheld) predicted by the ensemble stage's models once everything is chosen:
the files `--blind` writes, their ids and columns, and the proof that the blind titles choose nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_ensemble import FOLDS, text_store, trained_sweep  # noqa: F401  (fixtures)

from klue_tc.data.identified import read_identified_file
from klue_tc.data.predictions import read_predictions

pytestmark = pytest.mark.integration  # every test here runs the ensemble stage or predict on a trained folder

BASELINE_FILES = ["tfidf-svm", "tfidf-svm-offset", "nbsvm", "nbsvm-offset"]


def write_blind_titles(path, titles: list[str], ids: list[str]):
    pd.DataFrame({"id": ids, "title": titles}).to_csv(path, sep="\t", index=False)
    return path


def blind_titles(tmp_path, seed: int = 11, name: str = "blind.tsv"):
    """Generated headlines named by ids in no sorted order (as a file of withheld labels would be)."""
    from conftest import make_headlines

    titles = [text for _, text in make_headlines(per_class=5, seed=seed)]
    ids = [f"blind-{k:05d}" for k in np.random.default_rng(seed).permutation(len(titles))]
    return write_blind_titles(tmp_path / name, titles, ids)


def check_predictions_file(path, ids: list[str], label_names: list[str]) -> pd.DataFrame:
    frame = read_predictions(path)
    assert list(frame.columns) == ["id", "label", *label_names]
    assert frame["id"].tolist() == ids  # every id once, in the file's order
    probs = frame[label_names].to_numpy(float)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-6) and (probs >= 0).all()
    assert frame["label"].tolist() == [label_names[k] for k in probs.argmax(axis=1)]
    return frame


def test_blind_files_hold_every_id_in_order_with_a_probability_column_per_class(text_store, tmp_path, capsys):  # noqa: F811
    from klue_tc.ensemble.cli import main
    from klue_tc.ensemble.stage import build_ensemble

    sweep, _, _ = text_store
    titles = read_identified_file(blind_titles(tmp_path))
    assert main([str(sweep), "--no-artefact", "--blind", titles.source]) == 0
    out = capsys.readouterr().out
    label_names = build_ensemble(sweep).label_names
    written = sorted(p.stem for p in (sweep / "blind").iterdir())
    assert written == sorted(BASELINE_FILES)  # the neural members' fold models are not on disk: no ensemble.csv
    frames = {
        name: check_predictions_file(sweep / "blind" / f"{name}.csv", titles.ids, label_names) for name in written
    }
    assert "note: no blind ensemble.csv: 6 fold model(s) of 2 chosen member(s) not on disk" in out
    assert f"blind predictions in {sweep / 'blind'}: tfidf-svm, tfidf-svm-offset, nbsvm, nbsvm-offset (.csv)" in out
    # The files are the baselines' fold ensembles: each fold model on the titles, calibrated, averaged.
    ensemble = build_ensemble(sweep, blind=titles)
    nbsvm = next(m for m in ensemble.members if m.key == "nb-svm")
    from klue_tc.ensemble.serving import linear_fold_probs

    parts = [linear_fold_probs(f.model, f.temperature, titles.texts, len(label_names)) for f in nbsvm.folds]
    assert len(parts) == FOLDS
    expected = np.mean([nbsvm.calibrated(p) for p in parts], axis=0)
    assert np.allclose(frames["nbsvm"][label_names].to_numpy(float), expected, atol=1e-7)
    assert np.allclose(ensemble.blind.probs["nbsvm"], expected)


def test_the_report_is_left_as_it_is_when_only_the_blind_predictions_are_new(text_store, tmp_path, capsys):  # noqa: F811
    from klue_tc.ensemble.cli import main

    sweep, _, _ = text_store
    assert main([str(sweep), "--no-artefact"]) == 0
    report = [sweep / name for name in ("ensemble.md", "ensemble.csv", "ensemble.png")]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in report}
    blind = blind_titles(tmp_path)
    capsys.readouterr()
    assert main([str(sweep), "--no-artefact", "--blind", str(blind)]) == 0
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in report} == before
    assert "already holds this ensemble: left as it is" in capsys.readouterr().out
    assert (sweep / "blind" / "nbsvm.csv").is_file()
    # Another ensemble (here: without the class offsets) is written as always, blind titles or not.
    assert main([str(sweep), "--no-artefact", "--no-class-offsets", "--blind", str(blind)]) == 0
    assert (sweep / "ensemble.md").read_bytes() != before[sweep / "ensemble.md"][0]
    assert "already holds" not in capsys.readouterr().out


def test_the_blind_titles_choose_no_member_weight_temperature_or_offset(text_store, tmp_path):  # noqa: F811
    """Shuffling the blind titles and changing some of them moves nothing the stage chooses; each
    unchanged title keeps its probabilities, by its id."""
    from klue_tc.ensemble.stage import build_ensemble

    sweep, _, _ = text_store
    first = read_identified_file(blind_titles(tmp_path))
    order = np.random.default_rng(5).permutation(len(first))
    texts = [first.texts[k] for k in order]
    changed = {first.ids[order[k]] for k in range(0, len(order), 4)}
    texts = [f"{t} 긴급 속보 {k}" if first.ids[order[k]] in changed else t for k, t in enumerate(texts)]
    second = read_identified_file(write_blind_titles(tmp_path / "other.tsv", texts, [first.ids[k] for k in order]))

    plain = build_ensemble(sweep)
    runs = [build_ensemble(sweep, blind=first), build_ensemble(sweep, blind=second)]
    for run in runs:
        assert run.selection == plain.selection  # the same members, counts and rounds
        assert [m.temperature for m in run.members] == [m.temperature for m in plain.members]
        assert np.array_equal(run.class_offsets, plain.class_offsets)
        assert run.validation.f1 == plain.validation.f1
    a, b = (run.blind for run in runs)
    assert a.baseline_offsets.keys() == b.baseline_offsets.keys() == {"tfidf-svm", "nbsvm"}
    assert all(np.array_equal(a.baseline_offsets[k], b.baseline_offsets[k]) for k in a.baseline_offsets)
    row_of = {name: row for row, name in enumerate(b.ids)}
    same = [(row, row_of[name]) for row, name in enumerate(a.ids) if name not in changed]
    for name in a.probs:
        assert np.allclose(a.probs[name][[r for r, _ in same]], b.probs[name][[r for _, r in same]], atol=1e-6)
    moved = [(row, row_of[name]) for row, name in enumerate(a.ids) if name in changed]
    assert not np.allclose(a.probs["nbsvm"][[r for r, _ in moved]], b.probs["nbsvm"][[r for _, r in moved]])


def test_the_ensemble_predicts_the_blind_titles_where_every_members_fold_models_are_on_disk(trained_sweep, tmp_path):  # noqa: F811
    import shutil

    from klue_tc.ensemble.artefact import artefact_probs, write_artefact
    from klue_tc.ensemble.blind import write_blind
    from klue_tc.ensemble.stage import build_ensemble

    sweep = tmp_path / "sweep"
    shutil.copytree(trained_sweep[0], sweep)
    titles = read_identified_file(blind_titles(tmp_path))
    ensemble = build_ensemble(sweep, blind=titles)
    assert not ensemble.blind.notes and "ensemble" in ensemble.blind.probs
    paths = write_blind(ensemble.blind, tmp_path / "blind")
    assert sorted(p.stem for p in paths) == sorted([*BASELINE_FILES, "ensemble"])
    frame = check_predictions_file(tmp_path / "blind" / "ensemble.csv", titles.ids, ensemble.label_names)
    # The same probabilities as the servable folder's, on the same titles.
    served, names = artefact_probs(write_artefact(ensemble, tmp_path / "model"), titles.texts)
    assert names == ensemble.label_names
    assert np.allclose(frame[names].to_numpy(float), served, atol=1e-5)


def committed_ensemble_records() -> tuple[bool, str]:
    """Whether docs/ensemble's records and the training and validation files their runs name are here."""
    import yaml

    from conftest import REPO

    configs = sorted((REPO / "docs" / "ensemble" / "results").glob("*/config.yaml"))
    if not configs:
        return False, "docs/ensemble/results is not present"
    data = yaml.safe_load(configs[0].read_text(encoding="utf-8"))["data"]
    missing = [p for p in (data["path"], data["validation_path"]) if not p or not Path(p).is_file()]
    return not missing, f"the files docs/ensemble's runs were trained on are not here: {missing}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not committed_ensemble_records()[0], reason=committed_ensemble_records()[1])
def test_the_blind_files_come_from_the_models_docs_ensemble_scores(tmp_path):
    """docs/ensemble's linear baselines, their fold models fitted again from the stored settings where
    they are not on disk, predict validation-a's titles (named by ids, as blind.tsv's are) through the
    path that writes docs/ensemble/blind/: their files score ensemble.md's figures for the baselines,
    plain and offset by class, to the 4th decimal. About 80 s on 2 CPU cores with the fold models
    fitted again (a clone has none), 30 s where they are on disk."""
    import shutil

    import yaml
    from sklearn.metrics import f1_score

    from conftest import REPO
    from klue_tc.data.titles import read_labelled_file
    from klue_tc.ensemble.blind import write_blind
    from klue_tc.ensemble.stage import build_ensemble

    docs = REPO / "docs" / "ensemble"
    copy = tmp_path / "ensemble"
    for part in ("results", "baselines"):  # the fitted models too where they are here: not fitted again
        shutil.copytree(docs / part, copy / part)
    config = yaml.safe_load(next((docs / "results").glob("*/config.yaml")).read_text(encoding="utf-8"))
    validation = read_labelled_file(config["data"]["validation_path"])
    ids = [f"validation-{k:05d}" for k in range(len(validation))]
    table = write_blind_titles(tmp_path / "validation-ids.tsv", validation.texts, ids)

    ensemble = build_ensemble(copy, blind=read_identified_file(table))
    paths = write_blind(ensemble.blind, tmp_path / "blind")
    assert sorted(p.stem for p in paths) == sorted(BASELINE_FILES)  # the networks' checkpoints are not in git
    committed = pd.read_csv(docs / "ensemble.csv")
    candidates = committed[committed["role"] == "candidate"].set_index("key")["validation_f1"]
    ensemble_f1 = float(committed.loc[committed["role"] == "ensemble", "validation_f1"].iloc[0])
    compared = committed[(committed["role"] == "comparison") & (committed["class_mix"] == "validation")]
    offset_f1 = {row.versus: ensemble_f1 - row.difference for row in compared.itertuples()}
    expected = {
        "tfidf-svm": candidates["tfidf-svm"],
        "nbsvm": candidates["nb-svm"],
        "tfidf-svm-offset": offset_f1["TF-IDF char_wb 1-3-grams + linear SVM, offset by class"],
        "nbsvm-offset": offset_f1["NB-SVM, char_wb 1-3-grams (Wang & Manning 2012), offset by class"],
    }
    truth = [validation.label_names[k] for k in validation.labels]
    scored = {}
    for name in BASELINE_FILES:
        frame = check_predictions_file(tmp_path / "blind" / f"{name}.csv", ids, ensemble.label_names)
        scored[name] = f1_score(truth, frame["label"], average="macro")
    print({name: (round(scored[name], 6), round(expected[name], 6)) for name in BASELINE_FILES})
    assert {name: round(f1, 4) for name, f1 in scored.items()} == {n: round(f, 4) for n, f in expected.items()}
