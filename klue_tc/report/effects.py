"""Each factor level's effect against a reference level, read from the grid model.

A *matched set* fixes every other factor (the head goes with the encoder); the effect is the mean
over matched sets of the two levels' cell means, a linear contrast of the grid model
(klue_tc.report.grid_model), so its interval uses the fold noise pooled over the whole grid with
the fold as a blocking factor (fold k is the same title split for every configuration).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from klue_tc.report.grid_model import CONFIDENCE, FACTORS, METHOD, Contrast, Grid
from klue_tc.report.title_bootstrap import TitleBootstrap, for_metric

REFERENCES = {"encoder": "transformer", "ln": "post", "layers": 2, "tokenizer": "sentencepiece", "pretrain": "none"}
EFFECT_COLUMNS = [
    "metric",
    "factor",
    "level",
    "reference",
    "difference",
    "low",
    "high",
    "cells",
    "pairs",
    "method",
    "titles_low",  # where titles were kept (CV F1: with replicated seeds only): the crossed bootstrap's
    "titles_high",
]
Effect = Contrast  # one comparison with its interval, as claims and the plots read it

__all__ = [
    "CONFIDENCE",
    "EFFECT_COLUMNS",
    "Effect",
    "FACTORS",
    "REFERENCES",
    "effect_method",
    "marginal_effects",
    "title_interval",
]


def effect_method(grid: Grid, confidence: float = CONFIDENCE) -> str:
    df = grid.fit.df if grid.fit is not None else 0
    return f"{METHOD}, {confidence * 100:.4g} %, {df} residual df"


def title_interval(titles: TitleBootstrap | None, contrast: Contrast) -> tuple[float, float]:
    """The contrast's crossed-bootstrap interval at its own confidence (NaN without the titles)."""
    if titles is None:
        return math.nan, math.nan
    return titles.interval(contrast.weights, contrast.confidence)


def marginal_effects(
    folds: pd.DataFrame,
    metric: str = "f1",
    factors: Sequence[str] = FACTORS,
    references: Mapping[str, object] = REFERENCES,
    grid: Grid | None = None,
    titles: TitleBootstrap | Mapping[str, TitleBootstrap] | None = None,
) -> pd.DataFrame:
    """One row per (factor, non-reference level): its difference against the reference level.

    A level that shares no matched set with the reference is left out (no row), as is a factor
    whose reference level is absent from the records. `titles`: the same contrasts re-read by the
    crossed bootstrap over (seeds,) folds and titles: one for validation F1, or one per metric.
    """
    grid = grid or Grid(folds, metric)
    titles = for_metric(titles, metric)
    rows = []
    for factor in [f for f in factors if f in grid.cells]:
        reference = references[factor]
        levels = grid.levels(factor)
        if reference not in levels:
            continue
        for level in [lvl for lvl in levels if lvl != reference]:
            effect = grid.difference(factor, level, reference)
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
                        "method": effect_method(grid),
                        **dict(zip(("titles_low", "titles_high"), title_interval(titles, effect))),
                    }
                )
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)
