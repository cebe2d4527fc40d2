"""Model selection that never reads the scored fold, the learning curve and per-title predictions in
the records, and the TF-IDF baseline's C chosen the same way."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_MODEL, make_headlines, write_tsv
from jobs import compose_job, run_in_process
from klue_tc.core.errors import ConfigError, DataError
from klue_tc.data.titles import LABEL_NAMES, NUM_CLASSES, LabelledTitles, inner_split, stratified_folds
from klue_tc.store.records import (
    SELECTED_ON_INNER_SPLIT,
    SELECTED_ON_SCORED_FOLD,
    EpochScores,
    FoldPredictions,
    FoldResult,
    TitlePredictions,
)
from klue_tc.store.results import ResultsStore


def small_record(**extra) -> FoldResult:
    return FoldResult(
        fold=0, f1=0.5, accuracy=0.5, best_epoch=1, epochs_run=1, train_samples_per_s=1.0,
        time_to_first_step_s=0.0, train_seconds=1.0, train_size=10, val_size=5, checkpoint=None,
        tokenizer_dir="tokenizer", **extra,
    )  # fmt: skip


def some_predictions(rng: np.random.Generator, n: int = 30) -> FoldPredictions:
    probs = rng.dirichlet(np.ones(NUM_CLASSES), size=n)
    return FoldPredictions(
        TitlePredictions.of(np.arange(n) * 3, rng.integers(0, NUM_CLASSES, n), probs),
        TitlePredictions.of(np.arange(n // 2), rng.integers(0, NUM_CLASSES, n // 2), probs[: n // 2]),
    )


def test_the_inner_split_is_stratified_seeded_and_holds_every_class():
    labels = np.repeat(np.arange(NUM_CLASSES), [40, 30, 20, 20, 12, 10, 8])
    fit, inner = inner_split(labels, 0.1, seed=42)
    assert sorted([*fit, *inner]) == list(range(len(labels))) and not set(fit) & set(inner)
    assert np.bincount(labels[inner]).tolist() == [4, 3, 2, 2, 1, 1, 1]  # a tenth of each class, at least one
    assert np.array_equal(inner, inner_split(labels, 0.1, seed=42)[1])
    assert not np.array_equal(inner, inner_split(labels, 0.1, seed=1)[1])
    # A split smaller than the classes still holds one title of each.
    assert set(labels[inner_split(labels, 0.01, seed=42)[1]]) == set(range(NUM_CLASSES))
    with pytest.raises(DataError, match="cv.inner_fraction=0.1: class 경제 has 1 title in a training fold"):
        inner_split(np.array([0, 0, 0, 1]), 0.1, seed=42)  # a class of one title cannot be split


@pytest.mark.parametrize("fraction", [0.0, 0.6])
def test_an_inner_fraction_out_of_range_is_one_line(tmp_path, fraction):
    from klue_tc.core.config import validate

    cfg = compose_job(["+experiment=transformer", f"cv.inner_fraction={fraction}"], tmp_path)
    with pytest.raises(ConfigError, match=rf"cv.inner_fraction must be in \(0, 0.5\], got {fraction}"):
        validate(cfg)


def test_old_records_load_with_defaults_and_new_ones_round_trip(tmp_path):
    old = small_record().to_dict()
    for key in ("inner_f1", "inner_accuracy", "inner_size", "selected_on", "learning_curve"):
        del old[key]
    loaded = FoldResult.from_dict(old)
    assert loaded.selected_on == SELECTED_ON_SCORED_FOLD and loaded.learning_curve == [] and loaded.inner_f1 is None

    curve = [EpochScores(1, 0.4, 0.5, 1.2, 0.3, 0.4, 1.3), EpochScores(2, 0.6, 0.7, 0.9, 0.5, 0.6, 1.0)]
    record = small_record(inner_f1=0.6, inner_size=7, selected_on=SELECTED_ON_INNER_SPLIT, learning_curve=curve)
    record.save(tmp_path / "fold0.json")
    assert FoldResult.load(tmp_path / "fold0.json") == record
    assert "predictions" not in json.loads((tmp_path / "fold0.json").read_text())


def test_the_store_saves_and_loads_predictions_beside_the_record(tmp_path):
    store = ResultsStore(tmp_path)
    predictions = some_predictions(np.random.default_rng(0))
    store.put("key", 0, small_record(predictions=predictions))
    assert sorted(p.name for p in (tmp_path / "key").glob("*.npz")) == ["fold0.predicted.npz"]  # one file
    for loaded in (store.read("key", 0).predictions, store.records()[0].predictions):
        for part in ("scored", "validation"):
            ours, theirs = getattr(predictions, part), getattr(loaded, part)
            for name in ("index", "label", "predicted", "probs"):
                assert np.array_equal(getattr(ours, name), getattr(theirs, name))
        assert loaded.scored.probs.dtype == np.float16
    # A fold trained again without predictions does not keep its predecessor's.
    store.put("key", 0, small_record())
    assert store.read("key", 0).predictions is None and not list((tmp_path / "key").glob("*.npz"))


def test_a_store_named_relative_to_the_working_folder_finds_its_models(tmp_path, monkeypatch):
    # results.dir=docs/ensemble/results, as a study names its store: the record names the fold's
    # model relative to itself, not to the folder the job ran in.
    run = tmp_path / "run" / "fold0"
    (run / "tokenizer").mkdir(parents=True)
    (run / "best.ckpt").write_bytes(b"weights")
    monkeypatch.chdir(tmp_path)
    store = ResultsStore("docs/results")
    store.put(
        "key", 0, replace(small_record(), checkpoint=str(run / "best.ckpt"), tokenizer_dir=str(run / "tokenizer"))
    )
    assert json.loads((tmp_path / "docs/results/key/fold0.json").read_text())["checkpoint"] == "fold0/best.ckpt"
    for record in (store.read("key", 0), ResultsStore(tmp_path / "docs" / "results").read("key", 0)):
        assert Path(record.checkpoint).read_bytes() == b"weights" and Path(record.tokenizer_dir).is_dir()


def test_the_committed_file_keeps_the_probabilities_and_older_files_still_load(tmp_path):
    # A study commits fold<k>.predicted.npz: with the probabilities, so that an ensemble is rebuilt
    # from the records alone; older code's copy held the classes only and its probabilities lay in
    # a git-ignored fold<k>.predictions.npz.
    store = ResultsStore(tmp_path)
    predictions = some_predictions(np.random.default_rng(1))
    store.put("key", 0, small_record(predictions=predictions))
    committed = tmp_path / "key" / "fold0.predicted.npz"
    with np.load(committed) as stored:
        assert stored["validation_probs"].dtype == np.float16
        assert np.array_equal(stored["scored_probs"], predictions.scored.probs)

    predictions.save(committed, with_probs=False)  # as older code committed it
    loaded = store.read("key", 0).predictions
    for part in ("scored", "validation"):
        for name in ("index", "label", "predicted"):
            assert np.array_equal(getattr(getattr(predictions, part), name), getattr(getattr(loaded, part), name))
        assert getattr(loaded, part).probs is None
    predictions.save(tmp_path / "key" / "fold0.predictions.npz")  # older code's full copy beside it
    assert np.array_equal(store.read("key", 0).predictions.validation.probs, predictions.validation.probs)
    store.put("key", 0, small_record(predictions=predictions))  # trained again: one file
    assert sorted(p.name for p in (tmp_path / "key").glob("*.npz")) == ["fold0.predicted.npz"]


def test_a_fold_keeps_its_probabilities_in_a_small_file(tmp_path):
    # A fold of all of train (9,000 scored titles) and validation-a (4,553): float16, compressed.
    rng = np.random.default_rng(2)
    sharp = lambda n: rng.dirichlet(np.full(NUM_CLASSES, 0.2), size=n)  # noqa: E731 - peaked, as trained models give
    predictions = FoldPredictions(
        TitlePredictions.of(np.arange(9000), rng.integers(0, NUM_CLASSES, 9000), sharp(9000)),
        TitlePredictions.of(np.arange(4553), rng.integers(0, NUM_CLASSES, 4553), sharp(4553)),
    )
    ResultsStore(tmp_path).put("key", 0, small_record(predictions=predictions))
    assert (tmp_path / "key" / "fold0.predicted.npz").stat().st_size < 260_000  # float32 would be twice that


def test_predicted_classes_come_from_the_full_precision_probabilities():
    # Two classes that only float16 rounds to a tie: the prediction keeps the float32 winner.
    probs = np.array([[0.50001, 0.49999, 0, 0, 0, 0, 0]], dtype=np.float32)
    titles = TitlePredictions.of(np.array([0]), np.array([0]), probs)
    assert titles.probs[0, 0] == titles.probs[0, 1] and titles.predicted[0] == 0


def fold_config(tmp_path, *extra):
    from klue_tc.core.config import validate

    return validate(
        compose_job(
            [
                "+experiment=transformer",
                *TINY_MODEL,
                "encoder.layers=2",
                "logger=none",
                "trainer.max_epochs=6",
                "trainer.early_stopping_patience=6",
                "trainer.progress_bar=none",
                "data.batch_size=8",  # after TINY_MODEL's: enough steps for the inner F1 to move
                "optim.lr=5e-3",
                "optim.ema_decay=0.9",
                *extra,
            ],
            tmp_path / "compose",
        )
    )


def train_one_fold(run, data: LabelledTitles, folder, scored_labels=None):
    import torch

    from klue_tc.jobs.job_setup import standalone_job
    from klue_tc.tokenizers import TokenizerCache
    from klue_tc.training.fold import prepare_fold, train_fold

    train_idx, val_idx = stratified_folds(data.labels, 2, run.cv.seed)[0]
    prepared = prepare_fold(run, data, train_idx, val_idx, TokenizerCache(folder / "cache"))
    if scored_labels is not None:
        prepared = replace(prepared, val=replace(prepared.val, labels=scored_labels(prepared.val.labels)))
    record = train_fold(standalone_job(run, data, folder, folder / "store"), 0, prepared)
    weights = torch.load(record.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    return record, weights, prepared


@pytest.mark.integration
@pytest.mark.slow  # two trainings of six epochs
def test_the_scored_folds_labels_cannot_change_the_chosen_epoch_or_checkpoint(tmp_path):
    run = fold_config(tmp_path)
    rows = make_headlines(per_class=20, seed=3)
    data = LabelledTitles([t for _, t in rows], np.array([LABEL_NAMES.index(label) for label, _ in rows]), "tiny")
    record, weights, prepared = train_one_fold(run, data, tmp_path / "true")
    # Every held-out label moved to the next class: any selection reading them would choose otherwise.
    changed, changed_weights, _ = train_one_fold(
        run, data, tmp_path / "changed", scored_labels=lambda y: (y + 1) % NUM_CLASSES
    )

    assert record.selected_on == SELECTED_ON_INNER_SPLIT and record.inner_size == len(prepared.inner.encoded) == 7
    assert len(record.learning_curve) == record.epochs_run == 6
    assert changed.best_epoch == record.best_epoch and changed.inner_f1 == record.inner_f1
    assert weights.keys() == changed_weights.keys()
    assert all(torch_equal(weights[k], changed_weights[k]) for k in weights)
    inner_curve = [(e.epoch, e.inner_f1, e.inner_loss) for e in record.learning_curve]
    assert inner_curve == [(e.epoch, e.inner_f1, e.inner_loss) for e in changed.learning_curve]
    # The scored fold was read, for the curve and the score only: both moved with its labels.
    assert [e.f1 for e in record.learning_curve] != [e.f1 for e in changed.learning_curve]
    assert record.f1 > changed.f1
    chosen = record.learning_curve[record.best_epoch - 1]
    assert chosen.inner_f1 == record.inner_f1 == max(e.inner_f1 for e in record.learning_curve)
    # The fold's score is its held-out titles scored once by the chosen checkpoint.
    scored = record.predictions.scored
    assert np.array_equal(scored.index, prepared.val_index) and np.array_equal(scored.label, prepared.val.labels)
    assert record.f1 == pytest.approx(macro_f1(scored.label, scored.predicted))


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def macro_f1(truth, predicted) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(truth, predicted, average="macro"))


@pytest.mark.integration
def test_per_title_predictions_are_stored_and_equal_the_models_outputs(tmp_path):
    from klue_tc.data.titles import read_labelled_file
    from klue_tc.training.inference import load_fold, predict_probs

    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14, seed=0))
    validation = write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=5, seed=1))
    run_dir = tmp_path / "run"
    run_in_process(
        [
            f"data.path={train}",
            f"data.validation_path={validation}",
            f"results.dir={tmp_path / 'results'}",
            "logger=none",
            *TINY_MODEL,
            "+experiment=transformer",
            "encoder.layers=2",
            "cv.folds=2",
            "cv.fold=0",
            "trainer.max_epochs=2",
        ],
        run_dir,
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    fold = metrics["folds"][0]
    assert {"fold", "f1", "accuracy", "best_epoch"} <= fold.keys()
    assert fold["selected_on"] == SELECTED_ON_INNER_SPLIT and fold["inner_f1"] is not None
    assert [e["epoch"] for e in fold["learning_curve"]] == list(range(1, fold["epochs_run"] + 1))

    store = ResultsStore(tmp_path / "results")
    assert (store.root / metrics["config_hash"] / "fold0.predicted.npz").is_file()
    record = store.read(metrics["config_hash"], 0)
    module, tokenizer = load_fold(record)
    data, held = read_labelled_file(train), read_labelled_file(validation)
    for titles, texts, labels in (
        (record.predictions.scored, [data.texts[i] for i in record.predictions.scored.index], None),
        (record.predictions.validation, held.texts, held.labels),
    ):
        probs = predict_probs(module, tokenizer, texts)
        assert np.allclose(titles.probs.astype(np.float32), probs, atol=1e-3)  # float16 keeps ~3 digits
        assert np.array_equal(titles.predicted, probs.argmax(1))
        if labels is not None:
            assert np.array_equal(titles.index, np.arange(len(texts))) and np.array_equal(titles.label, labels)
    scored = record.predictions.scored
    assert len(scored.index) == record.val_size == len(data) // 2
    assert np.array_equal(scored.label, data.labels[scored.index])
    assert record.f1 == pytest.approx(macro_f1(scored.label, scored.predicted))
    assert record.validation.f1 == pytest.approx(macro_f1(held.labels, record.predictions.validation.predicted))


def test_the_baseline_chooses_c_on_the_inner_split_alone():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.svm import LinearSVC

    from klue_tc.training.baseline import C_GRID, CHAR_NGRAM_TFIDF, fit_choosing_c

    rows = make_headlines(per_class=20, seed=5)
    texts, labels = [t for _, t in rows], np.array([LABEL_NAMES.index(label) for label, _ in rows])
    model, chosen = fit_choosing_c(texts, labels, 0.2, seed=42)
    fit, inner = inner_split(labels, 0.2, seed=42)
    vectorizer = TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2).fit([texts[i] for i in fit])
    inner_f1 = {
        c: macro_f1(
            labels[inner],
            LinearSVC(C=c)
            .fit(vectorizer.transform([texts[i] for i in fit]), labels[fit])
            .predict(vectorizer.transform([texts[i] for i in inner])),
        )
        for c in C_GRID
    }
    assert chosen["C"] == max(C_GRID, key=lambda c: (inner_f1[c], -c))
    assert chosen["inner_f1"] == pytest.approx(inner_f1[chosen["C"]])
    assert model.named_steps["linearsvc"].C == chosen["C"]
    assert model.named_steps["linearsvc"].n_features_in_ == len(vectorizer.vocabulary_)  # fit on `fit` only


def test_the_baseline_on_a_runs_folds_follows_its_selection_rule(tmp_path):
    from klue_tc.core.config import CVConfig, DataConfig
    from klue_tc.training.baseline import C_GRID, score_on_folds

    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=20, seed=0))
    data, cv = DataConfig(path=str(train)), CVConfig(folds=2, seed=42)
    legacy = score_on_folds(data, cv, 42)  # records that chose on the scored fold: C=0.5 as then
    assert [set(row) for row in legacy] == [{"fold", "f1", "scored_index", "scored_predicted"}] * 2  # no C chosen
    rows = score_on_folds(data, cv, 42, tmp_path / "baseline.json", inner_fraction=0.1)
    assert all(row["C"] in C_GRID and 0 <= row["inner_f1"] <= 1 and row["f1"] > 0.8 for row in rows)
    assert score_on_folds(data, cv, 42, tmp_path / "baseline.json", inner_fraction=0.1) == rows  # cached by rule
    assert score_on_folds(data, cv, 42, tmp_path / "baseline.json") == legacy


@pytest.mark.integration
@pytest.mark.parametrize(
    "selected, expected",
    [
        ([SELECTED_ON_INNER_SPLIT] * 2, "by the checkpoint of the epoch its inner split"),
        ([None, None], "chosen on those same titles (optimistic)"),
        ([SELECTED_ON_INNER_SPLIT, None], "**Mixed selection**: 1 of 2 folds"),
    ],
)
def test_the_report_says_how_the_cv_f1_was_chosen(tmp_path, selected, expected):
    from test_report import metrics, write_metrics

    from klue_tc.report import write_report

    for k, how in enumerate(selected):
        extra = {"selected_on": how} if how else {}
        write_metrics(tmp_path / str(k), metrics("mecab", "transformer", "post", 2, [(k, 0.7 + k / 100)], **extra))
    write_report(tmp_path, baseline=False)
    assert expected in (tmp_path / "report.md").read_text()
