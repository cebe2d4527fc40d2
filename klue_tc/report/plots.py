"""The figures of runs and reports: F1 by layer count, the whole grid as heatmaps, the marginal
effects as a forest plot, a run's validation confusion matrix.

All use matplotlib's object API (Figure renders with Agg), so no display or pyplot state is involved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

EFFECT_TITLES = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}
# What a heatmap's colour bar says its colours are, by the summary column drawn.
VALUE_LABELS = {
    "f1_mean": "CV macro-F1 (mean over folds)",
    "validation_f1": "validation macro-F1 (mean of the fold models)",
}
# Pre- and post-LN of one encoder share its colour and differ in line style, in every figure.
LN_LINESTYLES = {"post": "-", "pre": "--"}


def encoder_colour(encoder: str) -> str:
    """One colour per encoder, the same in every figure: the registry's (the study's) order."""
    from klue_tc.registry import ENCODERS

    names = ENCODERS.names()
    return f"C{names.index(encoder) % 10}" if encoder in names else f"C{len(names) % 10}"


def design_style(encoder: str, ln: str, pretrain: str = "none") -> dict:
    """Line and marker of a design: colour the encoder, line style its LayerNorm placement, hollow
    markers for a pretrained encoder (filled: from scratch)."""
    colour = encoder_colour(encoder)
    return {
        "color": colour,
        "linestyle": LN_LINESTYLES.get(ln, ":"),
        "marker": "o" if pretrain == "none" else "s",
        "markerfacecolor": colour if pretrain == "none" else "white",
    }


def design_legend(fig: Figure, frame: pd.DataFrame, extra: list[tuple[str, str]] = ()) -> None:
    """One legend beside the panels that keys the encoders' colours, the line styles and markers,
    and `extra` (label, grey line style) entries, each once."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=encoder_colour(e), lw=2, label=e) for e in dict.fromkeys(frame["encoder"])]
    handles += [
        Line2D([], [], color="black", linestyle=LN_LINESTYLES.get(ln, ":"), label=f"{ln}-LN")
        for ln in dict.fromkeys(frame["ln"])
    ]
    pretrains = list(dict.fromkeys(frame["pretrain"]))
    if len(pretrains) > 1:
        handles += [
            Line2D(
                [],
                [],
                color="black",
                linestyle="",
                marker=design_style("", "", p)["marker"],
                markerfacecolor="black" if p == "none" else "white",
                label="from scratch" if p == "none" else f"pretrained: {p}",
            )
            for p in pretrains
        ]
    handles += [Line2D([], [], color="grey", linestyle=style, label=label) for label, style in extra]
    fig.legend(handles=handles, loc="outside right center", fontsize="small")


def row_parts(summary: pd.DataFrame) -> list[str]:
    """encoder and ln, plus head when the report holds more than one head per encoder, and
    pretrain when it holds more than one starting point."""
    several_heads = summary.groupby("encoder")["head"].nunique().max() > 1
    parts = ["encoder", "ln", "head"] if several_heads else ["encoder", "ln"]
    return parts + (["pretrain"] if summary["pretrain"].nunique() > 1 else [])


def row_labels(summary: pd.DataFrame) -> pd.Series:
    """'encoder / ln' (/ head) (/ pretrain): a table row, a plot line."""
    return summary[row_parts(summary)].astype(str).agg(" / ".join, axis=1)


BASELINE_STYLES = (":", "-.")  # grey, one per linear baseline, in the order the report tables them


def draw_baselines(ax, baselines: Sequence[dict], key: str) -> None:
    """Each linear baseline's score under `key` ('f1' or 'validation_f1') as a horizontal grey line."""
    for baseline, style in zip(baselines, BASELINE_STYLES):
        if pd.notna(baseline.get(key)):
            ax.axhline(baseline[key], color="grey", linestyle=style, linewidth=1)


def baseline_keys(baselines: Sequence[dict]) -> list[tuple[str, str]]:
    """The legend entries of draw_baselines' lines."""
    return [(b["name"], style) for b, style in zip(baselines, BASELINE_STYLES)]


def plot_f1_by_layers(
    summary: pd.DataFrame,
    path: Path,
    value: str = "f1_mean",
    spread: str = "f1_std",
    baselines: Sequence[dict] = (),
    ylabel: str = "CV macro-F1 (mean ± std over folds)",
) -> Path:
    """One panel per tokenizer, one line per design with error bars (colour the encoder, line style
    the LayerNorm placement, hollow markers a pretrained encoder); the linear baselines grey. The
    panels share both axes."""
    tokenizers = list(dict.fromkeys(summary["tokenizer"]))
    fig = Figure(figsize=(5 * len(tokenizers) + 1.5, 4), layout="constrained")
    axes = fig.subplots(1, len(tokenizers), sharex=True, sharey=True, squeeze=False)[0]
    design = ["encoder", "ln", "head", "pretrain"]
    several_heads = summary.groupby("encoder")["head"].nunique().max() > 1
    for ax, tokenizer in zip(axes, tokenizers):
        for (encoder, ln, head, pretrain), line in summary[summary.tokenizer == tokenizer].groupby(design, sort=False):
            line = line.sort_values("layers")
            style = design_style(encoder, ln, pretrain)
            if several_heads:  # a head is told by its marker, beyond what the legend keys
                style["marker"] = {"cls": "o", "mean": "^", "blstm": "D"}.get(head, "v")
            ax.errorbar(line.layers, line[value], yerr=line[spread], capsize=3, **style)
        draw_baselines(ax, baselines, "f1" if value == "f1_mean" else value)
        ax.set(title=f"tokenizer: {tokenizer}", xlabel="layers")
        ax.set_xticks(sorted(summary["layers"].unique()))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    # One legend beside the panels, so that it covers no line and keys each style once.
    design_legend(fig, summary, baseline_keys(baselines))
    fig.savefig(path, dpi=120)
    return Path(path)


# YNAT's classes in English, for figures drawn without a Hangul font.
YNAT_ENGLISH = {
    "IT과학": "IT/sci",
    "경제": "econ",
    "사회": "society",
    "생활문화": "life/culture",
    "세계": "world",
    "스포츠": "sports",
    "정치": "politics",
}


def shown_labels(labels: list[str]) -> tuple[list[str], str]:
    """Class names as a figure can draw them: as given with a Hangul font; without one, ids, and a
    line naming them (in English for YNAT's classes) for the figure's title."""
    from matplotlib import font_manager

    hangul = any(
        "CJK" in f.name or "Nanum" in f.name or "Noto Sans KR" in f.name for f in font_manager.fontManager.ttflist
    )
    if hangul or all(label.isascii() for label in labels):
        return list(labels), ""
    return [str(i) for i in range(len(labels))], "ids: " + ", ".join(
        f"{i} {YNAT_ENGLISH.get(n, n if n.isascii() else '?')}" for i, n in enumerate(labels)
    )


def plot_confusion_matrix(matrix: list[list[int]], labels: list[str], path: Path) -> Path:
    from sklearn.metrics import ConfusionMatrixDisplay

    fig = Figure(figsize=(7, 6), layout="constrained")
    ax = fig.subplots()
    shown, key = shown_labels(labels)
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=shown).plot(ax=ax, colorbar=False, cmap="Blues")
    if key:
        ax.set_title(key, fontsize=8)
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
    fig.colorbar(image, ax=list(axes), label=VALUE_LABELS.get(value, value))
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
    axes = fig.subplots(1, len(metrics), sharex=True, sharey=True, squeeze=False)[0]
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
