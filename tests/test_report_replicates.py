"""A configuration pretrained with several seeds (pretrain.seed) is one cell of the report: one row,
its mean over its seeds, intervals that resample its seeds, and a line for two keys of one seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report import FOLDS, metrics, write_metrics

from klue_tc.report.summary import CSV_COLUMNS
from klue_tc.report.title_bootstrap import TitleBootstrap
from klue_tc.report.write import write_report
from klue_tc.store.records import FoldPredictions, TitlePredictions

TITLES, CLASSES = 90, 3
LABELS = np.arange(TITLES) % CLASSES


def guesses(right: float, seed: int) -> np.ndarray:
    """Predicted classes: each title right with probability `right`, else the next class."""
    hit = np.random.default_rng(seed).random(TITLES) < right
    return np.where(hit, LABELS, (LABELS + 1) % CLASSES)


def titles(predicted: np.ndarray) -> TitlePredictions:
    return TitlePredictions(np.arange(TITLES, dtype=np.int32), LABELS.astype(np.int16), predicted.astype(np.int16))


def write_cell(sweep: Path, key: str, f1s, right: float, seed: int | None = None, pretrain: str = "mlm") -> None:
    """One configuration's run folder (mecab / transformer / post / 4 layers) with its folds' records
    and validation predictions; `seed`: the pretraining seed its records name (None: older records)."""
    pretrained = {
        "key": f"enc-{key}",
        "objective": pretrain,
        "steps": 100,
        "seconds": 60.0,
        "corpus_titles": 900,
        "left_out_scored_titles": 300,
        "include_scored_titles": False,
        **({"seed": seed} if seed is not None else {}),
    }
    extra = {"pretrained": pretrained} if pretrain != "none" else {}
    payload = metrics("mecab", "transformer", "post", 4, list(enumerate(f1s)), key=key, **extra)
    payload["pretrain"] = pretrain
    if len(f1s) == FOLDS:  # a run of every fold scores its ensemble (here a stand-in: its mean fold F1 - 0.2)
        payload |= {"validation_f1": sum(f1s) / len(f1s) - 0.2, "validation_accuracy": 0.5}
    write_metrics(sweep / key, payload)
    for fold in range(len(f1s)):
        scored = titles(guesses(right, 100 + fold))  # the scored fold's titles: not resampled here
        FoldPredictions(scored, titles(guesses(right, sum(map(ord, key)) + fold))).save(
            sweep / key / f"fold{fold}.predicted.npz", with_probs=False
        )


def report(sweep: Path) -> tuple[pd.DataFrame, str, pd.DataFrame, pd.DataFrame]:
    write_report(sweep, baseline=False)
    return (
        pd.read_csv(sweep / "report.csv"),
        (sweep / "report.md").read_text(encoding="utf-8"),
        pd.read_csv(sweep / "effects.csv"),
        pd.read_csv(sweep / "interactions.csv"),
    )


@pytest.mark.integration
def test_two_pretraining_seeds_are_one_row_with_the_mean_of_their_fold_means(tmp_path: Path):
    sweep = tmp_path / "sweep"
    write_cell(sweep, "scratch", [0.60, 0.62, 0.61], 0.6, pretrain="none")
    write_cell(sweep, "seed42", [0.70, 0.72, 0.71], 0.8)  # an older record: its seed is the run's (42)
    write_cell(sweep, "seed43", [0.64, 0.66], 0.7, seed=43)  # one fold short: each seed weighs alike
    csv, markdown, effects, interactions = report(sweep)
    assert len(csv) == 2
    pretrained = csv[csv["pretrain"] == "mlm"].iloc[0]
    assert pretrained["config_hash"] == "seed42"  # the cell is named by its lowest seed's key
    assert pretrained["seeds"] == 2 and pretrained["folds"] == FOLDS
    assert pretrained["f1_mean"] == pytest.approx((0.71 + 0.65) / 2)  # not the mean of its 5 folds (0.686)
    assert list(csv.columns[: csv.columns.get_loc("seeds") + 1])[-2:] == ["folds", "seeds"]
    assert pretrained["validation_ensemble_f1"] == pytest.approx(0.71 - 0.2)  # seed 43, a fold short, has none
    assert "(2 seeds)" in markdown.split("## CV macro-F1")[1].split("\n## ")[0]
    # The seed-to-seed spread, and the method, in a section of their own.
    seeds = markdown.split("## Pretraining seeds")[1].split("\n## ")[0]
    assert "| mecab / transformer / post / L4 / mlm | 2 | 42: 0.7100, 43: 0.6500 | 0.0600 |" in seeds
    assert "draw its seeds with replacement first, then the folds, then the titles" in seeds
    # Its contrasts' intervals resample the seeds: CV F1's over each fold's held-out titles too.
    pretraining = effects[effects["factor"] == "pretrain"].set_index("metric")
    assert pretraining[["titles_low", "titles_high"]].notna().all().all()
    assert "CV intervals marked 'titles'" in markdown and "; titles " in markdown.split("## Marginal effects")[1]
    # The per-encoder pretraining effect says how many seeds back it.
    per_encoder = interactions[interactions["family"] == "pretrain × encoder"]
    assert per_encoder["comparison"].str.endswith("(2 seeds at 4 layers)").all()
    assert "(vii) Does self-pretraining (mlm) help (all encoders; mlm − none; 2 seeds at 4 layers)?" in (
        sweep / "claims.md"
    ).read_text(encoding="utf-8")


def bootstrap(cells: dict[str, np.ndarray], replicates=None, own_titles: bool = False) -> TitleBootstrap:
    """`own_titles`: each fold scored on titles of its own (CV F1), else all on the same (validation)."""
    predictions = {
        (key, fold): (np.arange(TITLES) + (fold * TITLES if own_titles else 0), LABELS, right[fold])
        for key, right in cells.items()
        for fold in range(FOLDS)
    }
    return TitleBootstrap(predictions, resamples=400, replicates=replicates)


def folds_of(right: float, seed: int) -> list[np.ndarray]:
    return [guesses(right, seed + fold) for fold in range(FOLDS)]


@pytest.mark.parametrize("own_titles", [False, True], ids=["validation titles", "each fold's own titles"])
def test_the_interval_widens_where_two_seeds_disagree_and_not_where_they_agree(own_titles: bool):
    scratch, first = folds_of(0.6, 0), folds_of(0.8, 10)
    weights, seeds = pd.Series({"p": 1.0, "s": -1.0}), {"p": ("p", 42), "p43": ("p", 43)}
    one = bootstrap({"s": scratch, "p": first}, own_titles=own_titles)
    agree = bootstrap({"s": scratch, "p": first, "p43": first}, seeds, own_titles)
    disagree = bootstrap({"s": scratch, "p": first, "p43": folds_of(0.5, 20)}, seeds, own_titles)
    assert list(agree.means.columns) == ["s", "p"]  # one cell, not two
    low, high = one.interval(weights)
    assert agree.interval(weights) == pytest.approx((low, high), abs=1e-12)
    wide_low, wide_high = disagree.interval(weights)
    assert wide_high - wide_low > 1.5 * (high - low)
    # Its point is the mean of the two seeds'.
    alone = bootstrap({"p": folds_of(0.5, 20)}, own_titles=own_titles).point["p"]
    assert disagree.point["p"] == pytest.approx((one.point["p"] + alone) / 2)


@pytest.mark.integration
def test_two_keys_of_one_configuration_and_one_seed_are_a_line_naming_both(tmp_path: Path, caplog):
    sweep = tmp_path / "sweep"
    write_cell(sweep, "scratch", [0.60, 0.62, 0.61], 0.6, pretrain="none")
    write_cell(sweep, "old42", [0.30, 0.32, 0.31], 0.4)  # seed 42 as the run's seed
    write_cell(sweep, "new42", [0.70, 0.72, 0.71], 0.8, seed=42)  # seed 42 named: the same pretraining
    write_cell(sweep, "new43", [0.66, 0.68, 0.67], 0.8, seed=43)
    csv, markdown, _, _ = report(sweep)
    line = (
        "mecab / transformer / post / L4 / mlm, pretraining seed 42: keys new42 and old42 are one configuration "
        "pretrained alike; the report reads new42 (most folds, then first by key) and leaves the other out"
    )
    assert f"- {line}" in markdown
    assert line in caplog.text
    pretrained = csv[csv["pretrain"] == "mlm"].iloc[0]
    assert pretrained["seeds"] == 2 and pretrained["f1_mean"] == pytest.approx((0.71 + 0.67) / 2)
    assert pretrained["validation_ensemble_f1"] == pytest.approx((0.51 + 0.47) / 2)  # the seeds' ensembles' mean


@pytest.mark.integration
def test_a_store_without_replicates_reports_as_before(tmp_path: Path):
    sweep = tmp_path / "older" / "sweep"
    write_cell(sweep, "scratch", [0.60, 0.62, 0.61], 0.6, pretrain="none")
    write_cell(sweep, "seed42", [0.70, 0.72, 0.71], 0.8)
    csv, markdown, _, interactions = report(sweep)
    assert list(csv.columns) == CSV_COLUMNS
    assert "seed" not in markdown and "seeds" not in "".join(interactions["comparison"])
    # The same records naming their seed, as newer code writes them: the same report, byte for byte.
    named = tmp_path / "newer" / "sweep"
    write_cell(named, "scratch", [0.60, 0.62, 0.61], 0.6, pretrain="none")
    write_cell(named, "seed42", [0.70, 0.72, 0.71], 0.8, seed=42)
    report(named)
    for name in ("report.md", "report.csv", "effects.csv", "interactions.csv", "claims.md"):
        older = (sweep / name).read_text(encoding="utf-8").replace(str(sweep), "DIR")
        assert (named / name).read_text(encoding="utf-8").replace(str(named), "DIR") == older
    # Without replicates, the bootstrap draws exactly what it drew before seeds were resampled.
    cells, weights = {"s": folds_of(0.6, 0), "p": folds_of(0.8, 10)}, pd.Series({"p": 1.0, "s": -1.0})
    assert bootstrap(cells).interval(weights) == bootstrap(cells, {"p": ("p", 42)}).interval(weights)
