"""The ensemble as a teacher: its out-of-fold probabilities for every training title written as soft
labels (klue_tc/data/soft_labels.py) that a student job learns from (`distill.teacher=`), and the
student's validation score placed beside the ensemble's, on the same titles."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from klue_tc.core.errors import KlueTcError
from klue_tc.data.soft_labels import SOFT_LABELS_FILE, SoftLabels
from klue_tc.ensemble.members import as_probs
from klue_tc.ensemble.scoring import PairedTitles, StudentScore
from klue_tc.ensemble.stage import Ensemble


def write_soft_labels(ensemble: Ensemble, path: Optional[Path] = None) -> tuple[Optional[Path], Optional[str]]:
    """The ensemble's out-of-fold probabilities for the runs' training titles, by their text, in
    `path` (default: beside ensemble.md); or None and the line saying why they cannot be written."""
    from klue_tc.report.loading import run_recipe
    from klue_tc.training.baseline import runs_titles

    recipe = run_recipe(ensemble.directory)
    if recipe is None:
        return None, "no soft labels: the runs name no common data file and folds (their config.yaml)"
    try:
        data, _ = runs_titles(recipe.data, recipe.seed)
    except KlueTcError as err:
        return None, f"no soft labels: {err}"
    if not np.array_equal(data.labels, ensemble.titles.labels):
        return None, "no soft labels: the runs' config.yaml names other titles than the records were scored on"
    target = path or ensemble.directory / SOFT_LABELS_FILE
    return SoftLabels(list(data.texts), ensemble.oof_probs(), tuple(data.label_names)).save(target), None


def student_score(ensemble: Ensemble, run_dir: Path) -> StudentScore:
    """The student job's validation predictions (its run directory's metrics.json, a final model or
    its fold ensemble) against the ensemble's, title by title."""
    from klue_tc.store.records import RunResult

    metrics = Path(run_dir) / "metrics.json"
    if not metrics.is_file():
        raise KlueTcError(f"--student {run_dir}: no metrics.json (give the student job's run directory)")
    folds = RunResult.load(metrics).folds
    scored = [r.predictions.validation for r in folds if r.predictions is not None]
    labels, probs = ensemble.titles.validation_labels, ensemble.validation_probs()
    if labels is None or probs is None:
        raise KlueTcError("--student: the ensemble is not scored on validation titles to compare it on")
    if not scored or len(scored) != len(folds) or any(not np.array_equal(s.label, labels) for s in scored):
        raise KlueTcError(f"--student {run_dir}: its models were not scored on the ensemble's validation titles")
    predicted = np.mean([as_probs(s, probs.shape[1]) for s in scored], axis=0).argmax(1)
    paired = PairedTitles(labels, probs.shape[1])
    low, high = paired.interval(predicted)
    versus = paired.difference("the distilled student", probs.argmax(1), predicted)
    return StudentScore(str(run_dir), paired.f1(predicted), low, high, versus)
