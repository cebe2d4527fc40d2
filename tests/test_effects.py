"""Marginal effects read from the grid model, on synthetic fold records with a planted answer."""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from klue_tc.report.effects import marginal_effects

HEADS = {"transformer": "cls", "trans_blstm": "blstm", "trans_blstm_parallel": "blstm", "cnn": "cls"}
TOKENIZERS = ("sentencepiece", "mecab", "kobert")


def synthetic_folds(
    planted: Callable[[str, str, int, str], float] = lambda *_: 0.0,
    noise: float = 0.005,
    folds: int = 3,
    seed: int = 0,
    metric: str = "f1",
) -> pd.DataFrame:
    """The full grid: 0.7 + a shift per fold (one split is harder for everyone) + the planted effect + noise."""
    rng = np.random.default_rng(seed)
    fold_shift = rng.normal(0, 0.03, folds)
    rows = []
    for encoder, ln, layers, tokenizer in itertools.product(HEADS, ("post", "pre"), range(2, 7), TOKENIZERS):
        for fold in range(folds):
            rows.append(
                {
                    "config_hash": f"{encoder}-{ln}-{layers}-{tokenizer}",
                    "tokenizer": tokenizer,
                    "encoder": encoder,
                    "ln": ln,
                    "head": HEADS[encoder],
                    "layers": layers,
                    "pretrain": "none",  # as the report's loading gives every record (from scratch)
                    "fold": fold,
                    metric: 0.7 + fold_shift[fold] + planted(encoder, ln, layers, tokenizer) + rng.normal(0, noise),
                }
            )
    return pd.DataFrame(rows)


def cnn_lower(encoder, ln, layers, tokenizer):
    return -0.03 if encoder == "cnn" else 0.0


def effect(effects: pd.DataFrame, factor: str, level) -> pd.Series:
    rows = effects[(effects.factor == factor) & (effects.level == level)]
    assert len(rows) == 1, f"{factor}={level}: {len(rows)} rows"
    return rows.iloc[0]


def test_a_planted_encoder_effect_is_found_with_its_sign_and_an_interval_off_zero():
    effects = marginal_effects(synthetic_folds(cnn_lower))
    cnn = effect(effects, "encoder", "cnn")
    assert cnn.difference == pytest.approx(-0.03, abs=0.003)
    assert cnn.low < cnn.difference < cnn.high < 0
    # 2 ln x 5 layers x 3 tokenizers matched sets; 60 cells of 3 folds
    assert (cnn.reference, cnn.cells, cnn.pairs) == ("transformer", 30, 180)
    assert "grid model" in cnn.method
    others = effects[effects.level != "cnn"]
    assert (others.difference.abs() < 0.003).all(), others  # the planted effect leaks into no other factor


def test_pure_noise_gives_intervals_that_mostly_cover_zero():
    effects = marginal_effects(synthetic_folds(noise=0.02, seed=3))
    assert len(effects) == 3 + 1 + 4 + 2  # every non-reference level of every factor
    assert ((effects.low < 0) & (effects.high > 0)).sum() >= 9, effects  # 95 % each: one miss in ten at most


def test_a_partial_grid_and_another_metric_column_work():
    folds = synthetic_folds(cnn_lower, metric="validation_f1")
    missing = (folds.encoder == "cnn") & (folds.ln == "pre") & (folds.layers == 6) & (folds.tokenizer == "mecab")
    folds = folds[~missing]
    folds.loc[folds.index[:5], "validation_f1"] = np.nan  # a fold or two not scored
    effects = marginal_effects(folds, metric="validation_f1")
    cnn = effect(effects, "encoder", "cnn")
    # The unscored rows take away the transformer's (post, 2, sentencepiece) cell whole and 2 folds of
    # another, which the model still uses: 28 matched sets of 56 cells, one with a single fold.
    assert (cnn.cells, cnn.pairs) == (28, 56 * 3 - 2)
    assert cnn.high < 0 and cnn.metric == "validation_f1"


def test_a_level_without_a_matched_pair_is_left_out():
    folds = synthetic_folds()
    folds = folds[~((folds.encoder == "transformer") & (folds.layers == 6))]
    lonely = folds[(folds.encoder == "cnn") & (folds.layers == 6)].assign(encoder="lonely")
    effects = marginal_effects(pd.concat([folds, lonely.assign(config_hash="lonely-" + lonely.config_hash)]))
    assert "lonely" not in set(effects.level)
    assert effect(effects, "encoder", "cnn").cells == 24  # layers 6 has no transformer to pair with
