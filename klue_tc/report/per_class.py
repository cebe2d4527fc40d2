"""The best configurations class by class on the validation titles, the best one's confusion matrix,
and the best few's learning curves. "Best" is by CV macro-F1, never by the validation titles shown."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from klue_tc.core.figures import save_figure
from klue_tc.report.markdown import markdown_table
from klue_tc.report.sections import Findings, configurations, ranked_by_cv
from klue_tc.store.records import FoldResult

BEST_FOR_CLASSES, BEST_FOR_CURVES = 5, 3


def per_class_f1(matrix: np.ndarray) -> np.ndarray:
    """Each class's F1 from a confusion matrix (rows the true class): 2 TP / (true + predicted);
    0 for a class neither present nor predicted, as scikit-learn's zero_division=0."""
    matrix = np.asarray(matrix, dtype=float)
    true, predicted = matrix.sum(axis=1), matrix.sum(axis=0)
    denominator = true + predicted
    return np.divide(2 * np.diag(matrix), denominator, out=np.zeros(len(matrix)), where=denominator > 0)


def label_names(records: Sequence[FoldResult]) -> Optional[list[str]]:
    """The classes in id order, as the validation scores name them (None: no record was scored)."""
    for record in records:
        if record.validation is not None and record.validation.per_class_f1:
            return list(record.validation.per_class_f1)
    return None


def validation_matrices(records: Sequence[FoldResult], key: str) -> list[np.ndarray]:
    """A configuration's fold models' confusion matrices on the validation titles."""
    return [
        np.asarray(r.validation.confusion_matrix)
        for r in sorted(records, key=lambda r: r.fold)
        if r.config_hash == key and r.validation is not None and r.validation.confusion_matrix
    ]


def class_table(
    records: Sequence[FoldResult], keys: Sequence[str], names: list[str], baselines: Sequence[dict] = ()
) -> pd.DataFrame:
    """Rows the classes, columns the configurations (and baselines): per-class validation F1, the
    mean over the fold models."""
    designs = configurations(records)
    columns = {}
    for key in keys:
        matrices = validation_matrices(records, key)
        if matrices:
            columns[designs.at[key, "label"]] = np.mean([per_class_f1(m) for m in matrices], axis=0)
    for baseline in baselines:
        if baseline.get("validation_confusion"):
            columns[baseline["name"]] = np.mean([per_class_f1(m) for m in baseline["validation_confusion"]], axis=0)
    return pd.DataFrame(columns, index=names)


def per_class_section(records: Sequence[FoldResult], directory: Path, baselines: Sequence[dict] = ()) -> Findings:

    names = label_names(records)
    lines = ["## The best configurations class by class", ""]
    ranked = list(ranked_by_cv(records).index)
    scored = [key for key in ranked if validation_matrices(records, key)]
    if names is None or not scored:
        return Findings.left_out("per-class F1 and confusion matrix", "no record holds a validation confusion matrix")
    best = scored[:BEST_FOR_CLASSES]
    table = class_table(records, best, names, baselines)
    lines += [
        f"Per-class F1 on the validation titles of the {len(best)} configurations best by CV macro-F1 "
        "(the mean of their fold models), beside the linear baselines; the last row is the macro mean.",
        "",
        *markdown_table(
            pd.concat([table, table.mean().to_frame("macro").T]).map(lambda v: f"{v:.2f}").T,
            ["configuration", *names, "macro"],
        ),
        "",
    ]
    from klue_tc.core.figures import plot_confusion

    designs = configurations(records)
    plots = [
        plot_confusion(
            np.sum(validation_matrices(records, best[0]), axis=0),
            names,
            directory / "confusion_best.png",
            f"{designs.at[best[0], 'label']}: its fold models on the validation titles",
        )
    ]
    lines += [
        f"{plots[0].name}: the confusion matrix of {designs.at[best[0], 'label']} on the validation "
        "titles, its fold models' predictions summed, each row shared out over the predicted classes.",
        "",
    ]
    curves = [key for key in ranked if any(r.learning_curve for r in records if r.config_hash == key)]
    if curves:
        chosen = curves[:BEST_FOR_CURVES]
        plots.append(plot_learning_curves(records, chosen, directory / "learning_curves.png"))
        lines += [
            f"{plots[-1].name}: the learning curves of the {len(chosen)} best configurations with curves "
            "(macro-F1 per epoch on the inner split, which chooses the epoch, and on the held-out fold, "
            "which is scored once at the chosen epoch; thin: each fold, thick: their mean).",
            "",
        ]
    else:
        lines += ["No learning curves: the records are of code that did not keep them.", ""]
    return Findings(lines, plots)


def plot_learning_curves(records: Sequence[FoldResult], keys: Sequence[str], path: Path) -> Path:
    """One panel per configuration, sharing both axes: macro-F1 per epoch, the inner split dashed
    and the held-out fold solid; a dot marks each fold's chosen epoch."""
    designs = configurations(records)
    fig = Figure(figsize=(4 * len(keys) + 1.8, 3.6), layout="constrained")
    axes = fig.subplots(1, len(keys), sharex=True, sharey=True, squeeze=False)[0]
    for ax, key in zip(axes, keys):
        folds = [r for r in records if r.config_hash == key and r.learning_curve]
        for series, style, colour in (("inner_f1", "--", "C1"), ("f1", "-", "C0")):
            curves = pd.DataFrame(
                [{"fold": r.fold, "epoch": p.epoch, "f1": getattr(p, series)} for r in folds for p in r.learning_curve]
            )
            for _, curve in curves.groupby("fold"):
                ax.plot(curve.epoch, curve.f1, linestyle=style, color=colour, alpha=0.3, lw=1)
            mean = curves.groupby("epoch")["f1"].mean()
            ax.plot(
                mean.index,
                mean.values,
                linestyle=style,
                color=colour,
                lw=2.2,
                label="inner split (chooses)" if series == "inner_f1" else "held-out fold (scored)",
            )
        # By the epoch each point names: a wide-path fold's curve starts at its epoch 0, the model
        # before its first step, which it may have kept.
        chosen = [(p.epoch, p.f1) for r in folds for p in r.learning_curve if p.epoch == r.best_epoch]
        if chosen:
            ax.plot(*zip(*chosen), "o", color="C0", label="chosen epoch")
        ax.set(title=designs.at[key, "label"], xlabel="epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole: no tick at 1.5
        ax.title.set_fontsize("small")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("macro-F1")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize="small")
    return save_figure(fig, path)
