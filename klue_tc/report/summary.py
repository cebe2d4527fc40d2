"""One row per configuration (fold mean ± sample std and the rest), the grid's gaps, and the baseline's scores."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import pandas as pd

from klue_tc.core.errors import KlueTcError
from klue_tc.report.loading import DESCRIBE, GRID, OPTUNA_RESULTS, OptunaBest, Recipe
from klue_tc.report.replicates import is_replicated, replicate_means, seeds
from klue_tc.report.title_bootstrap import TitleBootstrap

if TYPE_CHECKING:  # scikit-learn is slow to import: only when a baseline is scored
    from klue_tc.training.baseline import LinearBaseline

log = logging.getLogger(__name__)

CSV_COLUMNS = [
    *DESCRIBE,
    "f1_mean",
    "f1_std",
    "folds",
    "pretrain",
    "f1_low",
    "f1_high",
    "validation_f1",
    "validation_f1_std",
    "validation_f1_low",
    "validation_f1_high",
    "validation_within_noise_of_best",
    "validation_f1_titles_low",
    "validation_f1_titles_high",
    "validation_ensemble_f1",
    "accuracy_mean",
    "within_noise_of_best",
    "best_epoch_mean",
    "still_improving",
    "seconds_per_fold",
    "train_samples_per_s",
    "device",
    "config_hash",
    "code",
]


def study_order() -> dict[str, int]:
    """Rows and panels follow the registries' order (the study's); anything else sorts after."""
    from klue_tc.core.registry import VARIANT_GROUPS

    names = [n for registry in VARIANT_GROUPS.values() for n in registry.names()] + ["post", "pre", "none"]
    return {name: i for i, name in enumerate(names)}


def _distinct(values: pd.Series) -> str:
    """A configuration's folds may come from several code versions or machines: each named once."""
    return " + ".join(sorted(set(values)))


@dataclass(frozen=True)
class SharedCells:
    """Configurations that differ only in settings the table does not show, and which one each cell keeps."""

    configurations: int  # how many share a cell with another
    rule: str  # which one a cell shows, in words

    def line(self) -> str:
        return (
            f"{self.configurations} configurations share a table cell with another (they differ in settings "
            f"the table does not show); each cell shows {self.rule}."
        )


def per_configuration(folds: pd.DataFrame) -> pd.DataFrame:
    """Every configuration's fold summary, before cells are shared out."""
    from klue_tc.report.grid_model import cell_intervals

    summary = (
        folds.groupby(["config_hash", *GRID], sort=False)
        .agg(
            f1_mean=("f1", "mean"),
            f1_std=("f1", "std"),
            folds=("fold", "nunique"),
            validation_f1=("validation_f1", "mean"),
            validation_f1_std=("validation_f1", "std"),
            accuracy_mean=("accuracy", "mean"),
            best_epoch_mean=("best_epoch", "mean"),
            still_improving=("still_improving", "sum"),
            seconds_per_fold=("seconds", "mean"),
            train_samples_per_s=("train_samples_per_s", "mean"),
            device=("device", _distinct),
            code=("code", _distinct),
        )
        .reset_index()
    )
    if is_replicated(folds):  # a cell's seeds weigh alike, whatever folds each finished
        for metric, column in (("f1", "f1_mean"), ("validation_f1", "validation_f1")):
            summary[column] = summary["config_hash"].map(replicate_means(folds, metric))
        summary["seeds"] = summary["config_hash"].map(seeds(folds))
    for metric, prefix, mark in (
        ("f1", "f1", "within_noise_of_best"),
        ("validation_f1", "validation_f1", "validation_within_noise_of_best"),
    ):
        cells = cell_intervals(folds, metric)
        summary[f"{prefix}_low"] = summary["config_hash"].map(cells["low"])
        summary[f"{prefix}_high"] = summary["config_hash"].map(cells["high"])
        # yes / no by the grid model's comparison with the best; unknown where it has no interval
        summary[mark] = summary["config_hash"].map(cells["tied"]).fillna("unknown")
    return summary


def optuna_choice(summary: pd.DataFrame, best: Optional[OptunaBest]) -> Optional[str]:
    """The configuration of Optuna's best trial: matched by its parameters, else by its value (the
    trial's objective is its CV macro-F1 mean)."""
    if best is None or summary.empty:
        return None
    if best.config_hash in set(summary["config_hash"]):
        return best.config_hash
    nearest = (summary["f1_mean"] - best.value).abs().idxmin()
    return summary.at[nearest, "config_hash"] if abs(summary.at[nearest, "f1_mean"] - best.value) < 1e-9 else None


def shared_cells(configurations: pd.DataFrame, best: Optional[OptunaBest] = None) -> Optional[SharedCells]:
    """Which of `per_configuration`'s rows share a cell, and the rule the table follows (None: none do)."""
    clashes = int(configurations.duplicated(GRID, keep=False).sum())
    if not clashes:
        return None
    if optuna_choice(configurations, best) is not None:
        rule = f"the trial Optuna named best ({OPTUNA_RESULTS}: best value {best.value:.4f})"
    else:
        rule = "the one with most folds (the first found among equals)"
    return SharedCells(clashes, rule)


def summarise_configs(
    folds: pd.DataFrame,
    best: Optional[OptunaBest] = None,
    titles: Optional[TitleBootstrap] = None,
    ensembles: Optional[dict[str, float]] = None,
) -> pd.DataFrame:
    """One row per configuration: fold macro-F1 mean ± sample std (none for one fold), and the rest.

    Configurations that share a cell (an Optuna search's trials, say) leave the trial Optuna named
    best in it, else the one with most folds. `titles`: validation intervals that resample titles too.
    `ensembles`: each configuration's fold ensemble on the validation titles (loading.ensemble_scores),
    beside validation_f1, the mean of its fold models alone."""
    summary = per_configuration(folds)
    summary["validation_ensemble_f1"] = summary["config_hash"].map(ensembles or {}).astype(float)
    cells = titles.cell_intervals() if titles is not None else pd.DataFrame(columns=["low", "high"])
    summary["validation_f1_titles_low"] = summary["config_hash"].map(cells["low"])
    summary["validation_f1_titles_high"] = summary["config_hash"].map(cells["high"])
    shared = shared_cells(summary, best)
    if shared is not None:  # two settings the table does not show (d_model, data, ...) would share a cell
        log.warning("%s", shared.line())
        chosen = summary["config_hash"] == optuna_choice(summary, best)
        summary = (
            summary.assign(_chosen=chosen)
            .sort_values(["_chosen", "folds"], ascending=False, kind="stable")
            .drop_duplicates(GRID)
            .drop(columns="_chosen")
        )
    order = study_order()
    ranked = summary.sort_values(
        GRID,
        kind="stable",
        key=lambda col: col if col.name == "layers" else col.map(lambda v: (order.get(v, len(order)), str(v))),
    )
    return ranked[csv_columns(ranked)].reset_index(drop=True)


def csv_columns(summary: pd.DataFrame) -> list[str]:
    """report.csv's columns: `seeds` (each cell's pretraining seeds) after `folds` where some cell has several."""
    if "seeds" not in summary:
        return CSV_COLUMNS
    at = CSV_COLUMNS.index("folds") + 1
    return [*CSV_COLUMNS[:at], "seeds", *CSV_COLUMNS[at:]]


def missing_cells(summary: pd.DataFrame, planned_folds: Optional[int] = None) -> tuple[list[str], int]:
    """Cells of the grid the records span (every encoder x LN placement x pretraining x layer count
    x tokenizer seen) with no record, and configurations short of `planned_folds` (the runs'
    cv.folds; without it, the most folds any configuration has): one line per table row and fold
    count, and how many configurations that is. With several pretraining objectives, each is a row
    of its own. A row no record has begun is listed too: a sweep stopped before it is not complete."""
    if summary["pretrain"].nunique() > 1:
        summary = summary.assign(ln=summary["ln"] + " / " + summary["pretrain"])
    rows = [(e, ln) for e in summary.encoder.unique() for ln in summary.ln.unique()]
    present = set(zip(summary.tokenizer, summary.encoder, summary.ln, summary.layers))
    absent = [
        (t, e, ln, n, "no record")
        for t in summary.tokenizer.unique()
        for e, ln in rows
        for n in sorted(summary.layers.unique())
        if (t, e, ln, n) not in present
    ]
    most = max(planned_folds or 0, summary["folds"].max())
    short = [
        (r.tokenizer, r.encoder, r.ln, r.layers, f"{r.folds} of {most} folds")
        for r in summary[summary["folds"] < most].itertuples()
    ]
    grouped: dict[tuple, list] = {}
    for t, e, ln, n, what in absent + short:
        grouped.setdefault((t, e, ln, what), []).append(n)
    lines = [
        f"{t} / {e} / {ln} / {', '.join(map(str, layers))} layers: {what}"
        for (t, e, ln, what), layers in grouped.items()
    ]
    return lines, len(absent) + len(short)


PREDICTION_KEYS = ("scored_index", "scored_predicted", "validation_predicted")


def baseline_scores(recipe: Recipe, directory: Path, baseline: Optional[LinearBaseline] = None) -> Optional[dict]:
    """A linear baseline's mean over the folds the runs used (default: TF-IDF + SVM):
    {name, f1, f1_std, validation_f1, folds, C, validation_confusion (one matrix per fold),
    predictions (per fold, its per-title predictions: PREDICTION_KEYS)}."""
    from klue_tc.training.baseline import TFIDF_SVM, score_on_folds

    baseline = baseline or TFIDF_SVM
    try:
        rows = pd.DataFrame(
            score_on_folds(
                recipe.data,
                recipe.cv,
                recipe.seed,
                directory / baseline.cache_file,
                recipe.inner_fraction,
                baseline,
            )
        )
    except KlueTcError as err:
        log.warning("no %s row: %s", baseline.name, err)
        return None
    validation = rows["validation_f1"].mean() if "validation_f1" in rows else float("nan")
    chosen_c = [baseline.describe(c) for c in rows["C"]] if "C" in rows else []
    return {
        "name": baseline.name,
        "setting_name": baseline.setting_name,
        "default_setting": baseline.describe(baseline.default_c),
        "f1": rows["f1"].mean(),
        "f1_std": rows["f1"].std(ddof=1),
        "validation_f1": validation,
        "folds": len(rows),
        "C": chosen_c,
        "validation_confusion": list(rows["validation_confusion"]) if "validation_confusion" in rows else [],
        # per fold: the held-out titles' rows and predicted classes, and the validation titles' classes
        "predictions": {
            int(row["fold"]): {k: row[k] for k in PREDICTION_KEYS if isinstance(row.get(k), list)}
            for row in rows.to_dict("records")
        },
    }
