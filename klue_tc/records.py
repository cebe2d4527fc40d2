"""The records that cross files: a fold's result, a run's result, and the CV summary of folds.

Saved and loaded here only (JSON, written atomically): the results store keeps one `FoldResult` per
(configuration, fold), a run directory's `metrics.json` is a `RunResult`, and the report reads both.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

import numpy as np

from klue_tc.files import atomic_write_json


@dataclass(frozen=True)
class CVSummary:
    mean: float
    std: float  # sample std (ddof 1); 0 for one fold
    n: int

    @classmethod
    def of(cls, values: list[float]) -> CVSummary:
        values = [v for v in values if v is not None and not math.isnan(v)]
        if not values:
            return cls(float("nan"), float("nan"), 0)
        return cls(float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, len(values))


@dataclass
class Describe:
    """What a configuration is, as the F1 table shows it."""

    experiment: str
    encoder: str
    ln: str
    layers: int
    head: str
    tokenizer: str


@dataclass
class CodeVersion:
    """The code that made a record's numbers: a fingerprint of klue_tc's training source, and the
    versions of the libraries whose kernels and defaults they depend on."""

    fingerprint: str
    versions: dict[str, str]

    def label(self) -> str:
        return f"{self.fingerprint} ({', '.join(f'{k} {v}' for k, v in sorted(self.versions.items()))})"


@dataclass
class ValidationScore:
    f1: float
    accuracy: float
    size: int
    source: str
    per_class_f1: dict[str, float] = field(default_factory=dict)
    confusion_matrix: list[list[int]] = field(default_factory=list)  # rows: true label, columns: predicted


@dataclass
class FoldResult:
    fold: int
    f1: float
    accuracy: float
    best_epoch: int  # 1-based, as the progress lines count
    epochs_run: int
    train_samples_per_s: Optional[float]
    time_to_first_step_s: Optional[float]
    train_seconds: float  # the fold's wall time from data preparation to its last checkpoint
    train_size: int
    val_size: int
    checkpoint: Optional[str]
    tokenizer_dir: str
    describe: Optional[Describe] = None
    config_hash: str = ""
    precision: str = ""
    code: Optional[CodeVersion] = None
    data_source: str = ""
    finished_at: str = ""  # ISO time, UTC
    device: str = ""  # what trained it: the GPU's name, or the CPU's model
    threads: int = 0  # torch's CPU threads
    validation: Optional[ValidationScore] = None  # this fold's model alone on the validation set
    pretrained: Optional[dict] = None  # the stored pretrained encoder it started from: key, path, corpus

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict) -> FoldResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in payload.items() if k in known}
        for key, kind in (("describe", Describe), ("code", CodeVersion), ("validation", ValidationScore)):
            if isinstance(values.get(key), dict):
                values[key] = kind(**values[key])
        return cls(**values)

    def save(self, path: Path) -> None:
        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> FoldResult:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


@dataclass
class RunResult:
    """A run directory's `metrics.json`: the configuration, its folds and their summary (the
    command-line contract's keys at the top level), and the fold ensemble's validation score."""

    describe: Describe
    config_hash: str
    sweep: Optional[str]
    cv_folds: int
    folds: list[FoldResult]
    reused_folds: list[int] = field(default_factory=list)  # found in the results store, not trained now
    reused_from_other_code: list[int] = field(default_factory=list)  # of those, made by other code
    validation: dict = field(default_factory=dict)  # validation_f1, validation_accuracy, ... (evaluate.score_run)

    def to_dict(self) -> dict:
        f1, accuracy = CVSummary.of([r.f1 for r in self.folds]), CVSummary.of([r.accuracy for r in self.folds])
        speed = CVSummary.of([r.train_samples_per_s for r in self.folds if r.train_samples_per_s is not None])
        return {
            **asdict(self.describe),
            "config_hash": self.config_hash,
            "sweep": self.sweep,
            "folds": [r.to_dict() for r in self.folds],
            "cv_folds": self.cv_folds,
            "cv_f1_mean": f1.mean,
            "cv_f1_std": f1.std,
            "cv_f1_n": f1.n,
            "cv_accuracy_mean": accuracy.mean,
            "cv_accuracy_std": accuracy.std,
            "train_samples_per_s": speed.mean if speed.n else None,
            "reused_folds": self.reused_folds,
            "reused_from_other_code": self.reused_from_other_code,
            "code_versions": sorted({r.code.label() for r in self.folds if r.code}),
            **self.validation,
        }

    @classmethod
    def from_dict(cls, payload: dict) -> RunResult:
        describe = Describe(**{f.name: payload[f.name] for f in fields(Describe)})
        return cls(
            describe,
            payload["config_hash"],
            payload.get("sweep"),
            payload.get("cv_folds", 0),
            [FoldResult.from_dict(r) for r in payload["folds"]],
            payload.get("reused_folds", []),
            payload.get("reused_from_other_code", []),
            {k: v for k, v in payload.items() if k.startswith("validation_")},
        )

    def save(self, path: Path) -> None:
        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> RunResult:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
