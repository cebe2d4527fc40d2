"""One model of the whole grid, the source of every interval the report shows.

Fold F1 = cell mean + fold effect + noise: an ordinary least-squares fit with a dummy per cell
(configuration) and the fold as a blocking factor (fold k is the same title split for every
configuration, so a hard split lowers every cell alike), the noise's variance pooled over all
cells (N rows - cells - folds + 1 residual degrees of freedom, not 2 per cell). A cell's mean is
its coefficient (the fold effects sum to zero, so it is the cell at the average fold: with every
fold present, the plain fold mean); any comparison is a linear contrast of the cell means with a t
interval at the residual degrees of freedom. Cells are fixed: the intervals say how well these
folds pin down these cells' means, not how another grid would come out.

Pretraining is not fixed: a pretrained cell's encoder is one draw of its pretraining. Where some
cells were pretrained with several seeds (pretrain.seed, klue_tc/report/replicates.py) each seed is
a unit of its own in the fit, a cell's mean is the mean of its seeds', and the seed-to-seed
variance (the spread of a replicated cell's seed means beyond what its fold noise explains, pooled
over the replicated cells) is added for every pretrained cell, divided by its number of seeds, to
any contrast that reads it, with Satterthwaite's degrees of freedom for the sum. Without
replicated cells there is no such term and the fit is as above.

The best and its ties: Hsu's multiple comparisons with the best. A cell is tied with the best
when the best's lead over it is within t(1 - 0.05 / (cells - 1), df) standard errors of the
difference (one-sided, Bonferroni's bound for the critical value); the rule covers the best being
chosen on the same records.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from klue_tc.core.config import GRID_FACTORS
from klue_tc.report.replicates import REPLICATE

CONFIDENCE = 0.95
# The factors that name a cell beside the configuration key; the head goes with the encoder.
FACTORS = GRID_FACTORS
METHOD = "grid model (cell + fold OLS, pooled residual variance, t intervals)"
TIES_METHOD = "Hsu's comparison with the best, one-sided, Bonferroni critical value over the other cells"


def signed(value: float) -> str:
    """3 decimals, or 4 where 3 would print a bound as ±0.000 and hide which side of zero it is on."""
    return f"{value:+.4f}" if 0 < abs(value) < 0.0005 else f"{value:+.3f}"


@dataclass(frozen=True)
class Contrast:
    """A linear combination of cell means with its interval (NaN where the fit has no residual df)."""

    label: str
    difference: float = math.nan
    low: float = math.nan
    high: float = math.nan
    cells: int = 0  # matched sets (or cells) the contrast averages over
    pairs: int = 0  # scored (cell, fold) rows of the cells it uses
    confidence: float = CONFIDENCE
    se: float = math.nan
    df: int = 0
    # The contrast's weights over config_hash: another estimator (the title bootstrap) re-reads it.
    weights: Optional[pd.Series] = field(default=None, compare=False, repr=False)

    def text(self) -> str:
        if not self.cells:
            return f"{self.label}: no matched pairs"
        sets = f"{self.cells} matched set{'s' if self.cells > 1 else ''}"
        if math.isnan(self.low):
            return f"{self.label}: {signed(self.difference)} (no residual degrees of freedom, no interval; {sets})"
        return (
            f"{self.label}: {signed(self.difference)} ({self.confidence * 100:.4g} % "
            f"{signed(self.low)}..{signed(self.high)}, {sets})"
        )


@dataclass(frozen=True)
class GridFit:
    """The fitted grid: cell means at the average fold, their covariance and the residual df."""

    metric: str
    cells: pd.DataFrame  # one row per configuration (index config_hash): its factors and folds scored
    means: pd.Series  # by config_hash
    covariance: np.ndarray  # of `means`, in its order
    sigma: float  # the pooled residual standard deviation
    df: int  # residual degrees of freedom
    # Pretraining's seed-to-seed variance, its degrees of freedom (the replicated cells' seeds less
    # one each; 0: no replicated cell, no such term), and per cell the share of it a cell mean
    # carries (1 / its seeds for a pretrained cell, 0 from scratch).
    seed_variance: float = 0.0
    seed_df: int = 0
    seed_share: Optional[pd.Series] = None

    def quantile(self, confidence: float, sides: int = 2, df: Optional[float] = None) -> float:
        df = self.df if df is None else df
        if not df > 0:
            return math.nan
        return float(stats.t.ppf(1 - (1 - confidence) / sides, df))

    def variance_parts(self, weights: pd.Series) -> tuple[float, float]:
        """A contrast's variance from the fold noise and from pretraining's seeds."""
        w = weights.reindex(self.means.index).fillna(0.0).to_numpy()
        fold = float(max(w @ self.covariance @ w, 0.0))
        if not self.seed_df:
            return fold, 0.0
        return fold, self.seed_variance * float(w**2 @ self.seed_share.to_numpy())

    def df_of(self, weights: pd.Series) -> float:
        """Satterthwaite's degrees of freedom of the contrast's variance (the residual df without seeds)."""
        fold, seed = self.variance_parts(weights)
        if not seed:
            return self.df
        return (fold + seed) ** 2 / (fold**2 / self.df + seed**2 / self.seed_df) if self.df > 0 else 0

    def estimate(self, weights: pd.Series) -> tuple[float, float]:
        """A contrast's value and standard error; `weights` by config_hash (cells not in the fit count 0)."""
        w = weights.reindex(self.means.index).fillna(0.0).to_numpy()
        value = float(w @ self.means.to_numpy())
        se = float(math.sqrt(sum(self.variance_parts(weights)))) if self.df > 0 else math.nan
        return value, se

    def contrast(self, weights: pd.Series, label: str, sets: int, confidence: float = CONFIDENCE) -> Contrast:
        if weights.empty or not (weights != 0).any():
            return Contrast(label, confidence=confidence)
        value, se = self.estimate(weights)
        df = self.df_of(weights)
        half = self.quantile(confidence, df=df) * se
        used = weights[weights != 0].index.intersection(self.means.index)
        rows = int(self.cells.loc[used, "folds"].sum())
        return Contrast(label, value, value - half, value + half, sets, rows, confidence, se, round(df), weights)

    @cached_property
    def standard_errors(self) -> pd.Series:
        variance = np.diag(self.covariance)
        if self.seed_df:
            variance = variance + self.seed_variance * self.seed_share.to_numpy()
        return pd.Series(np.sqrt(np.clip(variance, 0, None)), index=self.means.index)

    def intervals(self, confidence: float = CONFIDENCE) -> pd.DataFrame:
        """Each cell's mean with its interval, the best, and whether each is tied with it."""
        best = self.means.idxmax()
        others = max(len(self.means) - 1, 1)
        lead = self.means[best] - self.means
        if not self.seed_df:
            half = self.quantile(confidence) * self.standard_errors
            i = self.means.index.get_loc(best)
            var = np.diag(self.covariance)
            lead_se = pd.Series(
                np.sqrt(np.clip(var[i] + var - 2 * self.covariance[i], 0, None)), index=self.means.index
            )
            critical = self.quantile(1 - (1 - confidence) / others, sides=1)
        else:  # each cell's and each lead's own degrees of freedom: pretrained cells carry the seeds' term
            own = [pd.Series({key: 1.0}) for key in self.means.index]
            half = self.standard_errors * [self.quantile(confidence, df=self.df_of(w)) for w in own]
            leads = [pd.Series({best: 1.0}).sub(pd.Series({key: 1.0}), fill_value=0.0) for key in self.means.index]
            lead_se = pd.Series([self.estimate(w)[1] for w in leads], index=self.means.index)
            one_sided = 1 - (1 - confidence) / others
            critical = pd.Series(
                [self.quantile(one_sided, sides=1, df=self.df_of(w)) if w.any() else 0.0 for w in leads],
                index=self.means.index,
            )
        tied = lead <= critical * lead_se
        marks = tied.map({True: "yes", False: "no"}) if self.df > 0 else pd.Series("unknown", index=tied.index)
        marks[best] = "best"
        return pd.DataFrame(
            {"mean": self.means, "low": self.means - half, "high": self.means + half, "lead": lead, "tied": marks}
        )


def fit_grid(folds: pd.DataFrame, metric: str = "f1") -> Optional[GridFit]:
    """The grid model of `metric` over the (configuration, fold) rows of `folds` (None: nothing scored)."""
    if metric not in folds:
        return None
    scored = folds.dropna(subset=[metric])
    if scored.empty:
        return None
    seeds = scored[REPLICATE] if REPLICATE in scored else pd.Series(np.nan, index=scored.index)
    # A unit per (cell, pretraining seed); a from-scratch cell is one unit.
    units = scored["config_hash"].astype(str) + "\0" + seeds.map(lambda s: "" if pd.isna(s) else f"{s:g}")
    unit_codes, unit_keys = pd.factorize(units)
    fold_codes, fold_keys = pd.factorize(scored["fold"])
    n, u, f = len(scored), len(unit_keys), len(fold_keys)
    x = np.zeros((n, u + f - 1))
    x[np.arange(n), unit_codes] = 1.0
    # Sum-to-zero coding of the fold: each unit's coefficient is its mean at the average fold.
    for k in range(f - 1):
        x[:, u + k] = (fold_codes == k).astype(float) - (fold_codes == f - 1)
    y = scored[metric].to_numpy(dtype=float)
    beta, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    df = n - int(rank)
    residual = y - x @ beta
    sigma2 = float(residual @ residual / df) if df > 0 else math.nan
    unit_covariance = (sigma2 if df > 0 else 0.0) * np.linalg.pinv(x.T @ x)[:u, :u]
    cell_of_unit = pd.Series(unit_keys).str.split("\0").str[0]
    cell_codes, cell_keys = pd.factorize(cell_of_unit)
    present = [k for k in FACTORS if k in scored]
    cells = scored.groupby("config_hash", sort=False)[present].first().reindex(cell_keys)
    cells["folds"] = scored.groupby("config_hash", sort=False).size().reindex(cell_keys)
    if REPLICATE in scored:  # the pretraining seeds each cell's rows come from (0: from scratch)
        cells["seeds"] = scored.groupby("config_hash", sort=False)[REPLICATE].nunique().reindex(cell_keys)
    if u == len(cell_keys):  # one unit per cell: the cells are the units
        return GridFit(metric, cells, pd.Series(beta[:u], index=cell_keys), unit_covariance, math.sqrt(sigma2), df)
    average = np.zeros((len(cell_keys), u))  # a cell's mean: the mean of its units'
    average[cell_codes, np.arange(u)] = 1.0
    per_cell = average.sum(axis=1)
    average /= per_cell[:, None]
    means = pd.Series(average @ beta[:u], index=cell_keys)
    seed_variance, seed_df = seed_variance_of(beta[:u], unit_covariance, cell_codes, per_cell)
    pretrained = pd.Series(cells.get("seeds", 0).fillna(0).to_numpy() > 0, index=cell_keys)
    share = pd.Series(np.where(pretrained, 1.0 / per_cell, 0.0), index=cell_keys)
    covariance = average @ unit_covariance @ average.T
    return GridFit(metric, cells, means, covariance, math.sqrt(sigma2), df, seed_variance, seed_df, share)


def seed_variance_of(
    unit_means: np.ndarray, unit_covariance: np.ndarray, cell_codes: np.ndarray, per_cell: np.ndarray
) -> tuple[float, int]:
    """Pretraining's seed-to-seed variance: over the cells with several seeds, the sum of squares of
    their seed means about the cell's mean, less what the fold noise alone puts there (the trace of
    the centred covariance), over the seeds less one per cell; never below zero."""
    squares, noise, df = 0.0, 0.0, 0
    for cell in np.flatnonzero(per_cell > 1):
        members = np.flatnonzero(cell_codes == cell)
        k = len(members)
        centre = np.eye(k) - 1.0 / k
        deviations = centre @ unit_means[members]
        squares += float(deviations @ deviations)
        noise += float(np.trace(centre @ unit_covariance[np.ix_(members, members)] @ centre))
        df += k - 1
    return (max((squares - noise) / df, 0.0), df) if df else (0.0, 0)


def cell_intervals(folds: pd.DataFrame, metric: str = "f1", confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Per config_hash: mean, low, high, lead (the best's over it) and tied (best / yes / no / unknown)."""
    fit = fit_grid(folds, metric)
    if fit is None:
        return pd.DataFrame(columns=["mean", "low", "high", "lead", "tied"])
    return fit.intervals(confidence)


# Contrasts over matched sets: cells that differ only in the factor compared.


def _is(values: pd.Series, level) -> pd.Series:
    """Membership in a level, or in any of a tuple of levels (both TRANS-BLSTM variants, say)."""
    return values.isin(level) if isinstance(level, (tuple, list, set, frozenset)) else values == level


def level_name(level) -> str:
    return " + ".join(map(str, level)) if isinstance(level, (tuple, list)) else str(level)


def difference_weights(
    cells: pd.DataFrame, factor: str, level, reference, within: Sequence[str]
) -> tuple[pd.Series, int]:
    """Weights of `level` − `reference` averaged over the matched sets (same `within` values) that
    hold both; cells sharing a set and a side (two heads, two variants) are averaged first."""
    sides = cells.assign(_side=np.where(_is(cells[factor], level), 1, np.where(_is(cells[factor], reference), -1, 0)))
    sides = sides[sides["_side"] != 0]
    parts = []
    groups = sides.groupby(list(within), sort=False) if within else [((), sides)]
    for _, group in groups:
        if set(group["_side"]) != {1, -1}:
            continue
        counts = group["_side"].map(group["_side"].value_counts())
        parts.append(group["_side"] / counts)
    if not parts:
        return pd.Series(dtype=float), 0
    return pd.concat(parts) / len(parts), len(parts)


def slope_weights(cells: pd.DataFrame, within: Sequence[str], span: Optional[float] = None) -> tuple[pd.Series, int]:
    """Weights of the least-squares slope of the cell means over layers within each matched set
    (same `within` values, at least two layer counts), times `span` layers, averaged over the sets."""
    span = span if span is not None else float(cells["layers"].max() - cells["layers"].min())
    parts = []
    groups = cells.groupby(list(within), sort=False) if within else [((), cells)]
    for _, group in groups:
        layers = group["layers"].astype(float)
        if layers.nunique() < 2:
            continue
        # Several cells at one layer count (two heads) are averaged first.
        per_count = layers.map(layers.value_counts())
        x = pd.Series(sorted(layers.unique()))
        centred = layers - x.mean()
        parts.append(centred / ((x - x.mean()) ** 2).sum() / per_count * span)
    if not parts:
        return pd.Series(dtype=float), 0
    return pd.concat(parts) / len(parts), len(parts)


def matching(cells: pd.DataFrame, *varied: str) -> list[str]:
    """The factors that stay fixed within a matched set: all but the varied ones."""
    return [k for k in FACTORS if k not in varied and k in cells]


@dataclass(frozen=True)
class MatchedSets:
    """The sets (cells alike in every other factor) that hold a cell at every level of both factors
    of an interaction: only their cells are compared, so each side averages over the same sets."""

    factors: tuple[str, str]
    levels: tuple[tuple, tuple]  # the levels of each factor a set must hold all of
    within: tuple[str, ...]  # the other factors, which name a set
    matched: tuple[str, ...]  # the sets kept, by their other factors' levels
    unmatched: tuple[str, ...]  # the sets left out, each with the cells it lacks
    cells: pd.Index = field(default_factory=pd.Index, compare=False)  # the config_hash of every cell kept

    def text(self) -> str:
        a, b = self.factors
        head = (
            f"{len(self.matched)} matched set(s) of {' / '.join(self.within) or 'the grid'}, each with every "
            f"{a} × {b} cell ({' / '.join(map(str, self.levels[0]))} × {' / '.join(map(str, self.levels[1]))}; "
            f"{len(self.cells)} cells): {', '.join(self.matched) or 'none'}"
        )
        return head + (f"; left out: {', '.join(self.unmatched)}" if self.unmatched else "")


def matched_sets(cells: pd.DataFrame, a: str, a_levels: Sequence, b: str) -> MatchedSets:
    """The cells of the sets that hold every (a, b) pair: `a` at `a_levels`, `b` at each of its levels
    that meets every one of them somewhere in the grid (a level never crossed with one of `a`'s would
    leave no set matched)."""
    relevant = cells[_is(cells[a], tuple(a_levels))] if len(cells) else cells
    b_levels = sorted(level for level, part in relevant.groupby(b) if set(a_levels) <= set(part[a]))
    within = matching(cells, a, b)
    wanted = set(itertools.product(a_levels, b_levels))
    relevant = relevant[relevant[b].isin(b_levels)]
    matched, unmatched, kept = [], [], []
    groups = relevant.groupby(within, sort=True) if within else [((), relevant)]
    for key, group in groups:
        name = " / ".join(map(str, key if isinstance(key, tuple) else (key,))) or "the grid"
        missing = sorted(wanted - set(zip(group[a], group[b])), key=str)
        if missing:
            unmatched.append(f"{name} (no {', '.join(f'{x} {y}' for x, y in missing)})")
        else:
            matched.append(name)
            kept.append(group.index)
    index = kept[0].append(kept[1:]) if kept else pd.Index([])
    return MatchedSets(
        (a, b), (tuple(a_levels), tuple(b_levels)), tuple(within), tuple(matched), tuple(unmatched), index
    )


class Grid:
    """The fitted grid and the comparisons the report reads from it, all by linear contrasts."""

    def __init__(self, folds: pd.DataFrame, metric: str = "f1"):
        self.metric = metric
        self.fit = fit_grid(folds, metric)
        self.cells = self.fit.cells if self.fit is not None else pd.DataFrame(columns=[*FACTORS, "folds"])

    def levels(self, factor: str) -> list:
        return sorted(self.cells[factor].dropna().unique()) if factor in self.cells else []

    def restricted(self, cells: pd.Index) -> Grid:
        """The same fit (its pooled noise from every cell) with only `cells` to compare."""
        view = copy.copy(self)
        view.cells = self.cells.loc[cells]
        return view

    def where(self, **fixed) -> pd.DataFrame:
        """The cells at the given factor levels (a tuple: any of them)."""
        mask = pd.Series(True, index=self.cells.index)
        for factor, level in fixed.items():
            mask &= _is(self.cells[factor], level)
        return self.cells[mask]

    def contrast(self, weights: pd.Series, sets: int, label: str, confidence: float = CONFIDENCE) -> Contrast:
        if self.fit is None or not sets:
            return Contrast(label, confidence=confidence)
        return self.fit.contrast(weights, label, sets, confidence)

    def difference_parts(self, factor: str, level, reference, cells: Optional[pd.DataFrame] = None):
        cells = self.cells if cells is None else cells
        return difference_weights(cells, factor, level, reference, matching(cells, factor))

    def difference(
        self, factor: str, level, reference, confidence: float = CONFIDENCE, label: Optional[str] = None, **fixed
    ) -> Contrast:
        """`level` − `reference` of `factor`, averaged over the matched sets among the cells at `fixed`."""
        weights, sets = self.difference_parts(factor, level, reference, self.where(**fixed))
        return self.contrast(weights, sets, label or f"{level_name(level)} − {level_name(reference)}", confidence)

    def slope(self, confidence: float = CONFIDENCE, label: Optional[str] = None, **fixed) -> Contrast:
        """The fitted change over the grid's span of layers, among the cells at `fixed`."""
        cells = self.where(**fixed)
        span = self.cells["layers"].max() - self.cells["layers"].min() if len(self.cells) else 0
        weights, sets = slope_weights(cells, matching(cells, "layers"), span)
        return self.contrast(weights, sets, label or f"fitted slope × {span:g} layers", confidence)

    def interaction(
        self,
        factor: str,
        level,
        reference,
        by: str,
        by_level,
        by_reference,
        confidence: float = CONFIDENCE,
        label: Optional[str] = None,
    ) -> Contrast:
        """(`level` − `reference` at `by_level`) − (the same at `by_reference`): a difference of differences."""
        a, sets_a = self.difference_parts(factor, level, reference, self.where(**{by: by_level}))
        b, sets_b = self.difference_parts(factor, level, reference, self.where(**{by: by_reference}))
        weights = a.sub(b, fill_value=0.0)
        name = label or (
            f"({level_name(level)} − {level_name(reference)}) at {by}={level_name(by_level)} "
            f"minus at {by}={level_name(by_reference)}"
        )
        return self.contrast(weights, min(sets_a, sets_b), name, confidence)

    def slope_interaction(self, by: str, by_level, by_reference, confidence: float = CONFIDENCE) -> Contrast:
        """The slope over layers at `by_level` minus the slope at `by_reference`."""
        span = self.cells["layers"].max() - self.cells["layers"].min() if len(self.cells) else 0
        parts = []
        for side in (by_level, by_reference):
            cells = self.where(**{by: side})
            parts.append(slope_weights(cells, matching(cells, "layers", by), span))
        (a, sets_a), (b, sets_b) = parts
        label = f"slope × {span:g} layers at {by}={by_level} minus at {by}={by_reference}"
        return self.contrast(a.sub(b, fill_value=0.0), min(sets_a, sets_b), label, confidence)


def family_confidence(comparisons: int, confidence: float = CONFIDENCE) -> float:
    """Bonferroni: each of `comparisons` intervals read at once at 1 - (1 - confidence) / comparisons."""
    return 1 - (1 - confidence) / max(comparisons, 1)
