"""The records that cross files: a fold's result, a run's result, and the CV summary of folds.

Saved and loaded here only (JSON, written atomically): the results store keeps one `FoldResult` per
(configuration, fold), a run directory's `metrics.json` is a `RunResult`, and the report reads both.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import numpy as np


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file.
    The file gets the permissions the user's umask gives a new file (0644 typically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=2))


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


def run_metrics(
    describe: Describe,
    config_hash: str,
    sweep: Optional[str],
    cv_folds: int,
    folds: list[FoldResult],
    validation: Optional[dict],
    reused: list[FoldResult],
) -> dict:
    """A run directory's `metrics.json` (the command-line contract's keys first)."""
    f1, accuracy = CVSummary.of([r.f1 for r in folds]), CVSummary.of([r.accuracy for r in folds])
    speed = CVSummary.of([r.train_samples_per_s for r in folds if r.train_samples_per_s is not None])
    codes = {r.code.label() for r in folds if r.code}
    return {
        **asdict(describe),
        "config_hash": config_hash,
        "sweep": sweep,
        "folds": [r.to_dict() for r in folds],
        "cv_folds": cv_folds,
        "cv_f1_mean": f1.mean,
        "cv_f1_std": f1.std,
        "cv_f1_n": f1.n,
        "cv_accuracy_mean": accuracy.mean,
        "cv_accuracy_std": accuracy.std,
        "train_samples_per_s": speed.mean if speed.n else None,
        "reused_folds": [
            {"fold": r.fold, "finished_at": r.finished_at, "code": r.code.label() if r.code else None} for r in reused
        ],
        "code_versions": sorted(codes),
        **(validation or {}),
    }
