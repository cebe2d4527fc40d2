"""Scoring a labelled validation set with each fold's model alone and with the fold ensemble."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

from klue_tc.core.config import EVAL_BATCH_SIZE
from klue_tc.data.titles import LABEL_NAMES, LabelledTitles
from klue_tc.store.records import FoldResult, FoldValidation, RunValidation, ValidationScore
from klue_tc.training.inference import ensemble_probs


def score_predictions(
    truth: np.ndarray, predicted: np.ndarray, source: str, label_names: Sequence[str] = LABEL_NAMES
) -> ValidationScore:
    classes = range(len(label_names))
    per_class = f1_score(truth, predicted, average=None, labels=classes, zero_division=0)
    return ValidationScore(
        f1=float(f1_score(truth, predicted, average="macro")),
        accuracy=float(accuracy_score(truth, predicted)),
        size=len(truth),
        source=source,
        per_class_f1={name: float(v) for name, v in zip(label_names, per_class)},
        confusion_matrix=confusion_matrix(truth, predicted, labels=classes).tolist(),
    )


def score_run(
    records: list[FoldResult], validation: LabelledTitles, batch_size: int = EVAL_BATCH_SIZE
) -> RunValidation:
    """The fold ensemble (averaged probabilities) on the validation titles: what the run predicts."""
    scored = records[0].validation if len(records) == 1 else None
    if scored and scored.confusion_matrix and (scored.source, scored.size) == (validation.source, len(validation)):
        score = scored  # a one-fold ensemble is that fold's model, scored on these titles as it finished
    else:
        predicted = ensemble_probs(records, validation.texts, batch_size).argmax(1)
        score = score_predictions(validation.labels, predicted, validation.source, validation.label_names)
    alone = [FoldValidation(r.fold, r.validation.f1, r.validation.accuracy) for r in records if r.validation]
    return RunValidation(score, alone)
