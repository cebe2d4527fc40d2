"""Interactions, read from the grid model: whether one factor's effect depends on another.

Three families: LN x layers (the fitted change from the fewest to the most layers under post- and
under pre-LN, their difference, and pre − post at each end), LN x encoder (pre − post per encoder
and each encoder's against the reference encoder's) and pretrain x encoder (the effect of
self-pretraining per encoder, likewise). Each family compares matched sets only: the sets of cells
alike in every other factor that hold a cell at every level of both of its factors
(klue_tc.report.grid_model.matched_sets), so both sides of every difference average over the same
sets; the report names the sets kept and those left out. Every number is a contrast of the grid
model, with its intervals as the report's other effects have them (the fold noise pooled over the
whole grid; on the validation titles also the crossed bootstrap over folds and titles); the
intervals of a family are read at once, so each is at Bonferroni's 1 - 0.05 / (family size). A
verdict is worded for each difference of differences whose interval excludes zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

import pandas as pd

from klue_tc.report.claims import METRIC_TITLES
from klue_tc.report.effects import REFERENCES, title_interval
from klue_tc.report.grid_model import CONFIDENCE, Contrast, Grid, MatchedSets, family_confidence, matched_sets
from klue_tc.report.replicates import backing
from klue_tc.report.title_bootstrap import TitleBootstrap, for_metric
from klue_tc.store.records import FROM_SCRATCH

INTERACTION_COLUMNS = [
    "metric",
    "family",
    "comparison",
    "kind",
    "difference",
    "low",
    "high",
    "cells",
    "confidence",
    "titles_low",
    "titles_high",
    "matched",  # the family's matched sets, kept and left out (MatchedSets.text)
    "exclusion",  # "declared": computed under the declared exclusion rules; "none": on every configuration
]
SIMPLE, INTERACTION = "simple effect", "interaction"


LN_BY_LAYERS, LN_BY_ENCODER, PRETRAIN_BY_ENCODER = "LN × layers", "LN × encoder", "pretrain × encoder"
FAMILY_FACTORS = {
    LN_BY_LAYERS: ("ln", "layers"),
    LN_BY_ENCODER: ("ln", "encoder"),
    PRETRAIN_BY_ENCODER: ("pretrain", "encoder"),
}


@dataclass(frozen=True)
class Row:
    family: str
    kind: str  # SIMPLE or INTERACTION
    contrast: Contrast
    matched: Optional[MatchedSets] = None


def _family(name: str, planned: list[tuple[str, Callable[[float], Contrast]]], sets: MatchedSets) -> list[Row]:
    """Each planned (kind, contrast at a confidence) evaluated at the family's Bonferroni level."""
    confidence = family_confidence(len(planned), CONFIDENCE)
    rows = [Row(name, kind, make(confidence), sets) for kind, make in planned]
    return [r for r in rows if r.contrast.cells]


def on_matched_sets(grid: Grid, factor: str, levels: list, by: str) -> tuple[Grid, MatchedSets]:
    """The grid with only the cells of the sets that hold every (`factor` at `levels`, `by`) pair."""
    sets = matched_sets(grid.cells, factor, levels, by)
    return grid.restricted(sets.cells), sets


def ln_by_layers(grid: Grid) -> list[Row]:
    if not {"post", "pre"} <= set(grid.levels("ln")) or len(grid.levels("layers")) < 2:
        return []
    grid, sets = on_matched_sets(grid, "ln", ["post", "pre"], "layers")
    if len(grid.levels("layers")) < 2:
        return []
    low, high = min(grid.levels("layers")), max(grid.levels("layers"))
    planned = [
        (SIMPLE, lambda c, ln=ln: grid.slope(c, f"{low} → {high} layers (fitted slope), {ln}-LN", ln=ln))
        for ln in ("post", "pre")
    ]
    planned.append(
        (
            INTERACTION,
            lambda c: _relabel(grid.slope_interaction("ln", "pre", "post", c), "slope under pre − under post"),
        )
    )
    planned += [
        (SIMPLE, lambda c, n=n: grid.difference("ln", "pre", "post", c, f"pre − post at {n} layers", layers=n))
        for n in (low, high)
    ]
    return _family(LN_BY_LAYERS, planned, sets)


def by_encoder(grid: Grid, factor: str, level, reference, family: str) -> list[Row]:
    """`level` − `reference` of `factor` per encoder, and each encoder's against the reference encoder's."""
    if not {level, reference} <= set(grid.levels(factor)):
        return []
    grid, sets = on_matched_sets(grid, factor, [level, reference], "encoder")
    encoders = [e for e in grid.levels("encoder") if grid.difference(factor, level, reference, encoder=e).cells]
    anchor = REFERENCES["encoder"] if REFERENCES["encoder"] in encoders else (encoders[0] if encoders else None)
    planned = [
        (SIMPLE, lambda c, e=e: grid.difference(factor, level, reference, c, f"{level} − {reference}, {e}", encoder=e))
        for e in encoders
    ]
    planned += [
        (
            INTERACTION,
            lambda c, e=e: grid.interaction(
                factor, level, reference, "encoder", e, anchor, c, f"({level} − {reference}) {e} − {anchor}"
            ),
        )
        for e in encoders
        if e != anchor
    ]
    return _family(family, planned, sets)


def _relabel(contrast: Contrast, label: str) -> Contrast:
    return replace(contrast, label=label)


def interaction_rows(grid: Grid) -> list[Row]:
    return [
        *ln_by_layers(grid),
        *by_encoder(grid, "ln", "pre", "post", LN_BY_ENCODER),
        *[
            row
            for objective in grid.levels("pretrain")
            if objective != FROM_SCRATCH
            for row in by_encoder(grid, "pretrain", objective, FROM_SCRATCH, PRETRAIN_BY_ENCODER)
        ],
    ]


def interactions(
    folds: pd.DataFrame,
    metric: str = "f1",
    grid: Optional[Grid] = None,
    titles: TitleBootstrap | Mapping[str, TitleBootstrap] | None = None,
) -> pd.DataFrame:
    """Every family's contrasts as rows (INTERACTION_COLUMNS); `titles` as in marginal_effects."""
    grid = grid or Grid(folds, metric)
    titles = for_metric(titles, metric)
    rows = [
        {
            "metric": metric,
            "family": r.family,
            "comparison": r.contrast.label + seeds_part(r, grid),
            "kind": r.kind,
            "difference": r.contrast.difference,
            "low": r.contrast.low,
            "high": r.contrast.high,
            "cells": r.contrast.cells,
            "confidence": r.contrast.confidence,
            **dict(zip(("titles_low", "titles_high"), title_interval(titles, r.contrast))),
            "matched": r.matched.text() if r.matched is not None else "",
            "exclusion": "none",
        }
        for r in interaction_rows(grid)
    ]
    return pd.DataFrame(rows, columns=INTERACTION_COLUMNS)


def seeds_part(row: Row, grid: Grid) -> str:
    """' (2 seeds at 4 layers; 1 seed at 2, 6 layers)': the pretraining seeds behind a per-encoder
    pretraining effect, where some cell it reads has several; else empty."""
    if row.family != PRETRAIN_BY_ENCODER or row.kind != SIMPLE:
        return ""
    seeds = backing(grid.cells, row.contrast.weights)
    return f" ({seeds})" if seeds else ""


def _interval(row) -> str:
    if math.isnan(row.low):
        return f"{row.difference:+.3f}"
    return f"{row.difference:+.3f} ({row.low:+.3f}..{row.high:+.3f})"


def verdicts(table: pd.DataFrame) -> list[str]:
    """One sentence per family: the interactions whose interval excludes zero, worded; else that none shows."""
    lines = []
    for (metric, family), part in table.groupby(["metric", "family"], sort=False):
        simple = part[part.kind == SIMPLE].set_index("comparison")
        found = part[(part.kind == INTERACTION) & ((part.low > 0) | (part.high < 0))]
        level, title = f"{part.confidence.iloc[0] * 100:.4g} %", METRIC_TITLES.get(metric, metric)
        if found.empty:
            widest = part[part.kind == INTERACTION]
            if widest.empty:
                continue
            lines.append(
                f"{title}, {family}: no interaction shown: every difference of differences' {level} interval "
                f"includes zero ({'; '.join(f'{r.comparison} {_interval(r)}' for r in widest.itertuples())})."
            )
            continue
        lines += [f"{title}, {family}: {_sentence(family, r, simple)}" for r in found.itertuples()]
    return lines


def _sentence(family: str, row, simple: pd.DataFrame) -> str:
    """A found interaction in words, with the simple effects it compares."""
    sides = "; ".join(f"{name} {_interval(r)}" for name, r in simple.iterrows())
    if family == LN_BY_LAYERS:
        return (
            f"depth works differently under the two LN placements: {row.comparison} {_interval(row)}, so "
            f"'more layers' has no one answer ({sides})."
        )
    what = "pre-LN's" if family.startswith("LN") else "self-pretraining's"
    return f"{what} effect depends on the encoder: {row.comparison} {_interval(row)} ({sides})."
