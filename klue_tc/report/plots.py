"""The figures of runs and reports: F1 by layer count, the whole grid as heatmaps, the marginal
effects as a forest plot (a run's confusion matrix: klue_tc/core/figures.py).

All use matplotlib's object API (Figure renders with Agg), so no display or pyplot state is involved.
A cell far below (or above) the rest, such as a configuration that learnt nothing, is drawn beside
the scale rather than stretching it (robust_range), so that the other cells stay told apart.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from klue_tc.core.figures import save_figure
from klue_tc.report.labels import has_wide_path

EFFECT_TITLES = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}
# What a heatmap's colour bar says its colours are, by the summary column drawn.
VALUE_LABELS = {
    "f1_mean": "CV macro-F1 (mean over folds)",
    "validation_f1": "validation macro-F1 (fold models' mean)",
}
# Beside a value, where the summary has it: the fold ensemble's validation score beside the fold
# models' mean (the column, and how a heatmap cell names it).
SECOND_LINES = {"validation_f1": ("validation_ensemble_f1", "ens.")}
# Pre- and post-LN of one encoder share its colour and differ in line style, in every figure.
LN_LINESTYLES = {"post": "-", "pre": "--"}
# Tukey's far-out fences: a value more than this many interquartile ranges beyond the quartiles is
# drawn beside the scale; the range is taken as at least MIN_SPREAD F1, so a tight grid keeps its cells.
FAR_OUT_IQR, MIN_SPREAD = 3.0, 0.02
OUT_OF_SCALE = "#bdbdbd"  # a far-out heatmap cell's colour: no colour of the scale


def robust_range(values) -> tuple[float, float]:
    """The range a colour scale or F1 axis spans: every value but the far-out ones (FAR_OUT_IQR),
    with five values or more; all of them with fewer."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return 0.0, 1.0
    if len(values) < 5:
        return float(values.min()), float(values.max())
    q1, q3 = np.percentile(values, [25, 75])
    reach = FAR_OUT_IQR * max(q3 - q1, MIN_SPREAD)
    inside = values[(values >= q1 - reach) & (values <= q3 + reach)]
    return float(inside.min()), float(inside.max())


def f1_limits(values, spreads=None, also=(), margin: float = 0.05) -> tuple[float, float]:
    """An F1 axis over the values but the far-out ones (robust_range), their error bars (`spreads`)
    and `also` (the baselines' lines), with a margin so that nothing touches its edges."""
    values = pd.Series(values, dtype=float).reset_index(drop=True)
    spreads = pd.Series(spreads if spreads is not None else 0.0, index=values.index, dtype=float).fillna(0.0)
    low, high = robust_range(values)
    inside = values.between(low, high)
    ends = pd.concat([values[inside] - spreads[inside], values[inside] + spreads[inside], pd.Series(also, dtype=float)])
    low, high = float(ends.min()), float(ends.max())
    pad = max((high - low) * margin, 0.005)
    return low - pad, high + pad


def draw_beside_axis(ax, x, y, low: float, high: float, **style) -> None:
    """Points outside the axis's (low, high), each drawn at the edge it lies beyond, as a triangle
    pointing out, with its value: a far-out cell is still seen and read."""
    for xi, yi in zip(x, y):
        if not np.isfinite(yi) or low <= yi <= high:
            continue
        edge, marker, va = (low, "v", "bottom") if yi < low else (high, "^", "top")
        ax.plot([xi], [edge], marker=marker, linestyle="", clip_on=False, color=style.get("color", "black"))
        ax.annotate(f"{yi:.3f}", (xi, edge), textcoords="offset points", xytext=(6, 0), va=va, fontsize="x-small")


def encoder_colour(encoder: str) -> str:
    """One colour per encoder, the same in every figure: the registry's (the study's) order."""
    from klue_tc.core.registry import ENCODERS

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


def design_legend(
    fig: Figure, frame: pd.DataFrame, extra: list[tuple[str, str]] = (), markers: list[tuple[str, str]] = ()
) -> None:
    """One legend beside the panels that keys the encoders' colours, the line styles and markers,
    `extra` (label, grey line style) and `markers` (label, marker) entries, each once."""
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
    handles += [Line2D([], [], color="black", linestyle="", marker=m, label=label) for label, m in markers]
    fig.legend(handles=handles, loc="outside right center", fontsize="small")


def row_parts(summary: pd.DataFrame) -> list[str]:
    """encoder and ln, plus head when the report holds more than one head per encoder or a head
    with the wide path beside it, and pretrain when it holds more than one starting point."""
    several_heads = summary.groupby("encoder")["head"].nunique().max() > 1
    shown_head = several_heads or summary["head"].map(has_wide_path).any()
    parts = ["encoder", "ln", "head"] if shown_head else ["encoder", "ln"]
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
    key = "f1" if value == "f1_mean" else value
    second = SECOND_LINES.get(value, ("",))[0]
    second = second if second in summary and summary[second].notna().any() else None
    lines = [b[key] for b in baselines if pd.notna(b.get(key))]
    low, high = f1_limits(summary[value], summary[spread], [*lines, *(summary[second].dropna() if second else [])])
    for ax, tokenizer in zip(axes, tokenizers):
        for (encoder, ln, head, pretrain), line in summary[summary.tokenizer == tokenizer].groupby(design, sort=False):
            line = line.sort_values("layers")
            style = design_style(encoder, ln, pretrain)
            if several_heads:  # a head is told by its marker, beyond what the legend keys
                style["marker"] = {"cls": "o", "mean": "^", "blstm": "D"}.get(head, "v")
            inside = line[value].where(line[value].between(low, high))  # a far-out point breaks its line
            ax.errorbar(line.layers, inside, yerr=line[spread].where(inside.notna()), capsize=3, **style)
            draw_beside_axis(ax, line.layers, line[value], low, high, color=style["color"])
            if second:  # the fold ensemble, where a run scored it: a cross beside the fold models' mean
                ax.plot(line.layers, line[second], linestyle="", marker="x", markersize=8, color=style["color"])
        draw_baselines(ax, baselines, key)
        ax.set(title=f"tokenizer: {tokenizer}", xlabel="layers", ylim=(low, high))
        ax.set_xticks(sorted(summary["layers"].unique()))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    # One legend beside the panels, so that it covers no line and keys each style once.
    design_legend(fig, summary, baseline_keys(baselines), [("fold ensemble", "x")] if second else [])
    return save_figure(fig, path)


# The smallest heatmap height (inches) that leaves room for the colour bar's label on a grid of one row.
MIN_HEATMAP_HEIGHT = 3.6


def plot_grid_heatmap(summary: pd.DataFrame, path: str | Path, value: str = "f1_mean") -> Path:
    """One panel per tokenizer: rows encoder / LN, columns layers, cells annotated, one shared colour
    scale over robust_range (a far-out cell is grey, its value shown, the colour bar's end pointed).
    For the validation score each cell shows the fold models' mean and, where a run scored it, the
    fold ensemble's (what the run predicts) below it.

    Rows and panels keep the summary's order (report.summarise_configs sorts it in the study's order).
    """
    second, second_name = SECOND_LINES.get(value, (None, ""))
    second = second if second in summary and summary[second].notna().any() else None
    labelled = summary.assign(row=row_labels(summary))
    rows = list(dict.fromkeys(labelled["row"]))
    layers = sorted(labelled["layers"].unique())
    tokenizers = list(dict.fromkeys(labelled["tokenizer"]))

    def grid_of(part: pd.DataFrame, column: str) -> np.ndarray:
        # Every panel on the same rows and columns, so a cell's place means the same design in each.
        table = part.pivot_table(index="row", columns="layers", values=column, aggfunc="mean", dropna=False)
        return table.reindex(index=rows, columns=layers).to_numpy(dtype=float)

    values = labelled[value].dropna()
    vmin, vmax = robust_range(values)
    below, above = bool((values < vmin).any()), bool((values > vmax).any())
    if vmax - vmin < 1e-9:  # one value (a single run): a scale around it
        vmin, vmax = vmin - 0.01, vmax + 0.01
    colours = matplotlib.colormaps["viridis"].with_extremes(under=OUT_OF_SCALE, over=OUT_OF_SCALE)
    height = max(MIN_HEATMAP_HEIGHT, 0.9 + (0.6 if second else 0.45) * len(rows))
    fig = Figure(figsize=(1.2 + 0.9 * len(layers) * len(tokenizers) + 2.4, height), layout="constrained")
    axes = fig.subplots(1, len(tokenizers), sharey=True, squeeze=False)[0]
    for ax, (tokenizer, part) in zip(axes, labelled.groupby("tokenizer", sort=False)):
        grid = grid_of(part, value)
        extra = grid_of(part, second) if second else np.full_like(grid, np.nan)
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=colours, vmin=vmin, vmax=vmax, aspect="auto")
        for (i, j), cell in np.ndenumerate(grid):
            inside = vmin <= cell <= vmax
            # Dark text on the bright end of viridis and on grey, light text elsewhere, so every label reads.
            colour = "grey" if np.isnan(cell) else "white" if inside and cell < vmin + 0.6 * (vmax - vmin) else "black"
            text = "–" if np.isnan(cell) else f"{cell:.3f}"
            if not np.isnan(extra[i, j]):
                text += f"\n{second_name} {extra[i, j]:.3f}"
            ax.text(j, i, text, ha="center", va="center", fontsize="small", color=colour)
        ax.set(title=f"tokenizer: {tokenizer}", xlabel="layers", xticks=range(len(layers)), xticklabels=layers)
        ax.set_yticks(range(len(rows)), rows)
    extend = "both" if below and above else "min" if below else "max" if above else "neither"
    fig.colorbar(image, ax=list(axes), label=VALUE_LABELS.get(value, value), extend=extend)
    notes = [f"{second_name}: the fold ensemble, what the run predicts"] if second else []
    notes += ["grey: beyond the colour scale (far-out cells)"] if below or above else []
    if notes:  # below the panels, wrapped to the figure's width: a colour bar's label has no room for it
        width = int(fig.get_figwidth() * 12)
        fig.supxlabel(textwrap.fill("; ".join(notes), width), fontsize="small")
    return save_figure(fig, path)


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
    return save_figure(fig, path)
