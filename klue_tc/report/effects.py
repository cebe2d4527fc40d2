"""Paired study statistics: each factor level's effect against a reference, and who is within noise of the best.

Every comparison is paired. A *matched set* (a cell) fixes every other factor; within it the two
levels are compared fold by fold, because fold k is the same title split for every configuration
(and, for validation F1, fold k's models saw the same training titles). The head is no matching
key: it goes with the encoder. A cell's difference is the mean of its fold differences, the
effect is the mean over cells, and its interval comes from a cluster bootstrap that resamples
whole cells (with their folds), so folds of one cell never count as independent evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

FACTORS = ("encoder", "ln", "layers", "tokenizer")
REFERENCES = {"encoder": "transformer", "ln": "post", "layers": 2, "tokenizer": "sentencepiece"}
CONFIDENCE = 0.95
# What a difference from a single matched cell says instead of an interval: there is no spread to use.
NO_INTERVAL = "one cell, no interval"
EFFECT_COLUMNS = ["metric", "factor", "level", "reference", "difference", "low", "high", "cells", "pairs", "method"]


def bootstrap_method(resamples: int) -> str:
    return f"paired bootstrap over cells ({CONFIDENCE * 100:.0f} % expanded percentile, {resamples} resamples)"


@dataclass(frozen=True)
class Effect:
    """One paired comparison: mean over cells and its interval (NaN when fewer than 2 cells)."""

    label: str
    difference: float = math.nan
    low: float = math.nan
    high: float = math.nan
    cells: int = 0
    pairs: int = 0
    confidence: float = CONFIDENCE

    def text(self) -> str:
        if not self.cells:
            return f"{self.label}: no matched pairs"
        if math.isnan(self.low):
            return f"{self.label}: {self.difference:.4f} ({NO_INTERVAL})"
        return (
            f"{self.label}: {self.difference:.4f} ({self.confidence * 100:.4g} % {self.low:.4f}..{self.high:.4f}, "
            f"{self.cells} cells)"
        )


def bootstrap_cells(
    pair_values: pd.Series,
    within: Sequence[str],
    label: str,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Effect:
    """Mean over cells of a per-(cell, fold) statistic, with a bootstrap interval that resamples cells.

    `pair_values` is indexed by (*within, "fold"). With no matching key the folds are the only clusters.
    """
    pair_values = pair_values.dropna()
    if pair_values.empty:
        return Effect(label, confidence=confidence)
    cells = pair_values.groupby(level=list(within)).mean() if within else pair_values
    values = cells.to_numpy(dtype=float)
    low = high = math.nan
    if len(values) >= 2:
        n = len(values)
        # Hesterberg's expanded percentile: the plain one runs narrow on few cells (87 % at 6 cells).
        level = 1 - 2 * stats.norm.cdf(-math.sqrt(n / (n - 1)) * stats.t.ppf(0.5 + confidence / 2, n - 1))
        # A fresh generator per comparison keeps each interval independent of the order of calls.
        result = stats.bootstrap(
            (values,),
            np.mean,
            n_resamples=resamples,
            confidence_level=level,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return Effect(label, float(values.mean()), low, high, len(values), len(pair_values), confidence)


def paired_difference(
    folds: pd.DataFrame,
    metric: str,
    factor: str,
    level,
    reference,
    within: Sequence[str],
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Effect:
    """`level` minus `reference` of `factor`, paired within the same `within` values and the same fold."""
    label = f"{level} − {reference}"
    if metric not in folds or factor not in folds:
        return Effect(label, confidence=confidence)
    scored = folds.dropna(subset=[metric])
    # Rows that share a (cell, fold, level) (two heads of one encoder, say) are averaged first.
    by_level = scored.groupby([*within, "fold", factor])[metric].mean().unstack(factor)
    if level not in by_level or reference not in by_level:
        return Effect(label, confidence=confidence)
    return bootstrap_cells(by_level[level] - by_level[reference], within, label, resamples, seed, confidence)


def matching_keys(folds: pd.DataFrame, factor: str, factors: Sequence[str] = FACTORS) -> list[str]:
    """The other factors present in the records: together they name a matched set."""
    return [other for other in factors if other != factor and other in folds]


def marginal_effects(
    folds: pd.DataFrame,
    metric: str = "f1",
    factors: Sequence[str] = FACTORS,
    references: Mapping[str, object] = REFERENCES,
    resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (factor, non-reference level): its paired difference against the reference level.

    A level that shares no (cell, fold) with the reference is left out (no row), as is a factor
    whose reference level is absent from the records.
    """
    rows = []
    for factor in [f for f in factors if f in folds]:
        reference = references[factor]
        levels = sorted(folds[factor].dropna().unique())
        if reference not in levels:
            continue
        within = matching_keys(folds, factor, factors)
        for level in [lvl for lvl in levels if lvl != reference]:
            effect = paired_difference(folds, metric, factor, level, reference, within, resamples, seed)
            if effect.cells:
                rows.append(
                    {
                        "metric": metric,
                        "factor": factor,
                        "level": level,
                        "reference": reference,
                        "difference": effect.difference,
                        "low": effect.low,
                        "high": effect.high,
                        "cells": effect.cells,
                        "pairs": effect.pairs,
                        "method": bootstrap_method(resamples),
                    }
                )
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


def within_noise_of_best(folds: pd.DataFrame, metric: str = "f1") -> pd.DataFrame:
    """Per configuration (indexed by config_hash): its paired difference to the best one over shared folds.

    The best is the configuration with the highest mean. The interval is a 95 % paired t interval over
    the shared folds; `within_noise` is True when it includes 0 (and for the best itself). With fewer
    than 2 shared folds there is no estimate of the paired spread, so `within_noise` is <NA> (unknown),
    never a guess; the column is pandas' nullable boolean.
    """
    scored = folds.dropna(subset=[metric])
    by_fold = scored.groupby(["config_hash", "fold"])[metric].mean().unstack("fold")
    means = by_fold.mean(axis=1)
    best = means.idxmax()
    described = [c for c in ["tokenizer", "encoder", "ln", "head", "layers"] if c in scored]
    rows = {}
    for config, row in by_fold.iterrows():
        differences = (row - by_fold.loc[best]).dropna()
        n = len(differences)
        low = high = math.nan
        if n >= 2:
            half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * differences.std(ddof=1) / math.sqrt(n)
            low, high = differences.mean() - half, differences.mean() + half
        within = True if config == best else (pd.NA if n < 2 else bool(low <= 0 <= high))
        rows[config] = {
            "mean": means[config],
            "difference": differences.mean() if n else math.nan,
            "low": low,
            "high": high,
            "shared_folds": n,
            "is_best": config == best,
            "within_noise": within,
        }
    result = pd.DataFrame.from_dict(rows, orient="index").astype({"within_noise": "boolean"})
    result.index.name = "config_hash"
    if described:
        result = scored.groupby("config_hash")[described].first().join(result, how="right")
    return result.sort_values("mean", ascending=False)
