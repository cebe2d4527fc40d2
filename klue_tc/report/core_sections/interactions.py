"""The Interactions section: does one factor's effect depend on another, on matched sets (interactions.csv)."""

from __future__ import annotations

import pandas as pd

from klue_tc.report.context import Report
from klue_tc.report.interactions import verdicts as interaction_verdicts
from klue_tc.report.markdown import METRICS, interval_text, markdown_table


def interactions_section(report: Report) -> list[str]:
    """The interaction families, where the report's records vary two factors together."""
    return interaction_lines(report.interactions) if report.interactions is not None else []


def interaction_lines(table: pd.DataFrame) -> list[str]:
    """The interaction families as one table (a column per metric), then their verdicts."""
    if table.empty:  # the records vary no two factors together: nothing to say
        return []

    def interval(row) -> str:
        return f"**{interval_text(row)}**" if row.kind == "interaction" else interval_text(row)

    main = table[table["exclusion"] == table["exclusion"].iloc[0]]  # "declared" first where any applies
    frame = main.assign(
        text=main.apply(interval, axis=1),
        what=main.apply(lambda r: f"{r.family}: {r.comparison} ({r.confidence * 100:.4g} %)", axis=1),
    )
    pivot = frame.pivot_table(index="what", columns="metric", values="text", aggfunc="first", sort=False)
    columns = [m for m in METRICS if m in pivot.columns]
    lines = [
        "## Interactions",
        "",
        "Does one factor's effect depend on another? Contrasts of the grid model on matched sets only "
        "(cells alike in every other factor, each set with a cell at every level of both factors, named "
        "below), the intervals as the marginal effects': within a family they are read at once, each at "
        "Bonferroni's level (shown); **bold**: the difference of differences itself (interactions.csv).",
        "",
        *markdown_table(pivot[columns].fillna("–"), ["contrast", *(METRICS[m] for m in columns)]),
        "",
        *matched_lines(main),
        *[f"- {line}" for line in interaction_verdicts(main)],
        "",
    ]
    if len(main) < len(table):
        lines += interactions_both_ways(main, table[table["exclusion"] != main["exclusion"].iloc[0]])
    return lines


def matched_lines(table: pd.DataFrame) -> list[str]:
    """Each family's matched sets, once where every metric has the same."""
    lines = []
    for family, part in table.groupby("family", sort=False):
        texts = dict(zip(part["metric"], part["matched"]))
        if len(set(texts.values())) == 1:
            lines.append(f"- Matched sets, {family}: {next(iter(texts.values()))}.")
        else:
            lines += [f"- Matched sets, {family}, {METRICS[m]}: {text}." for m, text in texts.items()]
    return lines


def interaction_signs(part: pd.DataFrame) -> dict[str, int]:
    """Each difference of differences' verdict: +1 / -1 where its interval lies above / below zero, else 0."""
    rows = part[part["kind"] == "interaction"]
    return {r.comparison: (r.low > 0) - (r.high < 0) for r in rows.itertuples()}


def interactions_both_ways(declared: pd.DataFrame, plain: pd.DataFrame) -> list[str]:
    """The verdicts of each family the declared exclusion changes, as read on every configuration."""
    lines = []
    for (metric, family), part in plain.groupby(["metric", "family"], sort=False):
        mine = declared[(declared["metric"] == metric) & (declared["family"] == family)]
        if interaction_signs(mine) != interaction_signs(part):
            if mine.empty:
                lines.append(f"- with the declared exclusion, {METRICS[metric]}, {family}: no matched set")
            lines += [f"- without the declared exclusion: {line}" for line in interaction_verdicts(part)]
            lines += [f"  {m}" for m in matched_lines(part)]
    return (
        [
            "The declared exclusion changes these verdicts; read on every configuration (interactions.csv's rows "
            "with exclusion none):",
            "",
            *lines,
            "",
        ]
        if lines
        else []
    )
