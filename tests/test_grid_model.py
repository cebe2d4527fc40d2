"""The grid model against the textbook two-way analysis, its ties with the best, the interactions'
signs on planted data, and the crossed bootstrap over folds and titles."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import f1_score
from test_effects import HEADS, TOKENIZERS, synthetic_folds

from klue_tc.report.grid_model import Grid, fit_grid
from klue_tc.report.interactions import INTERACTION, interactions, verdicts
from klue_tc.report.title_bootstrap import TitleBootstrap, macro_f1

# A hand-made balanced grid: 3 configurations x 4 folds (rows: cells, columns: folds).
TABLE = np.array(
    [
        [0.70, 0.74, 0.69, 0.73],
        [0.72, 0.75, 0.70, 0.76],
        [0.66, 0.71, 0.65, 0.69],
    ]
)


def table_folds(table: np.ndarray = TABLE) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"config_hash": f"c{c}", "encoder": "transformer", "ln": "post", "layers": 2 + c, "fold": f, "f1": value}
            for (c, f), value in np.ndenumerate(table)
        ]
    )


def test_the_fit_is_the_textbook_two_way_analysis_without_interaction():
    fit = fit_grid(table_folds())
    cells, folds = TABLE.shape
    # Residuals of the additive model: y - row mean - column mean + grand mean, on (C-1)(F-1) df.
    residual = TABLE - TABLE.mean(1, keepdims=True) - TABLE.mean(0, keepdims=True) + TABLE.mean()
    df = (cells - 1) * (folds - 1)
    sigma2 = (residual**2).sum() / df
    assert fit.df == df
    assert fit.sigma**2 == pytest.approx(sigma2)
    assert fit.means.to_numpy() == pytest.approx(TABLE.mean(1))  # balanced: the plain fold means
    # A cell mean's interval: its mean ± t(df) * sqrt(sigma² / folds).
    intervals = fit.intervals()
    half = stats.t.ppf(0.975, df) * np.sqrt(sigma2 / folds)
    assert intervals["high"].to_numpy() - intervals["mean"].to_numpy() == pytest.approx(np.full(cells, half))
    # A difference of two cells: ± t(df) * sqrt(2 sigma² / folds), the paired comparison with a pooled variance.
    contrast = fit.contrast(pd.Series({"c1": 1.0, "c0": -1.0}), "c1 − c0", sets=1)
    assert contrast.difference == pytest.approx(TABLE[1].mean() - TABLE[0].mean())
    assert contrast.high - contrast.difference == pytest.approx(stats.t.ppf(0.975, df) * np.sqrt(2 * sigma2 / folds))


def test_a_missing_fold_is_filled_by_the_fold_effect_as_least_squares_wants():
    folds = table_folds().query("not (config_hash == 'c2' and fold == 3)")
    fit = fit_grid(folds)
    # The same least squares in another coding (treatment: a dummy per cell and per fold but the first).
    cell = pd.get_dummies(folds["config_hash"]).to_numpy(float)
    fold = pd.get_dummies(folds["fold"]).to_numpy(float)[:, 1:]
    beta = np.linalg.lstsq(np.hstack([cell, fold]), folds["f1"].to_numpy(), rcond=None)[0]
    # Cell means at the average fold: the cell's coefficient plus the mean fold effect (0 for the first).
    expected = beta[:3] + np.r_[0.0, beta[3:]].mean()
    assert fit.means.to_numpy() == pytest.approx(expected)
    assert fit.df == len(folds) - 3 - 3


def best_grid(leads: dict[str, float], noise: float = 0.003, seed: int = 0) -> pd.DataFrame:
    """Six configurations, the first the best by 0.05 over the plain ones, others `leads` below it."""
    rng = np.random.default_rng(seed)
    shift = rng.normal(0, 0.02, 3)
    rows = []
    for c in range(6):
        name = f"c{c}"
        level = 0.75 if c == 0 else 0.75 - leads.get(name, 0.05)
        rows += [
            {
                "config_hash": name,
                "encoder": "transformer",
                "layers": c,
                "fold": f,
                "f1": level + shift[f] + rng.normal(0, noise),
            }
            for f in range(3)
        ]
    return pd.DataFrame(rows)


def test_a_tiny_lead_is_a_tie_and_a_big_one_is_not():
    ties = Grid(best_grid({"c1": 0.001, "c2": 0.03})).fit.intervals()["tied"]
    assert {ties["c0"], ties["c1"]} == {"best", "yes"}  # 0.001 apart: either may come out on top
    assert ties[["c2", "c3", "c4", "c5"]].eq("no").all()


def test_ties_follow_the_means_in_a_balanced_grid():
    """The old per-cell t-tests could mark a cell 0.026 below the best and not one 0.0025 below:
    with one pooled variance, whatever is tied lies above whatever is not."""
    folds = synthetic_folds(noise=0.01, seed=4)
    intervals = Grid(folds).fit.intervals()
    tied = intervals[intervals["tied"].isin(["yes", "best"])]
    untied = intervals[intervals["tied"] == "no"]
    assert len(tied) > 1 and len(untied) > 1
    assert tied["mean"].min() > untied["mean"].max()


def planted_interactions(encoder, ln, layers, tokenizer):
    """Depth helps under post-LN and hurts under pre-LN; pre-LN costs cnn more than the transformer."""
    slope = 0.004 if ln == "post" else -0.004
    return slope * (layers - 2) + (-0.02 if (encoder, ln) == ("cnn", "pre") else 0.0)


def row(table: pd.DataFrame, comparison: str) -> pd.Series:
    found = table[table.comparison == comparison]
    assert len(found) == 1, f"{comparison}: {list(table.comparison)}"
    return found.iloc[0]


def test_interactions_come_out_with_the_planted_signs():
    table = interactions(synthetic_folds(planted_interactions, noise=0.003))
    post = row(table, "2 → 6 layers (fitted slope), post-LN")
    pre = row(table, "2 → 6 layers (fitted slope), pre-LN")
    assert post.difference == pytest.approx(0.016, abs=0.003) and post.low > 0
    assert pre.difference == pytest.approx(-0.016, abs=0.003) and pre.high < 0
    depth = row(table, "slope under pre − under post")
    assert depth.kind == INTERACTION and depth.high < 0
    cnn = row(table, "(pre − post) cnn − transformer")
    assert cnn.difference == pytest.approx(-0.02, abs=0.003) and cnn.high < 0
    blstm = row(table, "(pre − post) trans_blstm − transformer")
    assert blstm.low < 0 < blstm.high  # nothing planted there
    lines = verdicts(table)
    assert any("LN × layers: depth works differently" in line for line in lines)
    assert any(
        "LN × encoder: pre-LN's effect depends on the encoder: (pre − post) cnn − transformer" in line for line in lines
    )
    assert not any("trans_blstm − transformer" in line.split("(pre − post,")[0] for line in lines)


def test_the_effect_of_pretraining_per_encoder_and_its_interaction():
    bonus = {"transformer": 0.03, "cnn": 0.0}
    rows = []
    rng = np.random.default_rng(1)
    for encoder, ln, layers, pretrain in itertools.product(bonus, ("post", "pre"), (2, 4, 6), ("none", "mlm")):
        for fold in range(3):
            rows.append(
                {
                    "config_hash": f"{encoder}-{ln}-{layers}-{pretrain}",
                    "encoder": encoder,
                    "head": HEADS[encoder],
                    "ln": ln,
                    "layers": layers,
                    "tokenizer": "mecab",
                    "pretrain": pretrain,
                    "fold": fold,
                    "f1": 0.7 + (bonus[encoder] if pretrain == "mlm" else 0.0) + rng.normal(0, 0.003),
                }
            )
    table = interactions(pd.DataFrame(rows))
    transformer = row(table, "mlm − none, transformer")
    assert transformer.difference == pytest.approx(0.03, abs=0.004) and transformer.low > 0
    assert row(table, "mlm − none, cnn").low < 0 < row(table, "mlm − none, cnn").high
    cnn = row(table, "(mlm − none) cnn − transformer")
    assert cnn.high < 0
    assert any("self-pretraining's effect depends on the encoder" in line for line in verdicts(table))


def test_every_interaction_compares_matched_sets_only_and_names_them():
    """Post-LN lacks two deep cells of one set (as where those cells were left out): that set leaves
    every contrast of the LN × layers family, so both slopes average over the same sets, and the
    result is the family of the grid without that set; the report names the sets kept and left out."""
    folds = synthetic_folds(planted_interactions, noise=0.003)
    gap = (folds.encoder == "trans_blstm") & (folds.tokenizer == "mecab") & (folds.ln == "post") & (folds.layers >= 5)
    table = interactions(folds[~gap])
    post = row(table, "2 → 6 layers (fitted slope), post-LN")
    pre = row(table, "2 → 6 layers (fitted slope), pre-LN")
    assert post.cells == pre.cells == row(table, "slope under pre − under post").cells
    assert post.cells == len(HEADS) * len(TOKENIZERS) - 1  # every (encoder, tokenizer) set but the gap's
    assert "left out: trans_blstm / mecab / none (no post 5, post 6)" in post.matched
    assert post.matched.startswith(f"{post.cells} matched set(s) of encoder / tokenizer / pretrain")
    without_the_set = folds[~((folds.encoder == "trans_blstm") & (folds.tokenizer == "mecab"))]
    alone = interactions(without_the_set, grid=None)
    for comparison in ("2 → 6 layers (fitted slope), post-LN", "slope under pre − under post"):
        assert row(table, comparison).difference == pytest.approx(row(alone, comparison).difference)
    # LN × encoder and pretrain × encoder: the (layers, tokenizer) sets where trans_blstm lacks post-LN go too.
    encoder_family = table[table.family == "LN × encoder"]
    assert (
        "left out: 5 / mecab / none (no post trans_blstm), 6 / mecab / none (no post trans_blstm)"
        in (encoder_family.matched.iloc[0])
    )
    assert set(encoder_family.cells) == {len(range(2, 7)) * len(TOKENIZERS) - 2}


def test_no_interaction_is_worded_as_none_shown():
    lines = verdicts(interactions(synthetic_folds(noise=0.003)))
    assert lines and all("no interaction shown" in line for line in lines)


def test_macro_f1_from_counts_matches_scikit_learn():
    rng = np.random.default_rng(2)
    truth, predicted = rng.integers(0, 7, 300), rng.integers(0, 7, 300)
    counts = np.zeros((7, 7))
    np.add.at(counts, (truth, predicted), 1)
    assert macro_f1(counts) == pytest.approx(f1_score(truth, predicted, average="macro"))


def test_the_crossed_bootstrap_centres_on_the_scores_and_separates_a_real_gap():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 7, 800)
    index = np.arange(800)

    def model(wrong: float, seed: int) -> np.ndarray:
        moved = np.random.default_rng(seed).random(800) < wrong
        return np.where(moved, (truth + 1) % 7, truth)

    predictions = {
        (config, fold): (index, truth, model(wrong, 10 * fold + i))
        for i, (config, wrong) in enumerate({"good": 0.2, "bad": 0.35, "twin": 0.2}.items())
        for fold in range(3)
    }
    boot = TitleBootstrap(predictions, resamples=300)
    scored = {
        c: np.mean([f1_score(truth, predictions[(c, f)][2], average="macro") for f in range(3)]) for c in boot.configs
    }
    assert boot.point.to_dict() == pytest.approx(scored)
    cells = boot.cell_intervals()
    assert (cells["low"] < pd.Series(scored)).all() and (pd.Series(scored) < cells["high"]).all()
    low, high = boot.interval(pd.Series({"good": 1.0, "bad": -1.0}))
    assert low > 0.05
    low, high = boot.interval(pd.Series({"good": 1.0, "twin": -1.0}))
    assert low < 0 < high
    assert np.isnan(boot.interval(pd.Series({"good": 1.0, "absent": -1.0}))[0])


def test_the_report_names_the_interactions_found_among_its_verdicts():
    from klue_tc.report.core_sections.verdicts import found_interactions

    planted = interactions(synthetic_folds(planted_interactions, noise=0.003))
    assert found_interactions(planted) == [
        "- interactions whose interval excludes zero: CV macro-F1: LN × encoder, LN × layers (Interactions below)"
    ]
    assert "excludes zero: none" in found_interactions(interactions(synthetic_folds(noise=0.003)))[0]


def test_the_title_bootstrap_reads_the_predicted_classes_a_study_commits(tmp_path):
    from test_selection import some_predictions

    from klue_tc.report.title_bootstrap import validation_predictions
    from klue_tc.store.records import Describe, FoldResult
    from klue_tc.store.results import ResultsStore

    store, rng, kept = ResultsStore(tmp_path / "results"), np.random.default_rng(4), {}
    truth = rng.integers(0, 7, 20)  # every model is scored on the same validation titles
    for config, fold in itertools.product(("a", "b"), range(2)):
        predictions = some_predictions(rng, n=40)
        predictions.validation.label = truth.astype(np.int16)
        kept[(config, fold)] = predictions.validation
        record = FoldResult(
            fold=fold, f1=0.5, accuracy=0.5, best_epoch=1, epochs_run=1, train_samples_per_s=1.0,
            time_to_first_step_s=0.0, train_seconds=1.0, train_size=10, val_size=5, checkpoint=None,
            tokenizer_dir="tokenizer", config_hash=config, predictions=predictions,
            describe=Describe("cnn", "cnn", "post", 2, "cls", "mecab"),
        )  # fmt: skip
        store.put(config, fold, record)
    found = validation_predictions(tmp_path)
    assert sorted(found) == sorted(kept)
    for key, titles in kept.items():
        assert all(np.array_equal(a, b) for a, b in zip(found[key], (titles.index, titles.label, titles.predicted)))
    boot = TitleBootstrap(found, resamples=50)
    assert sorted(boot.configs) == ["a", "b"] and boot.means.shape == (50, 2)
    # A configuration scored against other labels cannot be resampled with the rest.
    found[("c", 0)] = found[("c", 1)] = (found[("a", 0)][0], (truth + 1) % 7, found[("a", 0)][2])
    assert "c" not in TitleBootstrap(found, resamples=10).configs


def seeded_folds(seed_gap: float) -> pd.DataFrame:
    """Two pretrained cells and one from scratch on 3 folds; each pretrained cell has seeds 42 and 43,
    the second seed `seed_gap` above the first in one cell and below it in the other."""
    fold_noise = [0.004, -0.003, -0.001]
    rows = []
    for cell, base, pretrain, gap in (
        ("a", 0.78, "mlm", seed_gap),
        ("b", 0.76, "mlm", -seed_gap),
        ("s", 0.75, "none", 0),
    ):
        seeds = (42, 43) if pretrain == "mlm" else (np.nan,)
        for seed, fold in itertools.product(seeds, range(3)):
            shift = gap if seed == 43 else 0.0
            noise = fold_noise[fold] + 0.001 * ((fold * 7 + len(cell)) % 3 - 1)
            rows.append(
                {
                    "config_hash": cell,
                    "encoder": "transformer",
                    "pretrain": pretrain,
                    "fold": fold,
                    "replicate": seed,
                    "f1": base + shift + noise,
                }
            )
    return pd.DataFrame(rows)


def test_pretraining_seeds_that_disagree_widen_every_interval_that_reads_a_pretrained_cell():
    agreeing, disagreeing = fit_grid(seeded_folds(0.0)), fit_grid(seeded_folds(0.03))
    assert agreeing.seed_df == disagreeing.seed_df == 2  # two replicated cells, two seeds each
    assert agreeing.seed_variance == 0.0  # their spread is the fold noise's
    assert disagreeing.seed_variance == pytest.approx(0.03**2 / 2, rel=0.05)  # each cell's two means: 0.03 apart
    pretraining_effect = pd.Series({"a": 1.0, "s": -1.0})
    narrow = agreeing.contrast(pretraining_effect, "a − s", sets=1)
    wide = disagreeing.contrast(pretraining_effect, "a − s", sets=1)
    assert wide.high - wide.low > 3 * (narrow.high - narrow.low)
    assert wide.df < narrow.df  # the seeds' two degrees of freedom weigh in
    # A cell mean is the mean of its seeds' means.
    table = seeded_folds(0.03)
    assert disagreeing.means["a"] == pytest.approx(table.query("config_hash == 'a'")["f1"].mean())
    # From scratch against from scratch carries no seed term: nothing pretrained is read.
    scratch_only = disagreeing.variance_parts(pd.Series({"s": 1.0}))
    assert scratch_only[1] == 0.0


def test_without_replicated_cells_the_fit_has_no_seed_term():
    single = seeded_folds(0.03).query("replicate != 43")
    fit = fit_grid(single)
    assert (fit.seed_df, fit.seed_variance) == (0, 0.0)
    assert fit.df == fit_grid(single.drop(columns="replicate")).df
