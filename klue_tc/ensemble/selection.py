"""Ensemble selection (Caruana et al. 2004, "Ensemble selection from libraries of models"): greedy
forward selection with replacement. Each round adds the member whose addition gives the averaged
probabilities the best score on the out-of-fold predictions (every training title scored by the
fold model that did not train on it): the lowest log-loss (the default; ties go to the higher
macro-F1) or the highest macro-F1 (ties to the lower log-loss), then the member listed first. A
member may be added again, so the counts are its weights. The rounds stop after `patience` without
a gain, or at `max_rounds`; the ensemble kept is the prefix of the rounds with the best score (the
first of equals). Nothing but the out-of-fold predictions and the training titles' classes is read.

Log-loss is the default because it is smooth: by macro-F1, a member that only adds noise can win a
round by breaking near ties the right way on these titles, which no other titles repeat."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from klue_tc.report.title_bootstrap import macro_f1
from klue_tc.training.calibration import SMALLEST

MAX_ROUNDS = 50
PATIENCE = 10
F1, LOG_LOSS = "f1", "log_loss"
METRICS = (F1, LOG_LOSS)


def confusion(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """Counts, rows the true class."""
    pairs = np.asarray(labels, dtype=np.int64) * classes + np.asarray(predicted, dtype=np.int64)
    return np.bincount(pairs, minlength=classes * classes).reshape(classes, classes)


def macro_f1_of(labels: np.ndarray, probs: np.ndarray) -> float:
    """Macro-F1 of the classes of largest probability, over the classes seen (as scikit-learn's)."""
    return float(macro_f1(confusion(labels, probs.argmax(1), probs.shape[1])))


@dataclass(frozen=True)
class Selection:
    counts: tuple[int, ...]  # per member: how often it was chosen (its weight, before normalising)
    order: tuple[int, ...]  # the members added, round by round (the kept rounds)
    f1: tuple[float, ...]  # the out-of-fold macro-F1 after each round run
    log_loss: tuple[float, ...]  # and the log-loss
    kept_rounds: int  # the prefix of the rounds kept
    metric: str = LOG_LOSS  # what chose

    @property
    def weights(self) -> np.ndarray:
        counts = np.asarray(self.counts, dtype=np.float64)
        return counts / counts.sum()

    @property
    def oof_f1(self) -> float:
        return self.f1[self.kept_rounds - 1]

    @property
    def oof_log_loss(self) -> float:
        return self.log_loss[self.kept_rounds - 1]


def greedy_selection(
    oof: Sequence[np.ndarray],
    labels: np.ndarray,
    max_rounds: int = MAX_ROUNDS,
    patience: int = PATIENCE,
    metric: str = LOG_LOSS,
) -> Selection:
    """`oof`: each member's (titles, classes) out-of-fold probabilities, as they enter the average."""
    if not oof:
        raise ValueError("no member to select from")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric}")
    labels = np.asarray(labels, dtype=np.int64)
    rows = np.arange(len(labels))
    total = np.zeros(oof[0].shape, dtype=np.float64)
    chosen: list[int] = []
    f1s: list[float] = []
    losses: list[float] = []
    for size in range(1, max_rounds + 1):
        best = None
        for position, member in enumerate(oof):
            average = (total + member) / size
            f1 = macro_f1_of(labels, average)
            loss = float(-np.log(np.clip(average[rows, labels], SMALLEST, None)).mean())
            score = (f1, -loss) if metric == F1 else (-loss, f1)
            if best is None or score > best[0]:
                best = (score, f1, loss, position)
        chosen.append(best[3])
        f1s.append(best[1])
        losses.append(best[2])
        total += oof[best[3]]
        objective = f1s if metric == F1 else [-v for v in losses]
        if size - (int(np.argmax(objective)) + 1) >= patience:
            break
    kept = int(np.argmax(f1s if metric == F1 else [-v for v in losses])) + 1
    counts = np.bincount(chosen[:kept], minlength=len(oof))
    return Selection(tuple(int(c) for c in counts), tuple(chosen[:kept]), tuple(f1s), tuple(losses), kept, metric)
