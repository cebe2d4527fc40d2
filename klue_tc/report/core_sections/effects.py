"""The Marginal effects section: each level against the reference, with its interval (effects.csv)."""

from __future__ import annotations

import pandas as pd

from klue_tc.report.context import Effects, Report
from klue_tc.report.markdown import METRICS, interval_text, markdown_table


def effects_section(report: Report) -> list[str]:
    return effects_lines(report.effects)


def effects_lines(effects: Effects) -> list[str]:
    if effects.table.empty and not effects.left_out:  # the records vary no factor: nothing to say
        return []
    if effects.table.empty:
        return ["## Marginal effects", "", f"No marginal effects: {'; '.join(effects.left_out)}.", ""]
    lines = [
        "## Marginal effects",
        "",
        f"Each level against the reference, averaged over matched sets of cells that differ only "
        f"in that factor; 95 % interval: {effects.table['method'].iloc[0]} (effects.csv).",
        "",
        *effects_table(effects.table),
        "",
    ]
    validation = effects.table[effects.table["metric"] == "validation_f1"]
    if "titles_low" in validation and validation["titles_low"].notna().any():
        from klue_tc.report.title_bootstrap import METHOD

        lines += [TITLES_NOTE.format(method=METHOD), ""]
    cv = effects.table[effects.table["metric"] == "f1"] if "titles_low" in effects.table else effects.table.iloc[:0]
    if cv["titles_low"].notna().any():
        lines += [CV_TITLES_NOTE, ""]
    if effects.left_out:
        lines += [f"Left out: {'; '.join(effects.left_out)}.", ""]
    return lines


def effects_table(effects: pd.DataFrame) -> list[str]:
    frame = effects.assign(
        text=effects.apply(interval_text, axis=1),
        what=effects.apply(lambda r: f"{r.factor}: {r.level} − {r.reference}", axis=1),
    )
    table = frame.pivot_table(index="what", columns="metric", values="text", aggfunc="first", sort=False)
    columns = [m for m in METRICS if m in table.columns]
    return markdown_table(table[columns], ["paired difference", *(METRICS[m] for m in columns)])


TITLES_NOTE = (
    "Validation intervals marked 'titles' also resample the validation titles: {method}, the same contrast "
    "re-read on each resample (at the same confidence)."
)


CV_TITLES_NOTE = (
    "CV intervals marked 'titles' (shown where some cell has several pretraining seeds) resample the "
    "pretraining seeds of each such cell, then the folds, then each fold's held-out titles: a hierarchical "
    "bootstrap, so that they include pretraining's run-to-run variance (Pretraining seeds below)."
)
