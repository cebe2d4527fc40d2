"""The CV-to-validation gap read from the data: the class mix of the training titles against the
validation file's, and each configuration's validation macro-F1 reweighted to the training mix.

Reweighting gives every validation title of class c the weight p_train(c) / p_val(c), so that the
weighted titles have the training titles' class mix; macro-F1 is then computed with those sample
weights (scikit-learn's f1_score). A class's recall does not move (its titles are all weighted
alike); its precision does, because the titles of other classes that are wrongly predicted as it
now count at their training share.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from klue_tc.core.errors import KlueTcError
from klue_tc.report.loading import Recipe
from klue_tc.report.markdown import markdown_table
from klue_tc.report.per_class import validation_matrices
from klue_tc.report.sections import Findings, configurations, ranked_by_cv
from klue_tc.store.records import FoldResult

log = logging.getLogger(__name__)

SHOWN = 5


def weighted_macro_f1(matrix: np.ndarray, class_weights: np.ndarray) -> float:
    """Macro-F1 of the titles a confusion matrix counts (rows the true class), each title weighted
    by its true class's weight: the same as f1_score(y, predicted, sample_weight=weights[y])."""
    from sklearn.metrics import f1_score

    matrix = np.asarray(matrix, dtype=float)
    true, predicted = (axis.ravel() for axis in np.indices(matrix.shape))
    weights = (matrix * np.asarray(class_weights, dtype=float)[:, None]).ravel()
    keep = weights > 0
    return float(
        f1_score(
            true[keep],
            predicted[keep],
            labels=np.arange(len(matrix)),
            average="macro",
            sample_weight=weights[keep],
            zero_division=0,
        )
    )


def importance_weights(train_counts: np.ndarray, validation_counts: np.ndarray) -> np.ndarray:
    """p_train(c) / p_val(c) per class (0 for a class the validation titles lack)."""
    train = np.asarray(train_counts, dtype=float) / np.sum(train_counts)
    validation = np.asarray(validation_counts, dtype=float) / np.sum(validation_counts)
    return np.divide(train, validation, out=np.zeros_like(train), where=validation > 0)


def class_counts(recipe: Recipe) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(class names, the runs' training titles per class, the validation file's titles per class)."""
    from klue_tc.data.titles import stratified_subsample, training_titles, validation_titles

    data = stratified_subsample(training_titles(recipe.data, announce_fallback=False), recipe.data.limit, recipe.seed)
    validation = validation_titles(recipe.data, data.label_names)
    if validation is None:
        raise KlueTcError("the runs name no validation file")
    k = len(data.label_names)
    return list(data.label_names), np.bincount(data.labels, minlength=k), np.bincount(validation.labels, minlength=k)


def reweighted_scores(records: Sequence[FoldResult], class_weights: np.ndarray) -> pd.DataFrame:
    """Per configuration: its CV macro-F1, its validation macro-F1 as scored and reweighted to the
    training mix (each the mean over its fold models), indexed by config_hash."""
    rows = []
    for key in dict.fromkeys(r.config_hash for r in records):
        matrices = validation_matrices(records, key)
        if not matrices:
            continue
        rows.append(
            {
                "config_hash": key,
                "validation_f1_scored": np.mean([weighted_macro_f1(m, np.ones(len(m))) for m in matrices]),
                "validation_f1_train_mix": np.mean([weighted_macro_f1(m, class_weights) for m in matrices]),
            }
        )
    frame = pd.DataFrame(rows, columns=["config_hash", "validation_f1_scored", "validation_f1_train_mix"])
    return frame.set_index("config_hash")


def class_mix_section(
    records: Sequence[FoldResult], recipe: Optional[Recipe], baselines: Sequence[dict] = ()
) -> Findings:

    lines = ["## Class mix: training titles against the validation file", ""]
    if recipe is None:
        return Findings.left_out("class mix", "the runs do not agree on one data file and fold setting")
    try:
        names, train, validation = class_counts(recipe)
    except KlueTcError as err:
        return Findings.left_out("class mix", str(err))
    weights = importance_weights(train, validation)
    mix = pd.DataFrame(
        {
            "training titles": [f"{n:,} ({n / train.sum():.1%})" for n in train],
            "validation titles": [f"{n:,} ({n / validation.sum():.1%})" for n in validation],
            "weight p_train / p_val": [f"{w:.2f}" for w in weights],
        },
        index=names,
    )
    lines += [*markdown_table(mix, ["class", *mix.columns]), ""]
    scores = reweighted_scores(records, weights)
    if scores.empty:
        return Findings(lines + ["No reweighted scores: no record holds a validation confusion matrix.", ""])
    cv = ranked_by_cv(records)
    scores = scores.join(cv.rename("cv_f1"))
    gap = (scores.cv_f1 - scores.validation_f1_scored).mean()
    left = (scores.cv_f1 - scores.validation_f1_train_mix).mean()
    lines += [
        "Each configuration's validation macro-F1 reweighted to the training titles' class mix: every "
        "validation title of class c weighs p_train(c) / p_val(c) (the last column above), and macro-F1 "
        "is computed with those sample weights. A class's recall does not move under such weights; its "
        "precision does, since the other classes' titles wrongly given to it now count at their training "
        "share. Where the reweighted score moves towards the CV score, the class mix explains that part of "
        "the CV-to-validation gap; what remains is the validation titles being harder (or drawn otherwise) "
        f"class by class. Over the {len(scores)} configurations the gap CV − validation is "
        f"{gap:+.3f} as scored and {left:+.3f} at the training mix "
        f"(the mix accounts for {(gap - left) / gap:.0%} of it)."
        if gap
        else "",
        "",
    ]
    designs = configurations(records)
    shown = scores.loc[[k for k in cv.index if k in scores.index][:SHOWN]]
    table = pd.DataFrame(
        {
            "CV macro-F1": shown.cv_f1,
            "validation as scored": shown.validation_f1_scored,
            "validation at the training mix": shown.validation_f1_train_mix,
        }
    )
    table.index = designs.loc[shown.index, "label"]
    for baseline in baselines:
        if baseline.get("validation_confusion"):
            matrices = baseline["validation_confusion"]
            table.loc[baseline["name"]] = [
                baseline["f1"],
                np.mean([weighted_macro_f1(m, np.ones(len(names))) for m in matrices]),
                np.mean([weighted_macro_f1(m, weights) for m in matrices]),
            ]
    lines += [
        f"The {len(shown)} configurations best by CV macro-F1 and the linear baselines "
        "(every configuration's in report.csv, validation_f1_train_mix):",
        "",
        *markdown_table(table.map(lambda v: f"{v:.3f}"), ["configuration", *table.columns]),
        "",
    ]
    return Findings(lines, columns=scores[["validation_f1_train_mix"]])
