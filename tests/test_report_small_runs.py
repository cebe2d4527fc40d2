"""Reports that fit a single run and a small sweep: no sections or files with nothing to say, the
baseline's recipe where the folds are known, the fold ensemble beside the fold models' mean, job
time in a unit that reads, and plots that stay readable with a far-out cell."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from test_effects import synthetic_folds
from test_plots import summary_of
from test_report import metrics, write_metrics

from klue_tc.data.titles import LABEL_NAMES
from klue_tc.report.loading import run_recipe
from klue_tc.report.write import write_report

CONFIG = "data:\n  path: train.tsv\n  limit: {limit}\ncv:\n  folds: {folds}\n  seed: 42\nseed: 42\n"


def single_run(directory: Path, seconds: float = 53.0) -> Path:
    """A finished run of one configuration, 3 folds, its fold ensemble scored on validation titles."""
    payload = metrics(
        "sentencepiece",
        "trans_blstm",
        "post",
        3,
        [(0, 0.50), (1, 0.56), (2, 0.53)],
        train_seconds=seconds / 3,
        validation={"f1": 0.465, "accuracy": 0.5, "size": 56, "source": "valid.tsv"},
    )
    payload |= {"validation_f1": 0.633, "validation_accuracy": 0.68, "validation_size": 56}
    write_metrics(directory, payload)
    (directory / "config.yaml").write_text(CONFIG.format(limit=3000, folds=3), encoding="utf-8")
    return directory


def test_a_run_stopped_before_it_finished_does_not_take_the_baseline_row_away(tmp_path):
    """`make report DIR=outputs/runs/trans_blstm` after a full-size run was stopped: its config.yaml
    (no metrics.json beside it) and Hydra's copies name no record, and leave the recipe alone."""
    experiment = tmp_path / "trans_blstm"
    single_run(experiment / "2026-01-01_12-00-00")
    stopped = experiment / "2026-01-01_11-00-00"
    stopped.mkdir()
    (stopped / "config.yaml").write_text(CONFIG.format(limit="null", folds=5), encoding="utf-8")
    (stopped / ".hydra").mkdir()
    (stopped / ".hydra" / "config.yaml").write_text(CONFIG.format(limit="null", folds=5), encoding="utf-8")

    recipe = run_recipe(experiment)

    assert recipe is not None and recipe.data.limit == 3000 and recipe.cv.folds == 3


def test_runs_that_differ_only_in_a_validation_file_share_their_baseline(tmp_path, caplog):
    """The README's small run, then the same with data.validation_path=: the same folds."""
    single_run(tmp_path / "a")
    with_validation = single_run(tmp_path / "b") / "config.yaml"
    with_validation.write_text(
        with_validation.read_text().replace("  limit: 3000\n", "  limit: 3000\n  validation_path: v.tsv\n")
    )

    recipe = run_recipe(tmp_path)

    assert recipe is not None and recipe.data.validation_path == "v.tsv"
    assert "no baseline row" not in caplog.text


@pytest.mark.integration
def test_a_single_runs_report_has_no_empty_section_or_file_and_labels_both_validation_scores(tmp_path, monkeypatch):
    run = single_run(tmp_path / "run")
    from klue_tc.report import plots

    drawn = {}
    save = plots.save_figure
    monkeypatch.setattr(
        plots, "save_figure", lambda fig, path: (drawn.update({Path(path).name: fig}), save(fig, path))[1]
    )

    write_report(run, baseline=False)

    markdown = (run / "report.md").read_text(encoding="utf-8")
    for empty in ("## Marginal effects", "## Interactions", "No interaction", "No marginal effects", "No verdicts"):
        assert empty not in markdown
    assert not any((run / name).exists() for name in ("claims.md", "effects.csv", "interactions.csv"))
    assert "One configuration: the original study's claims compare configurations; none is judged." in markdown
    assert "Training time in all: 53 seconds of job time" in markdown
    assert "| sentencepiece / trans_blstm / post / L3 | 0.465 | 0.633 |" in markdown
    assert "the mean of the fold models' validation macro-F1" in markdown and "the fold ensemble" in markdown
    csv = pd.read_csv(run / "report.csv")
    assert csv.loc[0, "validation_f1"] == pytest.approx(0.465) and csv.loc[0, "validation_ensemble_f1"] == 0.633
    heatmap = drawn["grid_heatmap_validation.png"]
    texts = [t.get_text() for ax in heatmap.axes for t in ax.texts]
    assert "0.465\nens. 0.633" in texts
    assert "the fold ensemble, what the run predicts" in heatmap.get_supxlabel()


def test_job_time_reads_in_seconds_minutes_or_hours():
    from klue_tc.report.core_sections.cost import job_time

    assert [job_time(s) for s in (53, 1500, 4 * 3600)] == ["53 seconds", "25 minutes", "4.0 hours"]


def with_stalled_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """Two configurations that learnt nothing among cells of 0.7 ± a few hundredths."""
    summary = summary.copy()
    summary.loc[summary.index[:2], "f1_mean"] = [0.153, 0.176]
    return summary


@pytest.fixture
def drawn(monkeypatch) -> list[Figure]:
    """The figures drawn, not written."""
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **_: saved.append(figure))
    return saved


def test_a_far_out_cell_is_drawn_beside_the_colour_scale_not_stretching_it(tmp_path, drawn):
    summary = with_stalled_cells(summary_of(synthetic_folds()))
    from klue_tc.report.plots import plot_grid_heatmap

    plot_grid_heatmap(summary, tmp_path / "heatmap.png")

    (figure,) = drawn
    images = [image for ax in figure.axes for image in ax.get_images()]
    others = summary["f1_mean"].iloc[2:]
    assert all(image.norm.vmin == pytest.approx(others.min()) for image in images)  # the rest span the colours
    assert "0.153" in [t.get_text() for ax in figure.axes for t in ax.texts]  # the outlier still read
    colour_bar = next(ax for ax in figure.axes if ax.get_ylabel() == "CV macro-F1 (mean over folds)")
    assert colour_bar._colorbar.extend == "min" and "far-out" in figure.get_supxlabel()


def test_a_far_out_cell_leaves_the_f1_axis_to_the_others(tmp_path, drawn):
    summary = with_stalled_cells(summary_of(synthetic_folds()))
    from klue_tc.report.plots import plot_f1_by_layers

    plot_f1_by_layers(summary, tmp_path / "layers.png")

    (figure,) = drawn
    panels = [ax for ax in figure.axes if ax.get_title()]
    low, high = panels[0].get_ylim()
    assert 0.2 < low < summary["f1_mean"].iloc[2:].min() and high > summary["f1_mean"].max()
    marked = [t.get_text() for ax in panels for t in ax.texts]
    assert "0.153" in marked and "0.176" in marked


def test_a_small_grids_colour_bar_label_fits_in_its_figure(tmp_path, drawn):
    summary = summary_of(synthetic_folds()).head(1)
    from klue_tc.report.plots import plot_grid_heatmap

    plot_grid_heatmap(summary, tmp_path / "one.png")

    (figure,) = drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    label = next(ax for ax in figure.axes if ax.get_ylabel()).yaxis.label.get_window_extent(renderer)
    box = figure.bbox
    assert box.y0 <= label.y0 and label.y1 <= box.y1 and label.x1 <= box.x1


def test_confusion_matrices_name_the_classes_in_one_style(tmp_path, drawn):
    """The run's confusion_matrix.png and the report's confusion_best.png come from one function,
    with the classes' own names (Hangul included, in a font that has it)."""
    import klue_tc.jobs.run as run
    import klue_tc.report.per_class as per_class
    from klue_tc.core import figures
    from klue_tc.report import plots

    assert not hasattr(plots, "plot_confusion") and not hasattr(per_class, "plot_confusion")
    matrix = np.eye(len(LABEL_NAMES), dtype=int) * 5
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*missing from font.*")
        figures.plot_confusion(matrix, list(LABEL_NAMES), tmp_path / "c.png", "title")
        (figure,) = drawn
        ax = figure.axes[0]
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(figure).draw()  # a glyph missing from the fonts would warn here
    assert [t.get_text() for t in ax.get_xticklabels()] == list(LABEL_NAMES)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(LABEL_NAMES)
    assert "plot_confusion(" in Path(run.__file__).read_text(encoding="utf-8")


def test_learning_curves_tick_whole_epochs(tmp_path, drawn):
    from klue_tc.report.per_class import plot_learning_curves
    from klue_tc.store.records import Describe, EpochScores, FoldResult

    curve = [EpochScores(e, 0.5 + e / 10, 0, 0, 0.4 + e / 10, 0, 0) for e in (1, 2)]
    describe = Describe("cnn", "cnn", "post", 2, "cls", "mecab")
    folds = [
        FoldResult(k, 0.5, 0.5, 2, 2, None, None, 1.0, 10, 5, None, "", describe, "a", learning_curve=curve)
        for k in range(2)
    ]

    plot_learning_curves(folds, ["a"], tmp_path / "curves.png")

    (figure,) = drawn
    ticks = [tick for tick in figure.axes[0].get_xticks() if 1 <= tick <= 2]
    assert ticks and all(float(tick).is_integer() for tick in ticks)


@pytest.mark.integration
def test_a_small_sweeps_report_has_no_heading_with_nothing_under_it(tmp_path):
    """A smoke sweep (4 configurations, 2 folds, no validation file, no config.yaml): what its records
    cannot show is one list at the end, not a heading each over a 'No ...' line."""
    cells = [("sentencepiece", e, "post", n) for e in ("transformer", "trans_blstm") for n in (2, 3)]
    for i, cell in enumerate(cells):
        for k in range(2):
            write_metrics(tmp_path / f"{i}-{k}", metrics(*cell, [(k, 0.5 + 0.02 * i + 0.01 * k)], val_size=250))

    write_report(tmp_path, baseline=False)

    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    sections = markdown.split("\n## ")[1:]
    for section in sections:
        body = [line for line in section.splitlines()[1:] if line.strip()]
        assert not (len(body) == 1 and body[0].startswith("No ")), section
    left_out = next(s for s in sections if s.startswith("Not in this report"))
    assert "- linear baselines: " in left_out and "- per-class F1 and confusion matrix: " in left_out


@pytest.mark.integration
def test_a_note_the_sweep_file_declares_is_said_once_in_the_report_and_at_the_sweeps_end(tmp_path, monkeypatch, capsys):
    """sweeps/smoke.yaml declares report.note (its scores are not meant to mean anything): report.md
    says it under its title, and the report's and the sweep's last lines end with it."""
    import yaml
    from omegaconf import OmegaConf

    import klue_tc.report.write
    from klue_tc.jobs.sweeps import compose_sweep
    from klue_tc.report.cli import main
    from klue_tc.report.sweep_callback import SweepReportCallback

    note = compose_sweep("smoke").report.note
    assert "end to end" in note and "\n" not in note
    config = CONFIG.format(limit=500, folds=2) + yaml.safe_dump({"report": {"note": note}}, width=1000)
    for i, layers in enumerate((2, 3)):
        for k in range(2):
            job = tmp_path / "sweep" / f"L{layers}" / f"fold{k}"
            write_metrics(job, metrics("sentencepiece", "transformer", "post", layers, [(k, 0.05 + 0.01 * i)]))
            (job / "config.yaml").write_text(config, encoding="utf-8")

    assert main([str(tmp_path / "sweep"), "--no-baseline"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(f"beside it); note: {note}")
    head = (tmp_path / "sweep" / "report.md").read_text(encoding="utf-8").split("\n## ")[0]
    assert head.count(note) == 1

    monkeypatch.setattr(klue_tc.report.write, "write_report", lambda directory, **kwargs: None)
    sweep = {"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}, "logger": {"name": "none", "wandb": {}}}
    SweepReportCallback().on_multirun_end(OmegaConf.create({**sweep, "sweep": "smoke"}))
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"report: {tmp_path / 'sweep' / 'report.md'}; note: {note}"
    assert out.count(note) == 1
