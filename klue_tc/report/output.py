"""The report's files written whole or not at all: each into a temporary file beside it, then renamed
over it, so that a report read while a sweep rewrites it, or one interrupted while it writes, never
holds half a table or plot (the previous one stays until the new one is complete)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from klue_tc.files import atomic_write, atomic_write_text

FIGURE_DPI = 120


def save_figure(fig: Figure, path: Path | str) -> Path:
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=FIGURE_DPI), suffix=path.suffix)  # the suffix names the format
    return path


def write_csv(frame: pd.DataFrame, path: Path | str) -> None:
    atomic_write(Path(path), lambda tmp: frame.to_csv(tmp, index=False), suffix=".csv")


def write_text(text: str, path: Path | str) -> None:
    atomic_write_text(Path(path), text)
