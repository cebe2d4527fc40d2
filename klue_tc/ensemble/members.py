"""The candidate members of an ensemble: each configuration's fold models, and each linear
baseline's, with their out-of-fold probabilities on the training titles (each title scored by the
fold model that did not train on it) and each fold model's on the validation titles."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from klue_tc.store.records import FoldResult, TitlePredictions
from klue_tc.training.calibration import logits_of, tempered

NEURAL, LINEAR = "neural", "linear"


@dataclass
class Member:
    key: str  # the configuration's results key, or the baseline's short name
    name: str  # as the tables show it
    kind: str  # NEURAL or LINEAR
    oof: np.ndarray  # (training titles, classes), by the titles' rows
    validation: Optional[list[np.ndarray]]  # each fold model's (validation titles, classes); None: not scored
    votes: bool = False  # the records kept classes only: one-hot votes stand in for probabilities
    temperature: float = 1.0  # chosen on `oof` (klue_tc/training/calibration.py)
    # What serves it: the fold records (NEURAL) or the fitted fold models' files and settings (LINEAR)
    folds: list[Any] = field(default_factory=list)
    fold_validation_f1: Optional[float] = None  # the mean of its fold models' alone
    restore: Optional[Callable[[], None]] = None  # makes fold model files that are gone again, where it can

    def calibrated(self, probs: np.ndarray) -> np.ndarray:
        return probs if self.votes else tempered(logits_of(probs), self.temperature)

    @property
    def calibrated_oof(self) -> np.ndarray:
        return self.calibrated(self.oof)

    def fold_ensemble(self) -> Optional[np.ndarray]:
        """The mean of its fold models' calibrated probabilities on the validation titles."""
        return None if self.validation is None else self.fold_mean(self.validation)

    def fold_mean(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The mean of its fold models' calibrated probabilities `parts` (one array a fold) on some titles."""
        return np.mean([self.calibrated(p) for p in parts], axis=0)


@dataclass
class Titles:
    """The classes of the titles every member is scored on: the training titles (by row) and the
    validation titles (None where none were scored)."""

    labels: np.ndarray
    validation_labels: Optional[np.ndarray]
    classes: int = 0  # the classes the members' probabilities span


def as_probs(titles: TitlePredictions, classes: int) -> np.ndarray:
    """The kept probabilities, float32; one-hot predicted classes where the record kept none."""
    if titles.probs is not None:
        return titles.probs.astype(np.float32)
    return np.eye(classes, dtype=np.float32)[titles.predicted.astype(int)]


@dataclass(frozen=True)
class Candidate:
    """A configuration's fold records, read into what a member needs, before they are matched."""

    member: Member
    labels: np.ndarray  # the training titles' classes, by row
    validation_labels: Optional[np.ndarray]


def member_from_folds(
    key: str, name: str, folds: Sequence[FoldResult], classes: int
) -> tuple[Optional[Candidate], Optional[str]]:
    """The configuration's member, or None and the line saying why it cannot be one."""
    if any(r.predictions is None for r in folds):
        return None, f"{name}: its records keep no per-title predictions"
    index = np.concatenate([r.predictions.scored.index for r in folds])
    titles = len(index)
    if len(np.unique(index)) != titles or index.min() < 0 or index.max() != titles - 1:
        return None, f"{name}: its {len(folds)} folds do not score every training title once"
    oof = np.zeros((titles, classes), dtype=np.float32)
    labels = np.zeros(titles, dtype=np.int64)
    for record in folds:
        scored = record.predictions.scored
        oof[scored.index] = as_probs(scored, classes)
        labels[scored.index] = scored.label
    votes = any(r.predictions.scored.probs is None for r in folds)
    validation, validation_labels = None, None
    parts = [r.predictions.validation for r in folds]
    if all(p is not None for p in parts) and all(
        np.array_equal(p.index, parts[0].index) and np.array_equal(p.label, parts[0].label) for p in parts
    ):
        validation = [as_probs(p, classes) for p in parts]
        votes = votes or any(p.probs is None for p in parts)
        validation_labels = parts[0].label.astype(np.int64)
    alone = [r.validation.f1 for r in folds if r.validation is not None]
    member = Member(
        key,
        name,
        NEURAL,
        oof,
        validation,
        votes=votes,
        folds=list(folds),
        fold_validation_f1=float(np.mean(alone)) if len(alone) == len(folds) else None,
    )
    if votes:  # one-hot throughout: a member never mixes probabilities and votes
        member.oof = np.eye(classes, dtype=np.float32)[oof.argmax(1)]
        if validation is not None:
            member.validation = [np.eye(classes, dtype=np.float32)[p.argmax(1)] for p in validation]
    return Candidate(member, labels, validation_labels), None


def configuration_names(records: Sequence[FoldResult]) -> dict[str, str]:
    """Each configuration's label as the report names it; where two share one, the pretraining seed
    that tells them apart (a replicated cell's seeds are members of their own), else the key's start."""
    from klue_tc.report.replicates import pretraining_seed
    from klue_tc.report.sections import configurations

    labels = configurations(records)["label"]
    seeds = {r.config_hash: pretraining_seed(r) for r in records}
    named = {
        key: label if seeds[key] is None else f"{label}, pretraining seed {seeds[key]}" for key, label in labels.items()
    }
    shared = labels[labels.duplicated(keep=False)]
    told_apart = pd.Series({key: named[key] for key in shared.index}).duplicated(keep=False)
    return {
        key: label if key not in shared.index else f"{label} ({key[:6]})" if told_apart[key] else named[key]
        for key, label in labels.items()
    }


def classes_of(records: Sequence[FoldResult]) -> int:
    """The classes the records' probabilities span, else those their scores name."""
    from klue_tc.report.loading import class_count

    for record in records:
        if record.predictions is not None and record.predictions.scored.probs is not None:
            return int(record.predictions.scored.probs.shape[1])
    return max(class_count(r) for r in records)


def neural_members(records: Sequence[FoldResult]) -> tuple[list[Member], Optional[Titles], list[str]]:
    """A member per configuration whose folds score every training title once, all on the same
    titles (the most common title set; the others are left out, each in one line)."""
    if not records:
        return [], None, []
    classes = classes_of(records)
    names = configuration_names(records)
    by_key: dict[str, list[FoldResult]] = {}
    for record in records:
        by_key.setdefault(record.config_hash, []).append(record)
    candidates, notes = [], []
    for key in names:  # the report's order
        folds = sorted(by_key[key], key=lambda r: r.fold)
        candidate, why = member_from_folds(key, names[key], folds, classes)
        if candidate is None:
            notes.append(f"{why}: left out")
        else:
            candidates.append(candidate)
    if not candidates:
        return [], None, notes
    signature = Counter(c.labels.tobytes() for c in candidates).most_common(1)[0][0]
    kept = [c for c in candidates if c.labels.tobytes() == signature]
    notes += [f"{c.member.name}: trained on other titles than the rest: left out" for c in candidates if c not in kept]
    scored = [c.validation_labels for c in kept if c.validation_labels is not None]
    validation_labels = Counter(v.tobytes() for v in scored).most_common(1)[0][0] if scored else None
    for candidate in kept:
        if candidate.member.validation is not None and candidate.validation_labels.tobytes() != validation_labels:
            notes.append(f"{candidate.member.name}: scored other validation titles than the rest: not on validation")
            candidate.member.validation = None
    titles = Titles(kept[0].labels, np.frombuffer(validation_labels, dtype=np.int64) if scored else None, classes)
    return [c.member for c in kept], titles, notes
