"""The ensemble on the validation titles against what it must beat, and a distilled student against
the ensemble, title by title: the same bootstrap draws of the titles for both sides (paired), the
percentile interval of the difference in macro-F1 (klue_tc/report/title_bootstrap.py's resampling)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from klue_tc.report.grid_model import CONFIDENCE
from klue_tc.report.title_bootstrap import RESAMPLES, resampled_f1, title_draws


@dataclass(frozen=True)
class Difference:
    """Macro-F1 of the ensemble minus that of `versus` (the side's name; `key`, its key among the
    scored sides, where it is one), with its interval."""

    versus: str
    difference: float
    low: float
    high: float
    key: Optional[str] = None

    @property
    def verdict(self) -> str:
        return "ahead" if self.low > 0 else "behind" if self.high < 0 else "tied"


class PairedTitles:
    """Every side scored on the same resamples of the validation titles; with `class_weights` (per
    class), each title weighs its class's, as if the titles came in another class mix."""

    def __init__(
        self,
        labels: np.ndarray,
        classes: int,
        resamples: int = RESAMPLES,
        seed: int = 0,
        class_weights: Optional[np.ndarray] = None,
    ):
        self.labels = np.asarray(labels, dtype=np.int64)
        self.classes = classes
        weights = np.ones(len(labels), dtype=np.float32)
        if class_weights is not None:
            weights = np.asarray(class_weights, dtype=np.float32)[self.labels]
        self.draws = title_draws(np.random.default_rng(seed), len(labels), resamples) * weights
        self.every = weights[None, :]

    def f1(self, predicted: np.ndarray) -> float:
        return float(resampled_f1(self.labels, predicted, self.every, self.classes)[0])

    def interval(self, predicted: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
        values = resampled_f1(self.labels, predicted, self.draws, self.classes)
        tail = (1 - confidence) / 2
        return tuple(float(v) for v in np.quantile(values, [tail, 1 - tail]))

    def difference(
        self,
        versus: str,
        ours: np.ndarray,
        theirs: np.ndarray,
        confidence: float = CONFIDENCE,
        key: Optional[str] = None,
    ) -> Difference:
        values = resampled_f1(self.labels, ours, self.draws, self.classes) - resampled_f1(
            self.labels, theirs, self.draws, self.classes
        )
        tail = (1 - confidence) / 2
        low, high = np.quantile(values, [tail, 1 - tail])
        point = self.f1(ours) - self.f1(theirs)
        return Difference(versus, point, float(low), float(high), key)


def signed(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:+.4f}"


# The target of a distilled student: at most this many macro-F1 points below the ensemble.
WITHIN_POINTS = 1.0


@dataclass(frozen=True)
class StudentScore:
    """The distilled student on the ensemble's validation titles."""

    source: str  # its run directory
    f1: float
    low: float
    high: float
    versus: Difference  # the ensemble minus the student

    @property
    def within_target(self) -> bool:
        return self.versus.difference <= WITHIN_POINTS / 100
