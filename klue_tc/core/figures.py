"""Figures as every stage draws them: Hangul class names in any font, each file written whole (a
figure read while it is rewritten is the old one or the new one), and a run's confusion matrix."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Optional, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from klue_tc.core.files import atomic_write

FIGURE_DPI = 120


def save_figure(fig: Figure, path: Path | str) -> Path:
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=FIGURE_DPI), suffix=path.suffix)  # the suffix names the format
    return path


@functools.cache
def hangul_family() -> Optional[str]:
    """A font family with Hangul, so that class names are drawn as they are: an installed one, else
    NanumGothic from the koreanize-matplotlib package (a dependency; its file is added, not the
    package imported, whose import would change every figure's font)."""
    from matplotlib import font_manager

    for font in font_manager.fontManager.ttflist:
        if "Nanum" in font.name or "Noto Sans KR" in font.name or "Noto Sans CJK" in font.name:
            return font.name
    spec = importlib.util.find_spec("koreanize_matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "fonts" / "NanumGothic.ttf"
    if not path.is_file():
        return None
    font_manager.fontManager.addfont(str(path))
    return font_manager.FontProperties(fname=str(path)).get_name()


def hangul_text() -> matplotlib.rc_context:
    """Latin text in matplotlib's font, Hangul from hangul_family's (matplotlib falls back glyph by glyph)."""
    family = hangul_family()
    return matplotlib.rc_context({"font.family": ["DejaVu Sans", family] if family else ["DejaVu Sans"]})


def plot_confusion(matrix, labels: Sequence[str], path: str | Path, title: str = "") -> Path:
    """Rows the true class, coloured by the share of its titles each predicted class got (labelled
    colour bar) and annotated with the counts; the classes by their names, in every figure alike."""
    matrix = np.asarray(matrix)
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    with hangul_text():
        fig = Figure(figsize=(7.5, 6), layout="constrained")
        ax = fig.subplots()
        image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
        for (i, j), count in np.ndenumerate(matrix):
            colour = "white" if shares[i, j] > 0.6 else "black"
            ax.text(j, i, str(count), ha="center", va="center", fontsize="small", color=colour)
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set(xlabel="predicted class", ylabel="true class", title=title)
        ax.title.set_fontsize("small")
        fig.colorbar(image, ax=ax, label="share of the true class's titles")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return save_figure(fig, path)
