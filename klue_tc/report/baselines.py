"""The linear baselines (klue_tc/training/baseline.py) on the runs' own titles and folds, side by side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from klue_tc.report.loading import Recipe
from klue_tc.report.markdown import markdown_table
from klue_tc.report.sections import Findings


def linear_baselines(recipe: Optional[Recipe], directory: Path) -> list[dict]:
    """Every linear baseline's scores (summary.baseline_scores) on the runs' folds; those that
    could not be scored are left out (with a warning)."""
    from klue_tc.report.summary import baseline_scores
    from klue_tc.training.baseline import BASELINES

    if recipe is None:
        return []
    return [scores for b in BASELINES if (scores := baseline_scores(recipe, directory, b)) is not None]


def baselines_section(baselines: Sequence[dict], recipe: Optional[Recipe]) -> Findings:

    lines = ["## Linear baselines", ""]
    if not baselines:
        return Findings.left_out("linear baselines", "the runs name no common data file and folds")
    rule = (
        "each fold's setting chosen on its inner split (the titles the neural models choose their epoch on)"
        if recipe is not None and recipe.inner_fraction is not None
        else "one fixed setting, as the runs chose on the scored fold"
    )
    table = pd.DataFrame(
        {
            "CV macro-F1": [
                f"{b['f1']:.3f} ± {b['f1_std']:.3f}" if not math.isnan(b["f1_std"]) else f"{b['f1']:.3f}"
                for b in baselines
            ],
            "validation macro-F1": [f"{b['validation_f1']:.3f}" for b in baselines],
            "setting per fold": [
                f"{b['setting_name']} " + (", ".join(b["C"]) if b["C"] else f"{b['default_setting']} (fixed)")
                for b in baselines
            ],
        },
        index=[b["name"] for b in baselines],
    )
    lines += [
        f"On the runs' own training titles and folds ({baselines[0]['folds']} folds), {rule}; the validation "
        "score is the mean of the fold models'. NB-SVM (Wang & Manning 2012): binarised character "
        "1-3-grams, each class's features scaled by their naive-Bayes log-count ratio, a linear SVM per "
        "class (one-vs-rest) with its weights interpolated towards their mean magnitude by beta.",
        "",
        *markdown_table(table, ["baseline", *table.columns]),
        "",
    ]
    return Findings(lines)
