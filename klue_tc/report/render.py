"""The report as text: report.md from its sections, in the order the report's contents give them
(klue_tc/report/contents.py), and the terminal's rich tables."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from klue_tc.report.context import Report


def to_markdown(report: Report) -> str:
    """report.md: every section of the report's contents that has something to show, in order."""
    return "\n".join("\n".join(section.lines(report)) for section in report.contents if section.shows(report))


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
