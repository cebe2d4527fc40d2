"""The figures of runs and reports: F1 by layer count, the whole grid as heatmaps, the marginal
effects as a forest plot, a run's validation confusion matrix.

All use matplotlib's object API (Figure renders with Agg), so no display or pyplot state is involved.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

EFFECT_TITLES = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}


def row_parts(summary: pd.DataFrame) -> list[str]:
    """encoder and ln, plus head when the report holds more than one head per encoder, and
    pretrain when it holds more than one starting point."""
    several_heads = summary.groupby("encoder")["head"].nunique().max() > 1
    parts = ["encoder", "ln", "head"] if several_heads else ["encoder", "ln"]
    return parts + (["pretrain"] if "pretrain" in summary and summary["pretrain"].nunique() > 1 else [])


def row_labels(summary: pd.DataFrame) -> pd.Series:
    """'encoder / ln' (/ head) (/ pretrain): a table row, a plot line."""
    return summary[row_parts(summary)].astype(str).agg(" / ".join, axis=1)


def plot_f1_by_layers(
    summary: pd.DataFrame,
    path: Path,
    value: str = "f1_mean",
    spread: str = "f1_std",
    baseline: float | None = None,
    ylabel: str = "CV macro-F1 (mean ± std over folds)",
) -> Path:
    """One panel per tokenizer, one line per encoder / LN with error bars; the baseline dashed."""
    tokenizers = list(dict.fromkeys(summary["tokenizer"]))
    fig = Figure(figsize=(5 * len(tokenizers), 4), layout="constrained")
    axes = fig.subplots(1, len(tokenizers), sharey=True, squeeze=False)[0]
    labelled = summary.assign(row=row_labels(summary))
    colours = {row: f"C{i % 10}" for i, row in enumerate(dict.fromkeys(labelled["row"]))}  # same line, same colour
    for ax, tokenizer in zip(axes, tokenizers):
        for row, line in labelled[labelled.tokenizer == tokenizer].groupby("row", sort=False):
            line = line.sort_values("layers")
            ax.errorbar(
                line.layers, line[value], yerr=line[spread], marker="o", capsize=3, label=row, color=colours[row]
            )
        if baseline is not None:
            ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="TF-IDF + linear SVM")
        ax.set(title=f"tokenizer: {tokenizer}", xlabel="layers")
        ax.set_xticks(sorted(summary["layers"].unique()))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    # One legend beside the panels, so that it covers no line and names each row once.
    legend = {label: handle for ax in axes for handle, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(legend.values(), legend.keys(), loc="outside right center", fontsize="small")
    fig.savefig(path, dpi=120)
    return Path(path)


def plot_confusion_matrix(matrix: list[list[int]], labels: list[str], path: Path) -> Path:
    from matplotlib import font_manager
    from sklearn.metrics import ConfusionMatrixDisplay

    # Korean label names need a Hangul font; fall back to class ids, named in the title, without one.
    hangul = any(
        "CJK" in f.name or "Nanum" in f.name or "Noto Sans KR" in f.name for f in font_manager.fontManager.ttflist
    )
    english = ["IT/sci", "econ", "society", "life/culture", "world", "sports", "politics"]
    fig = Figure(figsize=(7, 6), layout="constrained")
    ax = fig.subplots()
    shown = labels if hangul else [str(i) for i in range(len(labels))]
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=shown).plot(ax=ax, colorbar=False, cmap="Blues")
    if not hangul:
        ax.set_title("ids: " + ", ".join(f"{i} {n}" for i, n in enumerate(english)), fontsize=8)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return Path(path)


def plot_grid_heatmap(summary: pd.DataFrame, path: str | Path, value: str = "f1_mean") -> Path:
    """One panel per tokenizer: rows encoder / LN, columns layers, cells annotated, one shared colour scale.

    Rows and panels keep the summary's order (report.summarise_configs sorts it in the study's order).
    """
    labelled = summary.assign(row=row_labels(summary))
    rows = list(dict.fromkeys(labelled["row"]))
    layers = sorted(labelled["layers"].unique())
    tokenizers = list(dict.fromkeys(labelled["tokenizer"]))
    # Every panel on the same rows and columns, so a cell's place means the same design in each.
    grids = {
        t: part.pivot_table(index="row", columns="layers", values=value, aggfunc="mean").reindex(
            index=rows, columns=layers
        )
        for t, part in labelled.groupby("tokenizer", sort=False)
    }
    values = labelled[value].dropna()
    vmin, vmax = (values.min(), values.max()) if len(values) else (0.0, 1.0)
    fig = Figure(figsize=(1.2 + 0.9 * len(layers) * len(tokenizers) + 2, 0.9 + 0.45 * len(rows)), layout="constrained")
    axes = fig.subplots(1, len(tokenizers), sharey=True, squeeze=False)[0]
    for ax, tokenizer in zip(axes, tokenizers):
        grid = grids[tokenizer].to_numpy(dtype=float)
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto")
        for (i, j), cell in np.ndenumerate(grid):
            # Dark text on the bright end of viridis, light text elsewhere, so every label reads.
            colour = "grey" if np.isnan(cell) else "black" if cell > vmin + 0.6 * (vmax - vmin) else "white"
            ax.text(
                j, i, "–" if np.isnan(cell) else f"{cell:.3f}", ha="center", va="center", fontsize="small", color=colour
            )
        ax.set(title=f"tokenizer: {tokenizer}", xlabel="layers", xticks=range(len(layers)), xticklabels=layers)
        ax.set_yticks(range(len(rows)), rows)
    fig.colorbar(image, ax=list(axes), label=value)
    fig.savefig(path, dpi=120)
    return Path(path)


def plot_effects(effects: pd.DataFrame, path: str | Path) -> Path:
    """A forest plot: per factor level its paired difference to the reference and its interval; 0 marked.

    One panel per metric in the frame (rows of marginal_effects, possibly several metrics concatenated).
    """
    metrics = list(dict.fromkeys(effects["metric"])) or ["f1"]
    labels = list(
        dict.fromkeys(
            f"{f}: {lvl} − {ref}" for f, lvl, ref in zip(effects["factor"], effects["level"], effects["reference"])
        )
    )
    fig = Figure(figsize=(5 * len(metrics) + 1, 1 + 0.35 * max(len(labels), 1)), layout="constrained")
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    positions = {label: i for i, label in enumerate(labels)}
    for ax, metric in zip(axes, metrics):
        part = effects[effects["metric"] == metric]
        y = [positions[f"{f}: {lvl} − {ref}"] for f, lvl, ref in zip(part["factor"], part["level"], part["reference"])]
        # A missing interval (fewer than two cells) draws the point alone rather than a zero-width bar.
        errors = np.nan_to_num([part["difference"] - part["low"], part["high"] - part["difference"]])
        ax.errorbar(part["difference"], y, xerr=errors, fmt="o", capsize=3, color="C0")
        ax.axvline(0, color="grey", linestyle="--", linewidth=1)
        ax.set(title=EFFECT_TITLES.get(metric, metric), xlabel="paired difference (95 % interval)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(labels)), labels)
    axes[0].invert_yaxis()
    fig.savefig(path, dpi=120)
    return Path(path)
