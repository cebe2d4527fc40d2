"""One metric's F1 section: a table per tokenizer (the grid model's interval per cell, the best in
bold, its ties starred), with how the tables were made and the bar to clear."""

from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from klue_tc.report.context import Report
from klue_tc.report.grid_model import Grid
from klue_tc.report.markdown import BASELINE, METRICS, markdown_table


def metric_section(report: Report, metric: str) -> list[str]:
    """One metric's F1 tables (a table per tokenizer), with how they were made and the bar to clear."""
    summary, baseline = report.summary, report.reference
    if not summary[metric if metric != "f1" else "f1_mean"].notna().any():
        return []
    lines = [
        "",
        f"## {METRICS[metric]}" + (": mean with its 95 % interval (grid model)" if len(summary) > 1 else ""),
        "",
        grid_line(report.grids.get(metric), summary, metric),
        "",
    ]
    if metric == "validation_f1":
        lines += [*ensemble_lines(summary), ""]
    if baseline is not None and pd.notna(baseline.get(metric)):
        spread = f" ± {baseline['f1_std']:.3f} (sample std)" if metric == "f1" else ""
        lines += [
            f"The bar to clear, {BASELINE} on the same folds: **{baseline[metric]:.3f}**{spread} "
            f"({baseline['folds']} folds"
            + (f"; C chosen on each inner split: {', '.join(baseline['C'])}" if baseline.get("C") else "")
            + ").",
            "",
        ]
    for tokenizer, table in f1_tables(summary, metric).items():
        lines += [
            f"### tokenizer: {tokenizer}",
            "",
            *markdown_table(table, [table.index.name, *(f"{n} layers" for n in table.columns)]),
            "",
        ]
    return lines


COLUMNS = {  # per metric: the summary's mean, interval and tie columns
    "f1": ("f1_mean", "f1_low", "f1_high", "within_noise_of_best"),
    "validation_f1": ("validation_f1", "validation_f1_low", "validation_f1_high", "validation_within_noise_of_best"),
}


def f1_tables(summary: pd.DataFrame, metric: str = "f1") -> dict[str, pd.DataFrame]:
    """Per tokenizer: rows encoder / LN (/ pretrain), columns the layer counts, cells 'mean ±half'
    of the grid model's 95 % interval, (n=k) only where a cell has fewer folds than the most; the
    best in bold, * tied with it by the grid model."""
    from klue_tc.report.plots import row_labels

    mean, low, high, tied = COLUMNS[metric]
    most = summary["folds"].max()
    shared = uniform_half(summary, metric)

    def cell(row) -> str:
        if pd.isna(row[mean]):
            return "–"
        # The interval's centre is the model's mean: the fold mean, or for a cell short of folds the
        # mean adjusted for how hard its folds were (the fold effects the other cells show).
        centre, half = (
            ((row[high] + row[low]) / 2, (row[high] - row[low]) / 2) if pd.notna(row[high]) else (row[mean], None)
        )
        text = f"{centre:.3f}" + (f" ±{half:.3f}" if half is not None and shared is None else "")
        text += f" (n={row['folds']})" if row["folds"] < most else ""
        text += f" ({row['seeds']} seeds)" if row.get("seeds", 0) > 1 else ""
        if row[tied] == "best":
            return f"**{text}**"
        return f"{text} *" if row[tied] == "yes" else text

    cells = summary.assign(row=row_labels(summary), cell=summary.apply(cell, axis=1))
    tables = {}
    for tokenizer, part in cells.groupby("tokenizer", sort=False):
        table = part.pivot(index="row", columns="layers", values="cell")
        table = table.reindex(index=part["row"].drop_duplicates(), columns=sorted(part["layers"].unique()))
        table.index.name, table.columns.name = row_title(summary), "layers"
        tables[tokenizer] = table.fillna("–")
    return tables


def uniform_half(summary: pd.DataFrame, metric: str) -> Optional[float]:
    """The half-width every cell's interval shares to the table's 3 decimals (a balanced grid), else
    None: then each cell prints its own."""
    _, low, high, _ = COLUMNS[metric]
    halves = ((summary[high] - summary[low]) / 2).dropna().round(3)
    return float(halves.iloc[0]) if len(halves) and halves.nunique() == 1 else None


def row_title(summary: pd.DataFrame) -> str:
    from klue_tc.report.plots import row_parts

    return " / ".join({"ln": "LN"}.get(part, part) for part in row_parts(summary))


def grid_line(grid: Optional[Grid], summary: pd.DataFrame, metric: str) -> str:
    """How the table's intervals and marks were made, with the fit's pooled noise."""
    from klue_tc.report.grid_model import TIES_METHOD

    if len(summary) == 1:
        return (
            "One configuration: its mean over its folds (report.csv has the sample std); the grid model's "
            "intervals and ties compare configurations, and there is no other."
        )
    fit = grid.fit if grid is not None else None
    noise = (
        f" (pooled residual std {fit.sigma:.4f} F1 over {len(fit.means)} cells, {fit.df} residual df"
        + (
            f"; pretraining's seed-to-seed std {math.sqrt(fit.seed_variance):.4f} F1, {fit.seed_df} df, "
            "in every pretrained cell's interval"
            if fit.seed_df
            else ""
        )
        + ")"
        if fit is not None and fit.df > 0
        else ""
    )
    shared = uniform_half(summary, metric)
    each = (
        f"every cell's interval is its mean ±{shared:.3f} (the grid is balanced), so the cells show the mean alone"
        if shared is not None
        else "each cell shows ±half its interval"
    )
    titles = (
        " report.csv's validation_f1_titles_low and _high give each cell's interval with the validation "
        "titles resampled too (crossed bootstrap over folds × titles)."
        if metric == "validation_f1" and summary.get("validation_f1_titles_low", pd.Series(dtype=float)).notna().any()
        else ""
    )
    return (
        f"Each cell: its mean at the average fold with the 95 % t interval of one model of the whole grid, "
        f"fold F1 = cell + fold + noise{noise}; {each}. (n=k): a cell with fewer than "
        f"{summary['folds'].max()} folds, its mean adjusted for how hard those folds were (report.csv's "
        f"mean columns are the plain fold means). **bold**: the best; *: tied with it ({TIES_METHOD}, 95 %)." + titles
    )


def ensemble_lines(summary: pd.DataFrame) -> list[str]:
    """What a validation cell is, and beside it the fold ensemble where a run scored one: the score
    a run prints and predicts with is the ensemble's, which the cells (one model each) are not."""
    from klue_tc.report.plots import row_labels

    line = (
        "Each cell: the mean of the fold models' validation macro-F1, each fold's model alone. A run that "
        "trains all folds prints (last line, metrics.json's validation_f1) and `python -m klue_tc.predict` "
        "uses the fold ensemble instead: the fold models' averaged probabilities"
    )
    scored = summary[summary["validation_ensemble_f1"].notna()]
    if scored.empty:
        return [line + "; no run here scored one (each job trained one fold)."]
    labels = summary["tokenizer"] + " / " + row_labels(summary) + " / L" + summary["layers"].astype(str)
    table = pd.DataFrame(
        {
            "fold models' mean": scored["validation_f1"].map("{:.3f}".format),
            "fold ensemble": scored["validation_ensemble_f1"].map("{:.3f}".format),
        }
    ).set_axis(labels[scored.index])
    return [line + ":", "", *markdown_table(table, ["configuration", *table.columns])]
