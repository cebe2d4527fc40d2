"""The Markdown pieces every section of the report writes with: its metric names, the reference
baseline's name, a table, a contrast with its interval. It imports nothing of the report, so any
section can use it."""

from __future__ import annotations

import pandas as pd

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
