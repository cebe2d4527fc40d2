"""Validation-F1 intervals that resample the titles as well as the folds (a crossed bootstrap).

The grid model's validation intervals see only the fold noise: every model is scored on the same
validation titles, so how those titles happened to be drawn is left out. Where the records kept
each fold model's predicted class per validation title (fold<k>.predicted.npz), each resample
draws the folds with replacement and the titles with replacement, once for every configuration
alike (crossed, and paired across configurations), and recomputes each fold model's macro-F1 on
the drawn titles; a contrast of the grid model (its weights over configurations) is then
re-read on every resample, and its interval is the percentile interval of those values.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from klue_tc.report.grid_model import CONFIDENCE
from klue_tc.store.records import FoldResult

RESAMPLES = 1000
METHOD = f"crossed bootstrap over folds × validation titles ({RESAMPLES} resamples, percentile)"


def scored_predictions(
    records: Sequence[FoldResult],
) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(config_hash, fold) -> (the fold's held-out title rows, true class, predicted class): what
    the CV F1 was scored on, from the records that kept it."""
    return {
        (r.config_hash, r.fold): (
            r.predictions.scored.index,
            r.predictions.scored.label,
            r.predictions.scored.predicted,
        )
        for r in records
        if r.predictions is not None
    }


def validation_predictions(
    directory: Path, records: Optional[Sequence[FoldResult]] = None
) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(config_hash, fold) -> (validation row index, true class, predicted class), from the records
    below `directory` that kept them (a results store's, or a run directory's)."""
    from klue_tc.report.loading import fold_records

    found = {}
    for record in fold_records(directory) if records is None else records:
        titles = record.predictions.validation if record.predictions is not None else None
        if titles is not None:
            found[(record.config_hash, record.fold)] = (titles.index, titles.label, titles.predicted)
    return found


def macro_f1(counts: np.ndarray) -> np.ndarray:
    """Macro-F1 of confusion counts shaped (..., classes, classes), over the classes seen in either."""
    tp = np.diagonal(counts, axis1=-2, axis2=-1)
    seen = counts.sum(-1) + counts.sum(-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(seen > 0, 2 * tp / seen, np.nan)
    return np.nanmean(f1, axis=-1)


def resampled_f1(labels: np.ndarray, predicted: np.ndarray, draws: np.ndarray, classes: int) -> np.ndarray:
    """Macro-F1 on every resample: `draws` (resamples, titles) counts how often each title is drawn."""
    pairs = labels.astype(int) * classes + predicted.astype(int)
    onehot = np.zeros((len(labels), classes * classes), dtype=np.float32)
    onehot[np.arange(len(labels)), pairs] = 1.0
    return macro_f1((draws @ onehot).reshape(len(draws), classes, classes))


def title_draws(rng: np.random.Generator, titles: int, resamples: int) -> np.ndarray:
    """(resamples, titles): how often each title is drawn in each bootstrap resample."""
    return rng.multinomial(titles, np.full(titles, 1 / titles), size=resamples).astype(np.float32)


def nested_difference(
    folds: list[tuple[np.ndarray, np.ndarray, np.ndarray]], resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, np.ndarray]:
    """Fold-mean macro-F1 of predictions a minus that of predictions b, on folds with titles of their
    own (each fold's held-out titles): `folds` holds (labels, predicted a, predicted b) per fold.
    Each resample draws the folds with replacement and, within each, its titles (the same draw for
    a and b: paired). Returns the point difference and its value on every resample."""
    rng = np.random.default_rng(seed)
    classes = int(max(max(part.max() for part in fold) for fold in folds)) + 1
    point, per_fold = [], []
    for labels, a, b in folds:
        draws = title_draws(rng, len(labels), resamples)
        per_fold.append(resampled_f1(labels, a, draws, classes) - resampled_f1(labels, b, draws, classes))
        every = np.ones((1, len(labels)), dtype=np.float32)
        point.append(float((resampled_f1(labels, a, every, classes) - resampled_f1(labels, b, every, classes))[0]))
    drawn = rng.integers(0, len(folds), size=(resamples, len(folds)))
    values = np.take_along_axis(np.stack(per_fold, axis=1), drawn, axis=1).mean(axis=1)
    return float(np.mean(point)), values


def same_titles(a: tuple, b: tuple) -> bool:
    """Whether two folds' predictions are of the same titles (rows and true classes)."""
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def for_metric(titles, metric: str) -> Optional[TitleBootstrap]:
    """The bootstrap that re-reads `metric`'s contrasts: `titles` one (validation F1's) or one per metric."""
    if isinstance(titles, dict):
        return titles.get(metric)
    return titles if metric == "validation_f1" else None


class TitleBootstrap:
    """Each configuration's fold-mean validation F1 on every crossed resample; a configuration
    pretrained with several seeds (`replicates`: record key -> (its cell's key, its seed)) is one
    cell, whose seeds each resample draws with replacement before the folds and titles.
    `class_weights`: each title counts as its class's weight (macro-F1 at another class mix)."""

    def __init__(
        self,
        predictions: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]],
        resamples: int = RESAMPLES,
        seed: int = 0,
        replicates: Optional[dict[str, tuple[str, object]]] = None,
        class_weights: Optional[np.ndarray] = None,
    ):
        replicates = replicates or {}
        by_config: dict[str, dict[int, tuple]] = {}
        for (config, fold), value in predictions.items():
            by_config.setdefault(config, {})[fold] = value
        folds = sorted({f for config in by_config.values() for f in config})
        # Only configurations with every fold, scored on the same titles, can be resampled together:
        # the validation titles (every fold alike), or each fold's own held-out titles.
        complete = {c: v for c, v in by_config.items() if sorted(v) == folds}
        reference = next(iter(complete.values())) if complete else None
        shared = reference is not None and all(same_titles(reference[f], reference[folds[0]]) for f in folds)
        resampled = [c for c, v in complete.items() if all(same_titles(v[f], reference[f]) for f in folds)]
        cells: dict[str, list[str]] = {}  # each cell's resampled record keys, one per seed
        for key in resampled:
            cells.setdefault(replicates.get(key, (key,))[0], []).append(key)
        self.configs = list(cells)
        self.folds = folds
        self.means = pd.DataFrame()
        if not self.configs:
            return
        rng = np.random.default_rng(seed)
        labels = {f: reference[f][1].astype(int) for f in folds}
        classes = int(
            max(*(labels[f].max() for f in folds), *(complete[c][f][2].max() for c in resampled for f in folds))
        )
        classes += 1
        if shared:
            drawn = title_draws(rng, len(labels[folds[0]]), resamples)  # (B, N)
            titles = {f: drawn for f in folds}
        else:
            titles = {f: title_draws(rng, len(labels[f]), resamples) for f in folds}
        weight = {
            f: np.ones(len(labels[f]), dtype=np.float32)
            if class_weights is None
            else np.asarray(class_weights, dtype=np.float32)[labels[f]]
            for f in folds
        }
        if class_weights is not None:
            titles = {f: titles[f] * weight[f] for f in folds}
        drawn_folds = rng.integers(0, len(folds), size=(resamples, len(folds)))  # (B, F) fold positions
        seeds_rng = np.random.default_rng([seed, 1])  # its own stream: without replicates nothing moves
        values, point = {}, {}
        for cell, keys in cells.items():
            per_seed, seed_points = [], []
            for config in keys:
                per_fold = np.stack(
                    [resampled_f1(labels[f], complete[config][f][2], titles[f], classes) for f in folds], axis=1
                )  # (B, F)
                per_seed.append(np.take_along_axis(per_fold, drawn_folds, axis=1).mean(axis=1))
                every = [weight[f][None, :] for f in folds]
                seed_points.append(
                    float(
                        np.mean(
                            [
                                resampled_f1(labels[f], complete[config][f][2], e, classes)[0]
                                for f, e in zip(folds, every)
                            ]
                        )
                    )
                )
            if len(keys) == 1:
                values[cell] = per_seed[0]
            else:
                drawn_seeds = seeds_rng.integers(0, len(keys), size=(resamples, len(keys)))  # (B, R)
                values[cell] = np.take_along_axis(np.stack(per_seed, axis=1), drawn_seeds, axis=1).mean(axis=1)
            point[cell] = float(np.mean(seed_points))
        self.means = pd.DataFrame(values)  # (B, configs)
        self.point = pd.Series(point)

    def covers(self, weights: Optional[pd.Series]) -> bool:
        """Does every configuration the contrast uses have resampled predictions?"""
        if weights is None or self.means.empty:
            return False
        used = weights[weights != 0].index
        return len(used) > 0 and used.isin(self.means.columns).all()

    def interval(self, weights: pd.Series, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The percentile interval of the contrast over the resamples (NaN where not covered)."""
        if not self.covers(weights):
            return math.nan, math.nan
        used = weights[weights != 0]
        values = self.means[used.index].to_numpy() @ used.to_numpy()
        tail = (1 - confidence) / 2
        low, high = np.quantile(values, [tail, 1 - tail])
        return float(low), float(high)

    def cell_intervals(self, confidence: float = CONFIDENCE) -> pd.DataFrame:
        tail = (1 - confidence) / 2
        if self.means.empty:
            return pd.DataFrame(columns=["low", "high"])
        return pd.DataFrame(
            {"low": self.means.quantile(tail), "high": self.means.quantile(1 - tail)}, index=self.means.columns
        )
