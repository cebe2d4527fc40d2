"""The report's further analyses on tiny records: sizes, seconds per machine, per-class F1, the
class mix and its reweighted F1, and the NB-SVM baseline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import f1_score

from conftest import TINY_MODEL, make_headlines, write_tsv
from jobs import run_in_process
from klue_tc.data.titles import LABEL_NAMES
from klue_tc.report.class_mix import importance_weights, weighted_macro_f1
from klue_tc.report.per_class import class_table, per_class_f1
from klue_tc.report.sizes import configuration_sizes, recorded_sizes
from klue_tc.report.speed import per_machine_tables
from klue_tc.store.records import Describe, EpochScores, FoldResult, ModelSize, ValidationScore


def record(key: str, fold: int, f1: float = 0.7, **extra) -> FoldResult:
    values = {
        "describe": Describe("transformer", "transformer", "post", 2, "cls", "mecab"),
        "device": "CPU A",
        "threads": 1,
        "train_seconds": 20.0,
        "time_to_first_step_s": 0.0,
        **extra,
    }
    return FoldResult(
        fold=fold, f1=f1, accuracy=f1, best_epoch=1, epochs_run=2, train_samples_per_s=100.0,
        train_size=100, val_size=50, checkpoint=None, tokenizer_dir="tok", config_hash=key, **values,
    )  # fmt: skip


def test_equal_class_mixes_leave_the_validation_f1_unchanged():
    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 40, size=(4, 4)) + np.diag([60, 50, 40, 30])
    weights = importance_weights([10, 20, 30, 40], [100, 200, 300, 400])  # the same shares
    assert np.allclose(weights, 1)
    true, predicted = np.repeat(np.indices(matrix.shape).reshape(2, -1), matrix.ravel(), axis=1)
    assert weighted_macro_f1(matrix, weights) == pytest.approx(f1_score(true, predicted, average="macro"))


def test_a_skewed_mix_reweights_each_title_and_moves_precision_the_right_way():
    # The validation file is 10:1 in class 0; the training titles are 1:1. Class 1's precision
    # suffers from class 0's many misses; at the training mix those count a tenth as much.
    matrix = np.array([[900, 100], [10, 90]])
    weights = importance_weights([500, 500], [1000, 100])
    assert weights == pytest.approx([0.55, 5.5])
    true, predicted = np.repeat(np.indices(matrix.shape).reshape(2, -1), matrix.ravel(), axis=1)
    per_title = f1_score(true, predicted, average="macro", sample_weight=weights[true])
    reweighted = weighted_macro_f1(matrix, weights)
    assert reweighted == pytest.approx(per_title)
    assert reweighted > f1_score(true, predicted, average="macro") + 0.1
    # The other way round (a training mix that favours class 0) lowers it.
    assert weighted_macro_f1(matrix, importance_weights([950, 50], [1000, 100])) < weighted_macro_f1(matrix, np.ones(2))


def test_per_class_f1_from_a_matrix_is_sklearns():
    rng = np.random.default_rng(1)
    true, predicted = rng.integers(0, 5, 300), rng.integers(0, 5, 300)
    predicted[:100] = true[:100]
    from sklearn.metrics import confusion_matrix

    matrix = confusion_matrix(true, predicted, labels=range(6))  # class 5 neither present nor predicted
    expected = f1_score(true, predicted, labels=range(6), average=None, zero_division=0)
    assert per_class_f1(matrix) == pytest.approx(expected)


def test_the_class_table_averages_the_fold_models_and_names_the_baselines():
    names = ["a", "b"]
    folds = [
        record("k", k, validation=ValidationScore(0.5, 0.5, 10, "v", dict(zip(names, (0, 0))), m))
        for k, m in enumerate(([[5, 0], [0, 5]], [[5, 0], [5, 0]]))
    ]
    table = class_table(folds, ["k"], names, [{"name": "base", "validation_confusion": [[[4, 1], [1, 4]]]}])
    assert table["mecab / transformer / post / L2"].tolist() == pytest.approx([(1 + 2 / 3) / 2, 0.5])
    assert table["base"].tolist() == pytest.approx([0.8, 0.8])


def test_seconds_per_epoch_are_never_averaged_across_machines():
    folds = [
        record("k", 0, device="CPU A"),
        record("k", 1, device="CPU A", train_seconds=40.0),
        record("k", 2, device="CPU B", train_seconds=400.0),
        record("k2", 0, device="GPU C", threads=0),
    ]
    tables = per_machine_tables(folds)
    assert list(tables) == ["CPU A, 1 thread", "CPU B, 1 thread", "GPU C"]  # most folds first
    assert tables["CPU A, 1 thread"].loc["mecab / transformer / post", 2] == "15 (2; 10–20)"  # median, range
    assert tables["CPU B, 1 thread"].loc["mecab / transformer / post", 2] == "200 (1)"


def test_seconds_of_folds_from_code_that_did_not_count_every_sitting_are_flagged():
    from klue_tc.report.speed import speed_section

    counted = [record("k", k, sittings=1 + k) for k in range(2)]
    assert "resumed" not in "\n".join(speed_section(counted).lines)
    text = "\n".join(speed_section([*counted, record("k", 2)]).lines)
    assert "1 of 3 folds are from code that timed a resumed fold's last sitting only" in text


def test_recorded_sizes_are_each_configurations_mean_over_folds():
    folds = [record("k", k, model_size=ModelSize(100 + k, 50, 1000.0 * (k + 1), 9)) for k in range(2)]
    sizes = recorded_sizes([*folds, record("none", 0)])
    assert list(sizes.index) == ["k"]
    assert sizes.loc["k", ["params_embedding", "params_non_embedding", "flops_per_title"]].tolist() == [
        100,  # 100.5 rounded half to even
        50,
        1500.0,
    ]


def test_nbsvm_beats_chance_on_a_separable_toy_set_and_predicts_its_classes():
    from klue_tc.training.nbsvm import NBSVM

    rng = np.random.default_rng(0)
    labels = np.repeat([3, 5, 9], 40)
    features = rng.integers(0, 3, size=(len(labels), 30))  # noise words, counts 0-2
    features[:, [21, 25, 27]] = 0
    for i, label in enumerate(labels):
        features[i, 30 - label] = 1  # each class has a word of its own
    model = NBSVM(C=0.1).fit(features[::2], labels[::2])
    predicted = model.predict(features[1::2])
    assert set(predicted) <= {3, 5, 9}
    assert f1_score(labels[1::2], predicted, average="macro") > 0.9  # chance: a third
    assert model.decision_function(features[:3]).shape == (3, 3)


def test_the_nbsvm_baseline_scores_headlines_on_the_runs_folds(tmp_path):
    from klue_tc.core.config import CVConfig, DataConfig
    from klue_tc.training.baseline import NB_SVM, score_on_folds

    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=20, seed=0))
    validation_rows = make_headlines(per_class=6, seed=1)
    validation = write_tsv(tmp_path / "validation.tsv", validation_rows)
    data = DataConfig(path=str(train), validation_path=str(validation))
    rows = score_on_folds(data, CVConfig(folds=2, seed=42), 42, tmp_path / "nbsvm.json", 0.1, NB_SVM)
    assert len(rows) == 2
    for row in rows:
        assert tuple(row["C"]) in NB_SVM.c_grid and row["f1"] > 0.8 and row["validation_f1"] > 0.8
        assert np.sum(row["validation_confusion"]) == 6 * len(LABEL_NAMES)
    assert json.loads((tmp_path / "nbsvm.json").read_text())["folds"] == rows
    # Each title's prediction is kept, so that a run can be compared with the baseline title by title.
    validation_labels = [LABEL_NAMES.index(label) for label, _ in validation_rows]  # in the file's order
    assert sorted(rows[0]["scored_index"] + rows[1]["scored_index"]) == list(range(20 * len(LABEL_NAMES)))
    for row in rows:
        predicted = np.asarray(row["validation_predicted"])
        assert f1_score(validation_labels, predicted, average="macro") == pytest.approx(row["validation_f1"])


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory) -> tuple:
    """One tiny configuration trained for real into a results store (a few seconds)."""
    tmp = tmp_path_factory.mktemp("store")
    train = write_tsv(tmp / "train.tsv", make_headlines(per_class=14, seed=0))
    validation = write_tsv(tmp / "validation.tsv", make_headlines(per_class=5, seed=1))
    results = tmp / "sweep" / "results"
    overrides = [
        f"data.path={train}",
        f"data.validation_path={validation}",
        f"results.dir={results}",
        f"data.cache_dir={tmp / 'cache'}",
        "logger=none",
        *TINY_MODEL,
        "+experiment=transformer",
        "encoder.layers=2",
        "cv.folds=2",
        "trainer.max_epochs=2",
    ]
    run_in_process(overrides, tmp / "run")
    return tmp, results


@pytest.mark.integration
def test_a_moved_run_directory_is_compared_with_the_baselines_title_by_title(trained_store, tmp_path):
    """A single run keeps its records in the shared results store; its own directory keeps each
    fold's predicted classes beside metrics.json, so its report resamples titles wherever it lies."""
    import shutil

    from klue_tc.report.write import write_report

    tmp, _ = trained_store
    moved = tmp_path / "moved"
    shutil.copytree(tmp / "run", moved)
    assert sorted(p.name for p in moved.glob("fold*.predicted.npz")) == ["fold0.predicted.npz", "fold1.predicted.npz"]
    summary = write_report(moved)
    assert summary["validation_f1_titles_low"].notna().all()  # intervals that resample the titles
    markdown = (moved / "report.md").read_text(encoding="utf-8")
    table = markdown.split("## Against the linear baselines")[1].split("\n## ")[0]
    assert "| best by CV − baseline | validation macro-F1 |" in table
    assert "− TF-IDF char_wb 1-3-grams + linear SVM | **" in table and "No paired comparison" not in table


@pytest.mark.integration
def test_a_record_without_its_size_is_measured_from_its_config_as_training_measured_it(trained_store):
    from klue_tc.store.results import ResultsStore

    _, results = trained_store
    records = ResultsStore(results).records()
    recorded = recorded_sizes(records)
    stripped = [replace(r, model_size=None) for r in records]
    measured, problems = configuration_sizes(stripped, results.parent)
    assert problems == []
    assert set(measured["size_source"]) == {"built from config.yaml"}
    first = min(records, key=lambda r: r.fold).model_size
    key = records[0].config_hash
    assert measured.loc[key, "params_non_embedding"] == recorded.loc[key, "params_non_embedding"]
    assert measured.loc[key, "params_embedding"] == first.embedding_params
    assert measured.loc[key, "flops_per_title"] == pytest.approx(first.forward_flops_per_title)


@pytest.mark.integration
def test_sizes_migrated_into_older_records_leave_the_report_as_it_was_and_build_no_model(
    trained_store, tmp_path, monkeypatch, capsys
):
    """Records of code older than the size: migrated once, their report reads the size from them."""
    import json
    import shutil

    from klue_tc.core.checksums import CHECKSUM_KEY
    from klue_tc.report.sizes import SIZES_CACHE, migrate_sizes
    from klue_tc.report.write import write_report
    from klue_tc.training.model_size import ModelBuilder

    _, results = trained_store
    sweep = tmp_path / "sweep"
    shutil.copytree(results, sweep / "results")
    paths = sorted((sweep / "results").glob("*/fold*.json"))
    for path in paths:  # as older code wrote them: no size
        replace(FoldResult.load(path), model_size=None).save(path)
    write_report(sweep)
    before = {name: (sweep / name).read_text(encoding="utf-8") for name in ("report.md", "report.csv")}
    assert "(1 built from config.yaml)" in before["report.md"]

    assert migrate_sizes(sweep) == (1, [])
    migrated = [FoldResult.load(path).model_size for path in paths]  # load checks each record's checksum
    assert [size is not None and size.rebuilt for size in migrated] == [True, False]  # the first fold's
    assert CHECKSUM_KEY in json.loads(paths[0].read_text(encoding="utf-8"))  # and it matches: load checked it
    from klue_tc.report.cli import main

    assert main([str(sweep), "--migrate-sizes"]) == 0  # once is enough: nothing is left to write
    assert "model sizes: written into 0 records" in capsys.readouterr().out

    def never(*_):
        raise AssertionError("a model was built")

    monkeypatch.setattr(ModelBuilder, "size", never)
    (sweep / SIZES_CACHE).unlink()
    write_report(sweep)
    assert {name: (sweep / name).read_text(encoding="utf-8") for name in before} == before


@pytest.mark.integration
def test_the_report_holds_every_further_analysis(trained_store):
    from klue_tc.report.write import write_report

    tmp, results = trained_store
    write_report(results.parent)
    markdown = (results.parent / "report.md").read_text(encoding="utf-8")
    for heading in (
        "## Linear baselines",
        "## Against the linear baselines",
        "## Model sizes",
        "## Seconds per epoch, per machine",
        "## The best configurations class by class",
        "## Class mix: training titles against the validation file",
    ):
        assert heading in markdown
    assert "NB-SVM" in markdown and "TF-IDF" in markdown
    for plot in ("f1_by_size.png", "confusion_best.png", "learning_curves.png"):
        assert (results.parent / plot).stat().st_size > 1000
        assert plot in markdown
    csv = pd.read_csv(results.parent / "report.csv")
    record = next(iter(__import__("klue_tc.store.results", fromlist=["ResultsStore"]).ResultsStore(results).records()))
    assert csv.loc[0, "params_non_embedding"] == record.model_size.non_embedding_params
    assert 0 <= csv.loc[0, "validation_f1_train_mix"] <= 1
    # The class mix the report shows is the training file's (14 a class) against the validation file's (5).
    assert "| IT과학 | 14 (14.3%) | 5 (14.3%) | 1.00 |" in markdown


def test_learning_curves_plot_one_panel_per_configuration(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from klue_tc.report.per_class import plot_learning_curves

    curve = [EpochScores(e, 0.5 + e / 10, 0, 0, 0.4 + e / 10, 0, 0) for e in (1, 2, 3)]
    folds = [record(key, k, learning_curve=curve) for key in ("a", "b") for k in range(2)]
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **_: saved.append(figure))
    plot_learning_curves(folds, ["a", "b"], tmp_path / "curves.png")
    (figure,) = saved
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert len(panels) == 2
    assert panels[0].get_shared_x_axes().joined(panels[0], panels[1])


def test_sizes_built_from_configs_are_kept_and_never_built_twice(tmp_path):
    configuration = tmp_path / "results" / "k"
    configuration.mkdir(parents=True)
    (configuration / "config.yaml").write_text("encoder: {name: transformer}\n")
    (configuration / "fold0.json").write_text("{}")
    built = []

    def size_of(config: dict, fold: int) -> ModelSize:
        built.append((config["encoder"]["name"], fold))
        return ModelSize(10, 20, 30.0, 5)

    folds = [record("k", 1), record("k", 0), record("lost", 0)]
    first, problems = configuration_sizes(folds, tmp_path, size_of, tmp_path / "sizes.json")
    assert built == [("transformer", 0)]  # the first fold's, once
    assert problems == ["lost: no config.yaml beside its records"]
    assert first.loc["k", ["params_embedding", "params_non_embedding", "flops_per_title"]].tolist() == [10, 20, 30.0]

    def never(*_):
        raise AssertionError("built again")

    again, _ = configuration_sizes(folds, tmp_path, never, tmp_path / "sizes.json")
    pd.testing.assert_frame_equal(first, again, check_dtype=False)


def test_configurations_kept_from_their_size_by_one_reason_are_counted_in_one_line():
    from klue_tc.report.sizes import grouped

    problems = ["a: data.path=x: file not found", "b: data.path=x: file not found", "c: no config.yaml"]
    assert grouped(problems) == ["2 configurations: data.path=x: file not found", "c: no config.yaml"]


@pytest.mark.integration
def test_without_the_data_file_the_report_says_so_and_keeps_what_the_records_hold(trained_store, tmp_path):
    import shutil

    from klue_tc.report.write import write_report

    _, results = trained_store
    moved = tmp_path / "sweep" / "results"
    shutil.copytree(results, moved)
    for config in moved.glob("*/config.yaml"):
        text = config.read_text(encoding="utf-8")
        config.write_text(text.replace(str(results.parent.parent / "train.tsv"), str(tmp_path / "gone.tsv")))
    write_report(moved.parent)
    markdown = (moved.parent / "report.md").read_text(encoding="utf-8")
    left_out = markdown.split("## Not in this report")[1]  # one list, not a heading each with nothing under it
    assert "- class mix: " in left_out and "gone.tsv" in left_out
    assert "- linear baselines: the runs name no common data file and folds." in left_out
    assert "## Class mix" not in markdown and "## Linear baselines" not in markdown
    assert "(1 recorded)" in markdown  # the sizes the records carry need no data


def test_no_size_anywhere_is_an_empty_table_and_a_line():
    sizes, problems = configuration_sizes([record("k", 0)], Path("/nonexistent"))
    assert sizes.empty and problems == ["k: no config.yaml beside its records"]


def with_predictions(key: str, fold: int, f1: float, scored: tuple, validation: tuple) -> FoldResult:
    """A record whose fold model predicted `scored` = (index, label, predicted) on its held-out
    titles and `validation` = (label, predicted) on the validation titles."""
    from klue_tc.store.records import FoldPredictions, TitlePredictions

    def titles(index, label, predicted) -> TitlePredictions:
        return TitlePredictions(*(np.asarray(a) for a in (index, label, predicted)))

    labels, predicted = validation
    found = record(key, fold, f1)
    found.predictions = FoldPredictions(titles(*scored), titles(np.arange(len(labels)), labels, predicted))
    return found


def two_fold_study(rng: np.random.Generator, titles: int = 400):
    """Two configurations on two folds: 'cv-best' is best by CV but right on only half of the
    validation titles; 'val-best' is lower by CV and right on all of them. A baseline right on 80 %."""
    labels = rng.integers(0, 4, size=titles)
    half = np.where(rng.random(titles) < 0.5, labels, (labels + 1) % 4)
    held = [np.arange(0, titles, 2), np.arange(1, titles, 2)]
    records = [
        with_predictions(key, k, f1, (held[k], labels[held[k]], labels[held[k]]), (labels, guess))
        for key, f1, guess in (("cv-best", 0.9, half), ("val-best", 0.6, labels))
        for k in range(2)
    ]
    baseline_guess = np.where(rng.random(titles) < 0.8, labels, (labels + 2) % 4)
    baseline = {
        "name": "linear",
        "predictions": {
            k: {
                "scored_index": held[k][::-1].tolist(),  # another order: paired by index, not position
                "scored_predicted": baseline_guess[held[k]][::-1].tolist(),
                "validation_predicted": baseline_guess.tolist(),
            }
            for k in range(2)
        },
    }
    return records, baseline


def test_the_best_by_cv_is_compared_with_a_baseline_title_by_title():
    """The CV ranking picks the configuration (never the validation titles); the validation titles
    then judge it: half right is behind a baseline right on 80 %, with an interval below zero."""
    from klue_tc.report.against_baselines import AHEAD, BEHIND, compare_best

    records, baseline = two_fold_study(np.random.default_rng(0))
    (contender,) = compare_best(records, [baseline])
    assert contender.key == "cv-best" and contender.among == "all configurations"
    on = {c.metric: c for c in contender.comparisons}
    assert on["validation_f1"].verdict == BEHIND and on["validation_f1"].high < 0
    assert on["validation_f1"].difference == pytest.approx(-0.3, abs=0.08)
    # On its held-out titles it is right on all: ahead of the baseline's 80 %.
    assert on["f1"].verdict == AHEAD and on["f1"].low > 0 and on["f1"].confidence == pytest.approx(0.95)


def test_identical_predictions_tie_and_other_held_out_titles_are_not_compared():
    from klue_tc.report.against_baselines import TIED, compare_best, scored_comparison

    records, baseline = two_fold_study(np.random.default_rng(1))
    best = {r.fold: r for r in records if r.config_hash == "cv-best"}
    for fold, part in baseline["predictions"].items():
        titles = best[fold].predictions
        part["scored_index"] = titles.scored.index.tolist()
        part["scored_predicted"] = titles.scored.predicted.tolist()
        part["validation_predicted"] = titles.validation.predicted.tolist()
    (contender,) = compare_best(records, [baseline])
    assert {(c.metric, c.verdict, c.difference, c.low, c.high) for c in contender.comparisons} == {
        ("validation_f1", TIED, 0.0, 0.0, 0.0),
        ("f1", TIED, 0.0, 0.0, 0.0),
    }
    baseline["predictions"][0]["scored_index"] = [i + 1 for i in baseline["predictions"][0]["scored_index"]]
    assert scored_comparison(best, baseline, 0.95) is None


def test_the_report_states_the_comparison_among_its_verdicts(tmp_path):
    from klue_tc.report.against_baselines import against_baselines_section

    records, baseline = two_fold_study(np.random.default_rng(0))
    section = against_baselines_section(records, [baseline, {**baseline, "name": "other"}])
    # right on half of the validation titles, against the baseline's 80 %
    assert section.verdict.startswith(
        "the best by CV against the linear baselines on the validation titles: "
        "all configurations, mecab / transformer / post / L2: behind linear -0.3"
    )
    assert "97.5 % intervals (Bonferroni over the 2 baselines)" in "\n".join(section.lines)
    assert "nan" not in "\n".join(section.lines)


def test_a_cell_pretrained_with_two_seeds_is_compared_as_one_with_its_whole_seeds():
    """The cell is ranked by the mean over its seeds and compared with every seed that has all its
    folds; a seed short of folds (one fold that happened to score high) neither wins alone nor
    narrows the comparison to that fold."""
    import dataclasses

    from klue_tc.report.against_baselines import compare_best

    records, baseline = two_fold_study(np.random.default_rng(0))
    records = [dataclasses.replace(r, pretrained={"seed": 42}) if r.config_hash == "cv-best" else r for r in records]
    second = [dataclasses.replace(r, pretrained={"seed": 43}) for r in records if r.config_hash == "cv-best"]
    (contender,) = compare_best([*records, *second], [baseline])
    assert contender.key == "cv-best" and {(c.folds, c.seeds) for c in contender.comparisons} == {(2, 2)}
    assert "2 seeds" in contender.comparisons[0].text()

    lucky = dataclasses.replace(second[0], f1=0.99)  # seed 43 has fold 0 alone
    (contender,) = compare_best([*records, lucky], [baseline])
    assert contender.key == "cv-best" and {(c.folds, c.seeds) for c in contender.comparisons} == {(2, 1)}


def test_with_several_pretrainings_the_best_of_each_is_compared():
    """From scratch and pretrained are asked apart; the intervals widen for the four read at once."""
    from klue_tc.report.against_baselines import compare_best
    from klue_tc.store.records import Describe

    records, baseline = two_fold_study(np.random.default_rng(0))
    for r in records:  # 'cv-best' pretrained, 'val-best' from scratch
        r.describe = Describe(
            "transformer", "transformer", "post", 2, "cls", "mecab", "mlm" if r.config_hash == "cv-best" else "none"
        )
    contenders = compare_best(records, [baseline, {**baseline, "name": "other"}])
    assert {(c.among, c.key) for c in contenders} == {("pretrained: mlm", "cv-best"), ("from scratch", "val-best")}
    # Per metric, 2 groups x 2 baselines read at once.
    assert [v.confidence for c in contenders for v in c.comparisons] == pytest.approx([1 - 0.05 / 4] * 8)
    scratch = next(c for c in contenders if c.among == "from scratch")
    assert {v.verdict for v in scratch.comparisons if v.metric == "validation_f1"} == {"ahead"}  # all right vs 80 %


def pretrained_from(key: str, seconds: float, include_scored: bool = False) -> dict:
    return {
        "key": key,
        "objective": "mlm",
        "steps": 100,
        "final_loss": 6.0,
        "seconds": seconds,
        "corpus_titles": 900,
        "left_out_scored_titles": 0 if include_scored else 300,
        "include_scored_titles": include_scored,
    }


def test_the_pretrained_encoders_section_says_what_they_read_and_cost():
    """Fold 0 waited for the pretraining (its first step came after it) and names the machine; the
    other folds found the encoder stored. The records are of older code that named neither the
    machine nor the seed of a pretraining: the report's one upgrade step fills both in."""
    from klue_tc.report.loading import upgraded_record
    from klue_tc.report.pretrained import pretraining_section, pretrainings
    from klue_tc.report.replicates import pretraining_seed

    two, four = (Describe("transformer", "transformer", "post", n, "cls", "mecab", "mlm") for n in (2, 4))
    older = [
        record("p2", k, describe=two, pretrained=pretrained_from("e2", 600.0), time_to_first_step_s=(605.0, 1, 1)[k])
        for k in range(3)
    ] + [record("p4", 0, describe=four, pretrained=pretrained_from("e4", 1200.0), time_to_first_step_s=2.0)]
    folds = [upgraded_record(r, run_seed=7) for r in older]
    assert [pretraining_seed(r) for r in folds] == [7] * 4 and pretraining_seed(record("scratch", 0)) is None
    assert folds[0].pretrained["device"] == "CPU A" and "device" not in folds[1].pretrained
    frame = pretrainings([*folds, record("scratch", 0)])
    assert list(frame.index) == ["e2", "e4"] and frame.loc["e2", "machine"] == "CPU A, 1 thread"
    assert pd.isna(frame.loc["e4", "machine"])  # found stored by every fold of its configuration here
    text = "\n".join(pretraining_section(folds).lines)
    assert "2 encoders were pretrained (mlm, 100 steps over 900 unlabelled titles each)" in text
    assert "and 4 fine-tuned folds started from them; none read a scored title: each left out all 300" in text
    assert "Pretraining took 0.5 hours" in text
    assert "| mecab / transformer / post | 10 |" in text  # 600 s on CPU A; the 4-layer one untimed
    leaked = [replace(folds[0], pretrained=pretrained_from("e2", 600.0, include_scored=True))]
    assert "1 of 1 read corpora that include the scored titles" in "\n".join(pretraining_section(leaked).lines)
    held_out = [replace(folds[0], pretrained={**pretrained_from("e2", 600.0), "include_held_out_titles": True})]
    assert "1 of 1 read their folds' held-out training titles as unlabelled text" in "\n".join(
        pretraining_section(held_out).lines
    )
    assert pretraining_section([record("scratch", 0)]).lines == []


def test_the_pretraining_loss_where_it_ended_is_tabled_by_design_and_says_what_it_averages():
    from klue_tc.report.pretrained import pretraining_section

    two, four = (Describe("transformer", "transformer", "post", n, "cls", "mecab", "mlm") for n in (2, 4))
    ended = [
        record(
            key,
            0,
            describe=design,
            pretrained={**pretrained_from(key, 60.0), "final_loss": loss, "final_loss_steps": 50},
        )
        for key, design, loss in (("e2", two, 6.8), ("e4", four, 5.43))
    ]
    text = "\n".join(pretraining_section(ended).lines)
    assert "loss where it ended (the mean over its last 50 steps)" in text
    assert "| mecab / transformer / post | 6.80 | 5.43 |" in text
    older = [ended[0], replace(ended[1], pretrained=pretrained_from("e4", 60.0))]  # no final_loss_steps
    assert "the last step's loss, as the code that made these records kept it" in "\n".join(
        pretraining_section(older).lines
    )
    assert "(frequencies)" not in text and "token frequencies" not in text  # no entropy stored: no claim
    with_entropy = [replace(r, pretrained={**r.pretrained, "token_entropy": 7.1}) for r in ended]
    text = "\n".join(pretraining_section(with_entropy).lines)
    assert "| mecab / transformer / post | 6.80 (frequencies) | 5.43 |" in text  # 6.80 > 7.1 - 0.5
    assert "(7.10–7.10 nats here" in text and "1 of 2 pretrainings that record the entropy ended there" in text


def test_a_pretraining_that_names_its_machine_is_timed_there_whichever_fold_waited():
    """Newer records say what ran the pretraining: that machine, not the waiting fold's, times it,
    and a pretraining no fold waited for is timed too."""
    from klue_tc.report.pretrained import pretrainings

    two = Describe("transformer", "transformer", "post", 2, "cls", "mecab", "mlm")
    ran = {**pretrained_from("e2", 600.0), "device": "CPU B", "threads": 2}
    waited = record("p2", 0, describe=two, pretrained=ran, time_to_first_step_s=605.0)  # trained on CPU A
    stored = record("p2", 1, describe=two, pretrained=ran, time_to_first_step_s=1.0)
    assert pretrainings([waited]).loc["e2", "machine"] == "CPU B, 2 threads"
    assert pretrainings([stored]).loc["e2", "machine"] == "CPU B, 2 threads"


def stall_summary(*checks: tuple[float, float, bool], max_restarts: int = 2) -> dict:
    """The stall rule's record: (lr, loss, restarted) per check, on a 7.82-nat plateau at step 560,
    each attempt 120 seconds in at its check."""
    rule = {"max_restarts": max_restarts, "check_at": 0.5, "margin": 0.5, "lr_factor": 0.5}
    rows = [
        {
            "attempt": i,
            "lr": lr,
            "step": 560,
            "loss": loss,
            "plateau": 7.82,
            "margin": 0.5,
            "restarted": restarted,
            "seconds": 120.0,
        }
        for i, (lr, loss, restarted) in enumerate(checks)
    ]
    restarts = sum(r["restarted"] for r in rows)
    return {"rule": rule, "checks": rows, "restarts": restarts, "lr": 1e-3 * 0.5**restarts}


def table_rows(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header starts with `header`, each a list of its cells."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_stall_rule_s_checks_and_restarts_are_tabled_per_pretraining_and_in_report_csv():
    from klue_tc.report.pretrained import pretraining_section

    two, four = (Describe("trans_blstm", "trans_blstm", "post", n, "cls", "mecab", "mlm") for n in (2, 4))
    left = stall_summary((1e-3, 7.27, False))
    restarted = stall_summary((1e-3, 7.80, True), (5e-4, 7.08, False))
    folds = [
        record("p2", 0, describe=two, pretrained={**pretrained_from("e2", 60.0), "seed": 42, "stall": left}),
        record("p4", 0, describe=four, pretrained={**pretrained_from("e4", 60.0), "seed": 42, "stall": restarted}),
    ]
    section = pretraining_section(folds)
    text = "\n".join(section.lines)
    assert "The stall rule (pretrain.stall, as the pretrainings' records set it)" in text
    assert "before the jobs ran" not in text
    assert "at 0.5 of the step budget" in text and "at most 2 time(s)" in text
    assert "1 of 2 pretrainings that record the check were restarted (the rows marked yes)." in text
    assert "| configuration | layers | seed | restarted | attempt 1 | attempt 2 |" in text
    assert (
        "| mecab / trans_blstm / post | 2 | 42 | no | lr 0.001: 7.27 at step 560, left the plateau: kept | – |" in text
    )
    assert (
        "| mecab / trans_blstm / post | 4 | 42 | yes | lr 0.001: 7.80 at step 560, on the plateau: restarted at lr "
        "0.0005 after its 560 steps, 2 min | lr 0.0005: 7.08 at step 560, left the plateau: kept |"
    ) in text
    assert section.columns.loc["p4"].to_dict() == {"pretrain_restarts": 1, "pretrain_lr": 5e-4}
    assert section.columns.loc["p2"].to_dict() == {"pretrain_restarts": 0, "pretrain_lr": 1e-3}
    off = [
        replace(
            folds[0], pretrained={**folds[0].pretrained, "stall": stall_summary((1e-3, 7.6, False), max_restarts=0)}
        )
    ]
    assert "is off (pretrain.stall.max_restarts=0)" in "\n".join(pretraining_section(off).lines)
    assert "7.60 at step 560, on the plateau: kept" in "\n".join(pretraining_section(off).lines)
    older = [replace(folds[0], pretrained=pretrained_from("e2", 60.0))]  # records of code before the rule
    assert "stall rule" not in "\n".join(pretraining_section(older).lines)
    assert pretraining_section(older).columns.empty


def test_two_seeds_of_one_cell_are_each_a_row_of_the_restart_and_loss_tables():
    """One configuration pretrained with seeds 42 and 43 (one cell of the comparisons), only seed
    43's pretraining restarted, beside an older pretraining that records neither seed nor check:
    the count of restarts is the restart table's rows marked restarted, every seed has its loss,
    and report.csv's row of the cell counts both seeds' restarts."""
    from klue_tc.report.pretrained import pretraining_section

    two, four = (Describe("trans_blstm", "trans_blstm", "post", n, "cls", "mecab", "mlm") for n in (2, 4))
    left = stall_summary((1e-3, 7.20, False))
    restarted = stall_summary((1e-3, 7.80, True), (5e-4, 6.90, False))

    def pretrained(key: str, seed: int, stall: dict, loss: float) -> dict:
        ran = {"device": "CPU A", "threads": 1, "final_loss": loss, "final_loss_steps": 50}
        return {**pretrained_from(key, 60.0), "seed": seed, "stall": stall, **ran}

    folds = [
        *(record("p4", k, describe=four, pretrained=pretrained("e42", 42, left, 6.5)) for k in range(2)),
        *(record("p4s43", k, describe=four, pretrained=pretrained("e43", 43, restarted, 6.9)) for k in range(2)),
        record("p2", 0, describe=two, pretrained={**pretrained_from("e2", 60.0), "final_loss": 6.1}),
    ]
    section = pretraining_section(folds)
    text = "\n".join(section.lines)
    assert "1 of 2 pretrainings that record the check were restarted" in text
    assert "the records of the other 1 hold no check (not recorded)" in text
    stalls = table_rows(text, "| configuration | layers | seed | restarted |")
    assert [row[1:4] for row in stalls] == [["4", "42", "no"], ["4", "43", "yes"]]
    assert sum(row[3].startswith("yes") for row in stalls) == 1  # the count in the sentence
    assert (
        stalls[1][4] == "lr 0.001: 7.80 at step 560, on the plateau: restarted at lr 0.0005 after its 560 steps, 2 min"
    )
    assert stalls[1][5] == "lr 0.0005: 6.90 at step 560, left the plateau: kept"
    losses = table_rows(text, "| configuration | seed | 2 layers | 4 layers |")
    assert [row[1:] for row in losses] == [
        ["42", "–", "6.50 (mean of 50)"],
        ["43", "–", "6.90 (mean of 50)"],
        ["not recorded", "6.10", "–"],
    ]
    assert (
        "| mecab / trans_blstm / post | 42 | 1 |\n| mecab / trans_blstm / post | 43 | 1 |" in text
    )  # minutes per seed
    per_key = section.columns
    assert per_key.loc["p4"].to_dict() == {"pretrain_restarts": 0, "pretrain_lr": 1e-3}
    assert per_key.loc["p4s43"].to_dict() == {"pretrain_restarts": 1, "pretrain_lr": 5e-4}
    cell = pretraining_section(folds, {"p4": "p4", "p4s43": "p4"}).columns  # report.csv's row: the cell
    assert list(cell.index) == ["p4"] and cell.loc["p4", "pretrain_restarts"] == 1
    assert pd.isna(cell.loc["p4", "pretrain_lr"])  # its seeds ended at different rates: the table gives each


def test_the_analyses_read_a_replicated_cell_as_one_configuration_and_skip_a_key_not_read():
    """Per-class F1 and the class mix rank configurations: a cell pretrained with two seeds is one of
    them (its seeds' folds together), and a key the tables do not read (it lost a conflict) is none."""
    from klue_tc.report.replicates import RECORD_KEY, REPLICATE, by_cell

    records = [record(key, fold, 0.7) for key in ("a42", "a43", "loser", "b") for fold in range(2)]
    frame = pd.DataFrame(
        [
            {"config_hash": cell, RECORD_KEY: key, REPLICATE: seed}
            for key, cell, seed in (("a42", "a42", 42.0), ("a43", "a42", 43.0), ("b", "b", np.nan))
        ]
    )
    assert [r.config_hash for r in by_cell(records, frame)] == ["a42", "a42", "a42", "a42", "b", "b"]


def test_the_comparison_at_the_training_class_mix_weighs_each_validation_title_by_its_class():
    """Weights of one are the validation titles as scored; a class mix that weighs only the classes
    the best gets right (and the baseline gets wrong) puts it ahead where it was behind."""
    from klue_tc.report.against_baselines import BEHIND, TRAIN_MIX, compare_best

    records, baseline = two_fold_study(np.random.default_rng(0))
    (plain,) = compare_best(records, [baseline])
    (same,) = compare_best(records, [baseline], class_weights=np.ones(4))
    on = {c.metric: c for c in same.comparisons}
    assert set(on) == {"validation_f1", TRAIN_MIX, "f1"}
    assert (on[TRAIN_MIX].difference, on[TRAIN_MIX].low) == pytest.approx(
        (on["validation_f1"].difference, on["validation_f1"].low)
    )
    assert [c for c in plain.comparisons if c.metric == "validation_f1"] == [on["validation_f1"]]
    assert on["validation_f1"].verdict == BEHIND
    # All the weight on one class's titles: the difference is that of another class mix.
    (skewed,) = compare_best(records, [baseline], class_weights=np.array([1.0, 0.0, 0.0, 0.0]))
    moved = {c.metric: c for c in skewed.comparisons}[TRAIN_MIX]
    assert moved.difference != pytest.approx(on["validation_f1"].difference)


@pytest.mark.integration
def test_a_cell_trained_again_agrees_within_its_folds_noise_and_is_matched_by_what_it_is(tmp_path):
    """Matched by configuration and pretraining seed, not by key (other code keys it otherwise); the
    tolerance is max(0.01, 2 x the reference's fold std); a cell the reference lacks is a line."""
    from klue_tc.report.cli import main
    from klue_tc.report.recheck import recheck
    from klue_tc.store.results import ResultsStore

    committed = [record("old-key", k, f1) for k, f1 in enumerate((0.70, 0.74, 0.72))]  # std 0.02: tolerance 0.04
    close = [record("new-key", 0, 0.73), record("new-key", 1, 0.77)]  # +0.03 on folds 0 and 1
    (agreement,) = [a for a in recheck(close, committed)[0] if a.metric == "f1"]
    assert agreement.folds == (0, 1) and agreement.agrees
    assert agreement.difference == pytest.approx(0.03) and agreement.tolerance == pytest.approx(0.04)
    far = [record("new-key", 0, 0.65)]
    assert not [a for a in recheck(far, committed)[0] if a.metric == "f1"][0].agrees
    other = Describe("transformer", "transformer", "pre", 2, "cls", "mecab")
    agreements, unmatched = recheck([record("x", 0, describe=other)], committed)
    assert agreements == [] and unmatched == [
        "mecab / transformer / pre / cls / L2 / none: no record of its folds [0] in the reference"
    ]

    # The command: DIR/recheck.md, exit 1 where a cell differs.
    for name, records in (("rerun", far), ("reference", committed)):
        store = ResultsStore(tmp_path / name / "results")
        for r in records:
            store.put(r.config_hash, r.fold, r)
    assert main([str(tmp_path / "rerun"), "--against", str(tmp_path / "reference")]) == 1
    assert "| **no** |" in (tmp_path / "rerun" / "recheck.md").read_text(encoding="utf-8")


def test_the_report_places_the_ensemble_stage_s_numbers_and_weights(tmp_path):
    """Where the ensemble stage wrote ensemble.csv beside the records, report.md has its score and
    gains at both class mixes, and report.csv each configuration's weight; without it, one line."""
    from klue_tc.report.ensemble_summary import ensemble_section

    assert ensemble_section(tmp_path).absent.startswith("the ensemble: no ensemble.csv here")
    pd.DataFrame(
        [
            {"role": "candidate", "name": "a", "kind": "neural", "key": "k1", "weight": 0.6},
            {"role": "candidate", "name": "b", "kind": "neural", "key": "k2", "weight": 0.0},
            {"role": "candidate", "name": "NB-SVM", "kind": "linear", "key": "nb-svm", "weight": 0.4},
            {"role": "ensemble", "name": "ensemble", "validation_f1": 0.81, "validation_f1_low": 0.8,
             "validation_f1_high": 0.82},
            {"role": "comparison", "versus": "NB-SVM", "difference": 0.05, "difference_low": 0.04,
             "difference_high": 0.06, "class_mix": "validation"},
            {"role": "comparison", "versus": "NB-SVM", "difference": 0.02, "difference_low": 0.01,
             "difference_high": 0.03, "class_mix": "training"},
        ]
    ).to_csv(tmp_path / "ensemble.csv", index=False)  # fmt: skip
    found = ensemble_section(tmp_path)
    text = "\n".join(found.lines)
    assert "**0.8100** (0.8000..0.8200), 2 members chosen: a 0.60, NB-SVM 0.40." in text
    assert "| NB-SVM | +0.050 (+0.040..+0.060) | +0.020 (+0.010..+0.030) |" in text
    assert found.columns["ensemble_weight"].to_dict() == {"k1": 0.6, "k2": 0.0}
    assert found.verdict.endswith("0.8100 on the validation titles, +0.050 over NB-SVM (The ensemble below)")
