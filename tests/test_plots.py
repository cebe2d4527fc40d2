"""The report's figures are written as valid PNGs (their pixels are not the test's business)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from test_effects import cnn_lower, synthetic_folds

from klue_tc.report.effects import marginal_effects
from klue_tc.report.plots import plot_effects, plot_f1_by_layers, plot_grid_heatmap

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def summary_of(folds: pd.DataFrame) -> pd.DataFrame:
    return (
        folds.groupby(["tokenizer", "encoder", "ln", "head", "layers", "pretrain"], sort=False)
        .agg(f1_mean=("f1", "mean"), f1_std=("f1", "std"), folds=("fold", "nunique"))
        .reset_index()
    )


def assert_png(path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000


def test_grid_heatmap_is_written_for_a_full_and_a_partial_grid(tmp_path):
    folds = synthetic_folds(cnn_lower)
    assert_png(plot_grid_heatmap(summary_of(folds), tmp_path / "grid.png"))
    partial = summary_of(folds[(folds.tokenizer != "kobert") & ~((folds.encoder == "cnn") & (folds.layers == 6))])
    assert_png(plot_grid_heatmap(partial, tmp_path / "partial.png", value="f1_std"))


def test_effects_forest_plot_has_a_panel_per_metric(tmp_path):
    folds = synthetic_folds(cnn_lower)
    folds["validation_f1"] = folds["f1"] + np.random.default_rng(0).normal(0, 0.01, len(folds))
    effects = pd.concat(
        [marginal_effects(folds), marginal_effects(folds, "validation_f1")],
        ignore_index=True,
    )
    effects.loc[effects.index[0], ["low", "high"]] = np.nan  # one level without an interval still plots
    path = plot_effects(effects, tmp_path / "effects.png")
    assert path == tmp_path / "effects.png"
    assert_png(path)


def test_layers_plot_has_one_legend_naming_every_row_once(tmp_path, monkeypatch):
    folds = synthetic_folds(cnn_lower)
    # A row absent from the first panel must still be named in the shared legend.
    folds = folds[~((folds.tokenizer == folds.tokenizer.iloc[0]) & (folds.encoder == "cnn"))]
    summary = summary_of(folds)
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **_: saved.append(figure))
    baselines = [{"name": "TF-IDF + linear SVM", "f1": 0.8}, {"name": "NB-SVM", "f1": 0.81}]
    plot_f1_by_layers(summary, tmp_path / "layers.png", baselines=baselines)
    (figure,) = saved
    assert all(ax.get_legend() is None for ax in figure.axes)
    (legend,) = figure.legends
    names = [text.get_text() for text in legend.get_texts()]
    # Each encoder's colour and each LayerNorm placement's line style keyed once: pre and post of
    # one encoder are told apart by their line style, not by a colour of their own.
    expected = {*summary["encoder"], *(f"{ln}-LN" for ln in summary["ln"]), "TF-IDF + linear SVM", "NB-SVM"}
    assert sorted(names) == sorted(expected)
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert all(panels[0].get_shared_x_axes().joined(panels[0], ax) for ax in panels)
    post_pre = {
        (line.get_color(), line.get_linestyle())
        for ax in panels
        for line in ax.get_lines()
        if line.get_linestyle() in ("-", "--") and line.get_color() != "grey"
    }
    colours = {colour for colour, _ in post_pre}
    assert len(colours) == summary["encoder"].nunique()  # one colour per encoder, post and pre alike
    assert all({(c, "-"), (c, "--")} <= post_pre for c in colours)  # every encoder drawn both ways


def test_heatmap_colour_bar_names_what_its_colours_are(tmp_path, monkeypatch):
    summary = summary_of(synthetic_folds(cnn_lower))
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **_: saved.append(figure))
    plot_grid_heatmap(summary, tmp_path / "heatmap.png")
    (figure,) = saved
    labels = [ax.get_ylabel() for ax in figure.axes if not ax.get_title()]
    assert labels == ["CV macro-F1 (mean over folds)"]
