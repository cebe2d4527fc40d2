"""The report's tables and texts written whole or not at all: each into a temporary file beside it,
then renamed over it, so that a report read while a sweep rewrites it, or one interrupted while it
writes, never holds half a table (the previous one stays until the new one is complete; figures:
klue_tc/core/figures.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from klue_tc.core.files import atomic_write, atomic_write_text


def write_csv(frame: pd.DataFrame, path: Path | str) -> None:
    atomic_write(Path(path), lambda tmp: frame.to_csv(tmp, index=False), suffix=".csv")


def write_text(text: str, path: Path | str) -> None:
    atomic_write_text(Path(path), text)
