"""The report's head: the title, what the records are and what made them, the recipe and how CV F1 was chosen."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from klue_tc.report.code_mix import code_mix
from klue_tc.report.context import Report
from klue_tc.report.loading import Recipe
from klue_tc.report.settings import declared_note

# Why a table of several configurations names several code versions without mixing them
OWN_VARIANTS = "a configuration's version covers its own variants too, so configurations of other variants differ in it"


def head_lines(report: Report) -> list[str]:
    """The title, what the records are and what made them, the recipe and how CV F1 was chosen."""
    folds, summary = report.folds, report.summary
    codes = sorted(set(folds["code"]))
    lines = [
        f"# F1 comparison: {report.directory.name}",
        "",
        f"{len(summary)} configuration{'s' if len(summary) > 1 else ''}, {len(folds)} (configuration, fold) records; "
        f"records made by code {', '.join(codes)}"
        + (f"; {OWN_VARIANTS}" if len(codes) > 1 else "")
        + "."
        + (f" Written, with the files and plots beside it, by `{report.command}`." if report.command else ""),
        "",
    ]
    if note := declared_note(report.directory):
        lines += [f"**Note** (the runs' sweep file declares it): {note}", ""]
    if report.recipe is not None:
        lines += [recipe_line(report.recipe, folds), ""]
    lines += [selection_line(folds), ""]
    lines += code_mix(folds).lines()
    if report.shared is not None:
        lines += [report.shared.line(), ""]
    return lines


def recipe_line(recipe: Recipe, folds: pd.DataFrame) -> str:
    """The scale the records were made at (from their config.yaml), in one line."""
    data, cv, trainer = recipe.data, recipe.cv, recipe.trainer
    titles = f"{data.limit:,} stratified titles" if data.limit else "every title"
    return (
        f"Recipe: {titles} of {Path(str(data.path or 'the KLUE YNAT train split')).name}, "
        f"{cv.folds} folds (seed {cv.seed}), up to {trainer.max_epochs} epochs with early stopping "
        f"after {trainer.early_stopping_patience} without gain, precision "
        f"{', '.join(sorted(set(folds['precision'].astype(str))))}; validation titles: "
        f"{Path(str(data.validation_path)).name if data.validation_path else 'none'}."
    )


def selection_line(folds: pd.DataFrame) -> str:
    """How each fold's CV F1 was chosen, from the records (klue_tc.store.records reads older ones as chosen
    on the scored fold)."""
    from klue_tc.store.records import SELECTED_ON_INNER_SPLIT

    inner = int((folds["selected_on"] == SELECTED_ON_INNER_SPLIT).sum())
    rule = (
        "CV macro-F1: each fold's held-out titles scored once, by the checkpoint of the epoch its inner split "
        "(a stratified share of its training titles, cv.inner_fraction) chose; early stopping reads that split too"
    )
    if inner == len(folds):
        return f"{rule}."
    old = "each fold's best epoch on its held-out titles, chosen on those same titles (optimistic)"
    if inner == 0:
        return f"CV macro-F1: {old}; records of code older than the inner-split selection."
    return f"**Mixed selection**: {inner} of {len(folds)} folds: {rule}; the rest: {old}."
