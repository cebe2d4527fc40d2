"""The ensemble stage (klue_tc/ensemble/): members read from the records, temperatures and the
greedy selection chosen on out-of-fold predictions alone, the linear baselines on the same folds,
the ensemble's class offsets, scoring on the validation titles, the report and the artefact
`predict` serves."""

from __future__ import annotations

import re

import numpy as np
import pytest

from klue_tc.data.titles import NUM_CLASSES, stratified_folds, title_folds
from klue_tc.ensemble.selection import greedy_selection, macro_f1_of
from klue_tc.store.records import Describe, FoldPredictions, FoldResult, TitlePredictions, ValidationScore
from klue_tc.store.results import ResultsStore
from klue_tc.training.calibration import fit_class_offsets, fit_temperature, logits_of, offset, tempered

FOLDS = 3


def noisy_probs(rng: np.random.Generator, labels: np.ndarray, skill: float, spread: float = 1.0) -> np.ndarray:
    """A model's probabilities: the true class's logit raised by `skill`, each model's noise its own."""
    logits = rng.normal(0, spread, (len(labels), NUM_CLASSES))
    logits[np.arange(len(labels)), labels] += skill
    return tempered(logits, 1.0)


def configuration_records(
    key: str,
    encoder: str,
    labels: np.ndarray,
    validation_labels: np.ndarray,
    skill: float,
    rng: np.random.Generator,
    probs: bool = True,
    folds: int = FOLDS,
) -> list[FoldResult]:
    """A configuration's fold records on the titles `labels` (its folds the runs' stratified ones)."""
    records = []
    for fold, (_, held) in enumerate(stratified_folds(labels, folds, 42)):
        scored = TitlePredictions.of(held, labels[held], noisy_probs(rng, labels[held], skill))
        validation = TitlePredictions.of(
            np.arange(len(validation_labels)), validation_labels, noisy_probs(rng, validation_labels, skill)
        )
        if not probs:
            scored.probs = validation.probs = None
        records.append(
            FoldResult(
                fold=fold, f1=macro_f1_of(labels[held], np.eye(NUM_CLASSES)[scored.predicted]), accuracy=0.5,
                best_epoch=1, epochs_run=1, train_samples_per_s=1.0, time_to_first_step_s=0.0, train_seconds=1.0,
                train_size=len(labels) - len(held), val_size=len(held), checkpoint=None, tokenizer_dir="tokenizer",
                config_hash=key, describe=Describe(encoder, encoder, "post", 2, "cls", "mecab"),
                validation=ValidationScore(0.5, 0.5, len(validation_labels), "validation.tsv"),
                predictions=FoldPredictions(scored, validation),
            )
        )  # fmt: skip
    return records


def synthetic_store(root, designs, titles: int = 420, validation: int = 280, seed: int = 0, **kwargs):
    """A results store of configurations {key: (encoder, skill)}; their training and validation classes."""
    rng = np.random.default_rng(seed)
    labels = np.arange(titles) % NUM_CLASSES
    validation_labels = rng.integers(0, NUM_CLASSES, validation)
    store = ResultsStore(root / "results")
    for key, (encoder, skill) in designs.items():
        for record in configuration_records(key, encoder, labels, validation_labels, skill, rng, **kwargs):
            store.put(key, record.fold, record)
    return labels, validation_labels


DESIGNS = {"aaaaaa000000": ("cnn", 1.6), "bbbbbb000000": ("transformer", 1.5), "cccccc000000": ("trans_blstm", 0.2)}


# --- calibration and selection -------------------------------------------------------------------


def test_paired_titles_at_another_class_mix_score_the_weighted_confusion_matrix():
    from sklearn.metrics import confusion_matrix

    from klue_tc.ensemble.scoring import PairedTitles
    from klue_tc.report.class_mix import weighted_macro_f1

    rng = np.random.default_rng(0)
    labels = rng.integers(0, NUM_CLASSES, 500)
    predicted = np.where(rng.random(500) < 0.7, labels, rng.integers(0, NUM_CLASSES, 500))
    weights = rng.uniform(0.2, 3.0, NUM_CLASSES)
    plain, ones = (
        PairedTitles(labels, NUM_CLASSES),
        PairedTitles(labels, NUM_CLASSES, class_weights=np.ones(NUM_CLASSES)),
    )
    assert plain.f1(predicted) == pytest.approx(ones.f1(predicted))
    assert plain.interval(predicted) == pytest.approx(ones.interval(predicted))
    mixed = PairedTitles(labels, NUM_CLASSES, class_weights=weights)
    matrix = confusion_matrix(labels, predicted, labels=range(NUM_CLASSES))
    assert mixed.f1(predicted) == pytest.approx(weighted_macro_f1(matrix, weights), abs=1e-5)
    assert mixed.f1(predicted) != pytest.approx(plain.f1(predicted), abs=1e-3)


def test_the_temperature_of_least_log_loss_is_found():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (4000, NUM_CLASSES))
    labels = np.array([rng.choice(NUM_CLASSES, p=p) for p in tempered(logits, 2.5)])  # drawn at T = 2.5
    assert fit_temperature(logits, labels) == pytest.approx(2.5, rel=0.1)


def test_class_offsets_undo_a_models_lean_against_a_class_and_restore_its_share():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (6000, NUM_CLASSES))
    labels = np.array([rng.choice(NUM_CLASSES, p=p) for p in tempered(logits, 1.0)])  # calibrated
    leaning = logits.copy()
    leaning[:, 2] -= 1.0  # a model that under-predicts class 2, as an average of hedging members does
    offsets = fit_class_offsets(leaning, labels)
    assert offsets.sum() == pytest.approx(0.0, abs=1e-9)
    assert np.argmax(offsets) == 2 and offsets[2] - np.delete(offsets, 2).mean() == pytest.approx(1.0, abs=0.15)
    fixed = offset(tempered(leaning, 1.0), offsets)
    shares = np.bincount(labels, minlength=NUM_CLASSES) / len(labels)
    assert fixed.mean(axis=0) == pytest.approx(shares, abs=1e-3)  # each class's mean probability is its share
    assert macro_f1_of(labels, fixed) > macro_f1_of(labels, tempered(leaning, 1.0)) + 0.01
    assert np.allclose(fit_class_offsets(logits_of(tempered(logits, 1.0)), labels), 0.0, atol=0.1)  # none needed


@pytest.mark.parametrize("metric", ["f1", "log_loss"])
def test_greedy_selection_adds_members_with_replacement_and_keeps_the_best_prefix(metric):
    rng = np.random.default_rng(1)
    labels = np.arange(700) % NUM_CLASSES
    strong, other = noisy_probs(rng, labels, 1.6), noisy_probs(rng, labels, 1.5)
    noise = tempered(rng.normal(0, 4, (len(labels), NUM_CLASSES)), 1.0)  # confident and knows nothing
    chosen = greedy_selection([noise, strong, other, strong.copy()], labels, metric=metric)
    assert chosen.order[0] == 1  # the best member alone first (its copy, listed later, never)
    assert chosen.counts[3] == 0
    # The noise never lowers the log-loss; by macro-F1 it may break a near tie now and then
    assert chosen.counts[0] == 0 if metric == "log_loss" else chosen.counts[0] < min(chosen.counts[1:3])
    assert chosen.counts[2] > 0 and chosen.oof_f1 > macro_f1_of(labels, strong)  # two that err apart beat one
    best = max(chosen.f1) if metric == "f1" else chosen.f1[int(np.argmin(chosen.log_loss))]
    assert chosen.oof_f1 == best and sum(chosen.counts) == chosen.kept_rounds == len(chosen.order)
    assert np.isclose(chosen.weights.sum(), 1.0)


# --- the stage on a results store ------------------------------------------------------------------


def write_config(store_key_dir, train, validation, folds: int = FOLDS) -> None:
    """The runs' resolved config.yaml, as the results store keeps it beside a configuration's folds."""
    import yaml

    config = {
        "seed": 42,
        "data": {"path": str(train), "validation_path": str(validation), "limit": None},
        "cv": {"folds": folds, "seed": 42, "inner_fraction": 0.1},
    }
    store_key_dir.mkdir(parents=True, exist_ok=True)
    (store_key_dir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def relabelled(rows: list[tuple[str, str]], share: float = 0.4, seed: int = 0) -> list[tuple[str, str]]:
    """The generated headlines' words give their class away: a share of them get another class, so
    that no member is perfect and the drawn ones (which know every class) have something to add."""
    from klue_tc.data.titles import LABEL_NAMES

    rng = np.random.default_rng(seed)
    return [(str(rng.choice(LABEL_NAMES)) if rng.random() < share else label, text) for label, text in rows]


@pytest.fixture
def text_store(tmp_path):
    """Three configurations' records on generated headlines (their classes real, their probabilities
    drawn), with the runs' config.yaml, so that the linear baselines fit on the same titles and folds."""
    from conftest import make_headlines, write_tsv
    from klue_tc.data.titles import read_labelled_file

    train = write_tsv(tmp_path / "train.tsv", relabelled(make_headlines(per_class=24, seed=0)))
    validation = write_tsv(tmp_path / "validation.tsv", relabelled(make_headlines(per_class=10, seed=1)))
    labels, validation_labels = read_labelled_file(train).labels, read_labelled_file(validation).labels
    rng = np.random.default_rng(3)
    store = ResultsStore(tmp_path / "sweep" / "results")
    for key, (encoder, skill) in DESIGNS.items():
        for record in configuration_records(key, encoder, labels, validation_labels, skill, rng):
            store.put(key, record.fold, record)
        write_config(store.root / key, train, validation)
    return tmp_path / "sweep", train, validation


def shuffle_validation_labels(sweep, validation_file, seed: int = 7) -> None:
    """One permutation of the validation titles' classes, in the file and in every record."""
    import pandas as pd

    frame = pd.read_csv(validation_file, sep="\t")
    order = np.random.default_rng(seed).permutation(len(frame))
    frame["label"] = frame["label"].to_numpy()[order]
    frame.to_csv(validation_file, sep="\t", index=False)
    for path in sweep.rglob("results/*/fold*.predicted.npz"):
        predictions = FoldPredictions.load(path)
        predictions.validation.label = predictions.validation.label[order]
        predictions.save(path)


@pytest.mark.integration
@pytest.mark.parametrize("metric", ["log_loss", "f1"])
def test_shuffling_the_validation_labels_changes_no_member_weight_temperature_or_offset(text_store, metric):
    from klue_tc.ensemble.stage import build_ensemble

    sweep, _, validation = text_store
    before = build_ensemble(sweep, metric=metric)
    assert {m.kind for m, _ in before.chosen} <= {"neural", "linear"} and len(before.members) == 5
    shuffle_validation_labels(sweep, validation)
    after = build_ensemble(sweep, metric=metric)
    assert after.selection == before.selection  # the same members, counts and rounds
    assert [m.temperature for m in after.members] == [m.temperature for m in before.members]
    assert np.array_equal(after.class_offsets, before.class_offsets) and before.class_offsets.any()
    assert after.validation.f1 != before.validation.f1  # the labels it is scored on did change


@pytest.mark.integration
def test_the_class_offsets_are_chosen_after_the_selection_and_can_be_left_out(text_store, capsys):
    from klue_tc.ensemble.cli import main
    from klue_tc.ensemble.stage import build_ensemble

    sweep, _, _ = text_store
    offset_mean, plain = build_ensemble(sweep), build_ensemble(sweep, class_offsets=False)
    assert plain.class_offsets is None and plain.selection == offset_mean.selection
    mean = sum(weight * member.fold_ensemble() for member, weight in plain.chosen)
    assert np.allclose(plain.validation_probs(), mean)
    assert np.allclose(offset_mean.validation_probs(), offset(mean, offset_mean.class_offsets))
    # The baselines are compared as their fold ensembles, and offset by class as the ensemble is.
    offset_sides = {d.versus for d in offset_mean.validation.differences} - {
        d.versus for d in plain.validation.differences
    }
    assert offset_sides == {f"{m.name}, offset by class" for m in offset_mean.members if m.kind == "linear"}
    assert main([str(sweep), "--no-artefact", "--no-class-offsets"]) == 0
    assert "offset by class" not in (sweep / "ensemble.md").read_text(encoding="utf-8")
    assert main([str(sweep), "--no-artefact"]) == 0
    markdown = (sweep / "ensemble.md").read_text(encoding="utf-8")
    assert (
        "offset by class" in markdown
        and "| NB-SVM, char_wb 1-3-grams (Wang & Manning 2012), offset by class | 0." in markdown
    )


@pytest.mark.integration
def test_the_stage_scores_the_ensemble_against_its_best_member_and_each_baseline(text_store):
    import pandas as pd

    from klue_tc.ensemble.cli import main

    sweep, _, _ = text_store
    assert main([str(sweep), "--no-artefact"]) == 0
    table = pd.read_csv(sweep / "ensemble.csv")
    candidates = table[table["role"] == "candidate"]
    assert list(candidates["kind"]) == ["neural"] * 3 + ["linear"] * 2
    assert candidates["weight"].sum() == pytest.approx(1.0)
    weak = candidates[candidates["key"] == "cccccc000000"]
    assert float(weak["weight"].iloc[0]) == 0.0  # the configuration that knows little is not chosen
    comparisons = table[table["role"] == "comparison"]
    assert set(comparisons["versus"]) >= {
        "TF-IDF char_wb 1-3-grams + linear SVM",
        "NB-SVM, char_wb 1-3-grams (Wang & Manning 2012)",
    }
    assert (comparisons["difference_low"] <= comparisons["difference"]).all()
    assert (comparisons["difference"] <= comparisons["difference_high"]).all()
    ensemble_row = table[table["role"] == "ensemble"].iloc[0]
    assert ensemble_row["validation_f1_low"] <= ensemble_row["validation_f1"] <= ensemble_row["validation_f1_high"]
    markdown = (sweep / "ensemble.md").read_text(encoding="utf-8")
    assert "## Against its best member and the linear baselines" in markdown
    # Each comparison again at the training titles' class mix.
    by_mix = comparisons.groupby("class_mix")["versus"].apply(set)
    assert by_mix["training"] == by_mix["validation"] and "At the training titles' class mix" in markdown
    assert "Caruana" in markdown and "## Every candidate's fold ensemble" in markdown
    assert (sweep / "ensemble.png").stat().st_size > 0 and "ensemble.png" in markdown
    # The baselines' fold models and probabilities are kept, and read again, not fitted again.
    kept = sweep / "baselines" / "tfidf-svm"
    assert sorted(p.name for p in kept.iterdir()) == [
        *(f"fold{k}.{ext}" for k in range(FOLDS) for ext in ("model.json", "model.npz", "predicted.npz")),
        "settings.json",
    ]
    stamp = (kept / "settings.json").stat().st_mtime_ns
    assert main([str(sweep), "--no-artefact"]) == 0
    assert (kept / "settings.json").stat().st_mtime_ns == stamp


# The longest line the stage prints, its folder's path counted as 3 characters: a terminal shows it whole.
STAGE_LINE_BOUND = 120


@pytest.mark.integration
def test_the_stage_ends_with_lines_a_terminal_shows_whole(text_store, tmp_path, capsys):
    from klue_tc.ensemble.cli import main

    sweep, _, _ = text_store
    assert main([str(sweep), "--no-artefact"]) == 0
    lines = capsys.readouterr().out.replace(str(tmp_path), "DIR").splitlines()
    assert max(map(len, lines)) <= STAGE_LINE_BOUND, max(lines, key=len)
    summary = next(line for line in lines if line.startswith("ensemble of "))
    assert re.fullmatch(
        r"ensemble of \d members? chosen out of fold: OOF macro-F1 \d\.\d{4}; "
        r"validation macro-F1 \d\.\d{4} \(\d\.\d{4}\.\.\d\.\d{4}\)",
        summary,
    )
    assert any(line.startswith("  ensemble minus NB-SVM, char_wb 1-3-grams") for line in lines)
    assert lines[-2:] == [
        "soft labels: DIR/sweep/soft-labels.npz",
        "distil a student: distill.teacher=DIR/sweep/soft-labels.npz (docs/ensembles.md)",
    ]

    # A long note (here: members that vote, and no soft labels without the runs' config.yaml) is wrapped.
    votes = tmp_path / "votes"
    synthetic_store(votes, {"aaaaaa000000": ("cnn", 1.6)}, seed=1)
    synthetic_store(votes, {"bbbbbb000000": ("transformer", 1.5)}, seed=1, probs=False)
    assert main([str(votes), "--no-artefact", "--no-baselines"]) == 0
    lines = capsys.readouterr().out.replace(str(tmp_path), "DIR").splitlines()
    assert max(map(len, lines)) <= STAGE_LINE_BOUND, max(lines, key=len)
    assert lines[0].startswith("note: 1 of 2 members' records keep no probabilities") and lines[1].startswith("  ")


@pytest.mark.integration
def test_the_baselines_are_scored_on_the_runs_folds_with_calibrated_probabilities(text_store):
    from klue_tc.data.titles import read_labelled_file
    from klue_tc.ensemble.stage import build_ensemble

    sweep, train, _ = text_store
    ensemble = build_ensemble(sweep)
    data = read_labelled_file(train)
    for k, (_, held) in enumerate(title_folds(data, FOLDS, 42)):  # the runs' folds: a title's copies in one
        stored = FoldPredictions.load(sweep / "baselines" / "nb-svm" / f"fold{k}.predicted.npz")
        assert np.array_equal(stored.scored.index, held)  # the very titles the runs' fold k scored
        assert stored.scored.probs.dtype == np.float16 and np.allclose(stored.scored.probs.sum(1), 1, atol=1e-2)
        assert stored.validation is not None and len(stored.validation.index) == len(ensemble.titles.validation_labels)
    linear = [m for m in ensemble.members if m.kind == "linear"]
    assert all(0.02 < f.temperature < 50 for m in linear for f in m.folds)  # chosen on each inner split


@pytest.mark.integration
def test_the_tables_are_logged_as_one_offline_wandb_run(tmp_path, caplog):
    import logging

    from test_report import offline_run_bytes_once_written

    from klue_tc.core.config import WandbConfig
    from klue_tc.ensemble.report import log_to_wandb
    from klue_tc.ensemble.stage import build_ensemble

    synthetic_store(tmp_path, DESIGNS)
    ensemble = build_ensemble(tmp_path, baselines=False)
    with caplog.at_level(logging.WARNING):
        log_to_wandb(ensemble, WandbConfig(project="klue_tc_test", mode="offline"), "test")
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, caplog.text
    assert b"ensemble_comparisons" in offline_run_bytes_once_written(runs[0], "ensemble_comparisons")


@pytest.mark.integration
def test_records_without_probabilities_take_part_by_their_votes(tmp_path):
    from klue_tc.ensemble.stage import build_ensemble

    synthetic_store(tmp_path, {"aaaaaa000000": ("cnn", 1.6)}, seed=1)
    synthetic_store(tmp_path, {"bbbbbb000000": ("transformer", 1.5)}, seed=1, probs=False)
    ensemble = build_ensemble(tmp_path, baselines=False)
    voting = [m for m in ensemble.members if m.votes]
    assert [m.key for m in voting] == ["bbbbbb000000"]
    assert set(np.unique(voting[0].oof)) == {0.0, 1.0} and voting[0].temperature == 1.0
    assert any("keep no probabilities" in note and "votes" in note for note in ensemble.notes)


@pytest.mark.integration
def test_members_whose_encoders_read_their_held_out_titles_are_named_in_one_line(tmp_path):
    from klue_tc.ensemble.stage import build_ensemble

    rng = np.random.default_rng(3)
    labels = np.arange(420) % NUM_CLASSES
    validation_labels = rng.integers(0, NUM_CLASSES, 280)
    store = ResultsStore(tmp_path / "results")
    for key, encoder, read in (("aaaaaa000000", "cnn", True), ("bbbbbb000000", "transformer", False)):
        for record in configuration_records(key, encoder, labels, validation_labels, 1.5, rng):
            record.pretrained = {"key": f"enc-{key}", "include_held_out_titles": read}
            store.put(key, record.fold, record)
    notes = [n for n in build_ensemble(tmp_path, baselines=False).notes if "include_held_out_titles" in n]
    assert len(notes) == 1 and "cnn" in notes[0] and "transformer" not in notes[0]


@pytest.mark.integration
def test_a_configuration_short_of_folds_is_left_out_in_one_line(tmp_path):
    from klue_tc.ensemble.stage import build_ensemble

    synthetic_store(tmp_path, DESIGNS)
    (tmp_path / "results" / "bbbbbb000000" / "fold1.json").unlink()
    ensemble = build_ensemble(tmp_path, baselines=False)
    assert sorted(m.key for m in ensemble.members) == ["aaaaaa000000", "cccccc000000"]
    assert any("do not score every training title once" in note for note in ensemble.notes)


@pytest.mark.integration
def test_a_folder_without_records_is_one_line(tmp_path, capsys):
    from klue_tc.ensemble.cli import main

    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"error: {tmp_path}: no finished fold record")


# --- the artefact --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_sweep(tmp_path_factory):
    """One tiny configuration trained for real on 2 folds into a sweep's results store."""
    from jobs import tiny_trained_sweep

    sweep, validation, _ = tiny_trained_sweep(tmp_path_factory.mktemp("trained"), epochs=1)
    return sweep, validation


@pytest.mark.integration
@pytest.mark.parametrize("baselines", [False, True])
def test_the_artefact_is_served_by_predict_wherever_it_is_moved(trained_sweep, tmp_path, capsys, baselines):
    import json
    import shutil

    from klue_tc.data.titles import read_labelled_file
    from klue_tc.ensemble.artefact import ArtefactError, artefact_probs
    from klue_tc.ensemble.artefact import write_artefact as write
    from klue_tc.ensemble.stage import build_ensemble
    from klue_tc.predict import main as predict

    sweep = tmp_path / "sweep"
    shutil.copytree(trained_sweep[0], sweep)
    ensemble = build_ensemble(sweep, baselines=baselines)
    expected = ensemble.validation_probs()
    write(ensemble, tmp_path / "model")
    manifest = json.loads((tmp_path / "model" / "ensemble.json").read_text(encoding="utf-8"))
    assert [m["kind"] for m in manifest["members"]] == [m.kind for m, _ in ensemble.chosen]
    assert ("linear" in {m["kind"] for m in manifest["members"]}) == baselines  # the tiny network learnt little
    assert sum(m["weight"] for m in manifest["members"]) == pytest.approx(1.0)

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(ArtefactError, match="exists and is not an ensemble's folder"):
        write(ensemble, tmp_path / "notes")
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    write(ensemble, tmp_path / "model")  # an ensemble's folder is replaced

    moved = tmp_path / "elsewhere" / "model"
    moved.parent.mkdir()
    shutil.move(tmp_path / "model", moved)
    shutil.rmtree(sweep)  # nothing of the sweep is read any more
    texts = read_labelled_file(trained_sweep[1]).texts
    probs, names = artefact_probs(moved, texts)
    assert names == list(ensemble.label_names)
    assert np.allclose(probs, expected, atol=5e-3)  # the records kept float16 probabilities
    assert predict([str(moved), "--json", texts[0], texts[1]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["label"] for line in lines] == [names[k] for k in probs[:2].argmax(1)]
    assert [line["probability"] for line in lines] == pytest.approx(probs[:2].max(1).tolist(), abs=1e-6)


@pytest.mark.integration
def test_another_validation_file_is_scored_by_every_members_fold_models(trained_sweep, tmp_path):
    import shutil

    from conftest import make_headlines, write_tsv
    from klue_tc.data.titles import read_labelled_file
    from klue_tc.ensemble.stage import build_ensemble

    sweep = tmp_path / "sweep"
    shutil.copytree(trained_sweep[0], sweep)
    other = write_tsv(tmp_path / "other.tsv", make_headlines(per_class=3, seed=5))
    ensemble = build_ensemble(sweep, validation_file=other)
    truth = read_labelled_file(other).labels
    assert ensemble.validation.source == str(other)
    assert np.array_equal(ensemble.titles.validation_labels, truth)
    assert all(len(m.validation) == 2 and m.validation[0].shape == (len(truth), NUM_CLASSES) for m in ensemble.members)
    assert ensemble.validation.f1 == pytest.approx(macro_f1_of(truth, ensemble.validation_probs()))
    # The runs' own validation titles chose nothing before either: the selection is the same.
    assert build_ensemble(sweep).selection == ensemble.selection


@pytest.mark.integration
def test_a_sweep_directory_reads_the_probabilities_from_the_store_its_runs_name(trained_sweep, tmp_path):
    """A study keeps its results store in docs/ (results.dir), apart from the sweep's run folders,
    whose copy of each fold's predictions holds the classes only."""
    import shutil

    import yaml

    from klue_tc.ensemble.stage import build_ensemble

    shutil.copytree(trained_sweep[0] / "run", tmp_path / "sweep" / "run")
    shutil.copytree(trained_sweep[0] / "results", tmp_path / "docs" / "results")
    config = tmp_path / "sweep" / "run" / "config.yaml"
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["results"]["dir"] = str(tmp_path / "docs" / "results")
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    ensemble = build_ensemble(tmp_path / "sweep", baselines=False)
    assert not any(m.votes for m in ensemble.members) and not ensemble.notes
    shutil.rmtree(tmp_path / "docs")  # the run folders alone: classes, so votes, in one line
    ensemble = build_ensemble(tmp_path / "sweep", baselines=False)
    assert all(m.votes for m in ensemble.members) and any("votes" in note for note in ensemble.notes)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_ensemble_sweep_runs_resumes_and_its_records_make_a_servable_ensemble(tmp_path):
    """sweeps/ensemble.yaml as `make sweep SWEEP=ensemble` runs it (two of its members, 2 folds, a
    tiny model), run again (nothing trains), then the stage on the sweep's folder and predict."""
    import json
    import shutil
    import subprocess
    import sys

    from test_sweeps import SKIPPED, sweep_env

    from conftest import REPO, make_headlines, write_tsv

    sweeps = tmp_path / "sweeps"
    shutil.copytree(REPO / "sweeps", sweeps)
    sweep_file = sweeps / "ensemble.yaml"
    text = sweep_file.read_text(encoding="utf-8")
    text = text.replace(
        "transformer_sentencepiece,cnn_mecab,transformer_kobert,trans_blstm_parallel_mecab",
        "transformer_sentencepiece,cnn_mecab",
    )
    sweep_file.write_text(text.replace("folds: 5", "folds: 2").replace("range(0,5)", "range(0,2)"), encoding="utf-8")
    with open(sweeps / "ensemble_member" / "transformer_sentencepiece.yaml", "a", encoding="utf-8") as member:
        member.write("tokenizer:\n  vocab_size: 300\n")
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=16, seed=0))
    validation = write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=4, seed=9))
    command = [
        sys.executable, "-m", "klue_tc", "--multirun", "--config-dir", str(sweeps), "--config-name", "ensemble",
        f"data.path={train}", f"data.validation_path={validation}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "trainer.max_epochs=1", "pretrain.max_steps=2", "pretrain.batch_size=16", "encoder.d_model=32",
        "encoder.heads=2", "head.hidden=32", "data.batch_size=16", "trainer.accelerator=cpu", "logger=none",
    ]  # fmt: skip
    env = {**sweep_env(tmp_path), "PYTHONPATH": f"{REPO}{':' + str(REPO / 'tests')}"}
    for _ in ("trains", "resumes"):
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=800)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert done.stdout.count(SKIPPED) == 4  # the rerun found every fold in the store
    assert len(list((tmp_path / "docs" / "ensemble" / "results").glob("*/fold*.json"))) == 4
    # Each member's folds share one encoder, pretrained on all of train's titles (no validation title).
    encoders = [json.loads(p.read_text()) for p in (tmp_path / "outputs").rglob("pretrained.json")]
    assert len(encoders) == 2 and all(e["include_held_out_titles"] for e in encoders)

    stage = [sys.executable, "-m", "klue_tc.ensemble", str(tmp_path / "sweep"), "--no-baselines"]
    done = subprocess.run(stage, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "votes" not in done.stdout  # the probabilities came from the store the runs name
    assert (tmp_path / "sweep" / "ensemble.md").is_file() and "no artefact" not in done.stderr, done.stderr[-2000:]
    served = [
        sys.executable,
        "-m",
        "klue_tc.predict",
        str(tmp_path / "sweep" / "ensemble-model"),
        "--json",
        "코스피 상승 마감",
    ]
    done = subprocess.run(served, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[0])["title"] == "코스피 상승 마감"


def test_a_configuration_pretrained_with_two_seeds_is_two_members_named_by_their_seeds():
    """The ensemble's tables name each seed's fold models by the seed, not by a key's first letters;
    two records of one configuration and no seed to tell them apart keep the key."""
    import dataclasses

    from klue_tc.ensemble.members import configuration_names

    rng = np.random.default_rng(0)
    labels = rng.integers(0, NUM_CLASSES, size=70)
    base = configuration_records("a1b2c3d4", "cnn", labels, labels[:10], 0.5, rng, folds=2)
    seeded = [
        dataclasses.replace(r, config_hash=key, pretrained={"seed": seed})
        for key, seed in (("aaaaaa11", 42), ("bbbbbb22", 43))
        for r in base
    ]
    names = configuration_names(seeded)
    assert names["aaaaaa11"].endswith(", pretraining seed 42") and names["bbbbbb22"].endswith(", pretraining seed 43")
    unseeded = configuration_names([*base, *(dataclasses.replace(r, config_hash="ffffff99") for r in base)])
    assert unseeded["a1b2c3d4"].endswith("(a1b2c3)") and unseeded["ffffff99"].endswith("(ffffff)")
