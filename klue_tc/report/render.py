"""The report as text: report.md from its sections (klue_tc/report/contents.py), the Markdown helpers
the sections share, and the terminal's rich tables."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from klue_tc.report.context import Report

METRICS = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}
BASELINE = "TF-IDF char_wb 1-3-grams + linear SVM"


def markdown_table(frame: pd.DataFrame, header: list[str]) -> list[str]:
    rows = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    return rows + [
        "| " + " | ".join(map(str, [index, *values])) + " |" for index, values in zip(frame.index, frame.values)
    ]


def titles_part(row) -> str:
    """'; titles low..high': the crossed bootstrap's interval, where the titles were resampled too."""
    low, high = getattr(row, "titles_low", float("nan")), getattr(row, "titles_high", float("nan"))
    return "" if pd.isna(low) else f"; titles {low:+.3f}..{high:+.3f}"


def interval_text(row) -> str:
    """'+0.007 (+0.005..+0.009)': a contrast with its grid-model interval (and the titles' one)."""
    if pd.isna(row.low):
        return f"{row.difference:+.3f} (no interval)"
    return f"{row.difference:+.3f} ({row.low:+.3f}..{row.high:+.3f}{titles_part(row)})"


def to_markdown(report: Report) -> str:
    """report.md: every section of the report's contents that has something to show, in order."""
    from klue_tc.report.contents import SECTIONS

    return "\n".join("\n".join(section.lines(report)) for section in SECTIONS if section.shows(report))


def print_tables(tables: Mapping[str, pd.DataFrame]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for tokenizer, table in tables.items():
        out = Table(title=f"CV macro-F1, tokenizer: {tokenizer}")
        out.add_column(table.index.name)
        for layers in table.columns:
            out.add_column(f"{layers} layers", justify="right")
        for row, values in zip(table.index, table.values):
            out.add_row(str(row), *[v.replace("**", "") for v in values])
        console.print(out)
