"""The records that cross files: a fold's result, a run's result, and the CV summary of folds.

Saved and loaded here only (JSON, written atomically): the results store keeps one `FoldResult` per
(configuration, fold), a run directory's `metrics.json` is a `RunResult`, and the report reads both.
"""

from __future__ import annotations

import json
import logging
import math
import zipfile
import zlib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Optional

import numpy as np

from klue_tc.core.checksums import checked_json, with_checksum
from klue_tc.core.files import atomic_write, atomic_write_json
from klue_tc.core.redaction import redact

log = logging.getLogger(__name__)

# What chose a fold's epoch and checkpoint: records made before the inner split existed chose them
# on the very fold they score (an optimistic CV F1).
SELECTED_ON_INNER_SPLIT = "inner_split"
SELECTED_ON_SCORED_FOLD = "scored_fold"
FROM_SCRATCH = "none"  # Describe.pretrain of an encoder that was not pretrained (config: pretrain=none)
NO_WIDE_PATH = "none"  # Describe.wide of a model without the wide path beside its head (config: wide=none)
# The fold record's schema, saved in it. Records without one are of older code (schema 0):
# `upgraded` reads any record as this schema, the one place that knows what older ones left out.
RECORD_SCHEMA = 1


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
    pretrain: str = FROM_SCRATCH  # the self-pretraining objective the encoder started from
    # The wide path beside the head (wide=nbsvm). Written only where it is on: a record or
    # metrics.json without it reads as "none", so those of every other job are as they were.
    wide: str = NO_WIDE_PATH

    def to_dict(self) -> dict:
        """Its fields as plain values, `wide` where the path is on."""
        values = asdict(self)
        if values["wide"] == NO_WIDE_PATH:
            del values["wide"]
        return values


@dataclass(frozen=True)
class ModelSize:
    """How big the classifier is (klue_tc/training/model_size.py counts it)."""

    # token and position tables (and the wide path's n-gram table): they grow with the vocabulary, not the design
    embedding_params: int
    non_embedding_params: int  # the blocks and the head
    forward_flops_per_title: float  # one forward pass over a title of `title_length` tokens
    title_length: int  # the median length of the fold's scored titles, in tokens
    # Measured after training, by building the model again from its config.yaml on this fold
    # (python -m klue_tc.report DIR --migrate-sizes), for a record of code older than the size.
    rebuilt: bool = False


@dataclass
class CodeVersion:
    """The code that made a record's numbers: a fingerprint of klue_tc's training source, and the
    versions of the libraries whose kernels and defaults they depend on."""

    fingerprint: str
    versions: dict[str, str]
    # The fingerprint of the numeric code every configuration shares (klue_tc/store/fingerprint.py's
    # NUMERIC_MODULES), a part of `fingerprint`, which adds the configuration's own variants: two
    # configurations of other variants differ in `fingerprint` by design, and in this only where the
    # code they share differs. None in records of older code. Not compared: `fingerprint` decides it.
    # A fold record saves it beside `code` (`shared_code`), where older code's reading skips it.
    shared: Optional[str] = field(default=None, compare=False)

    def libraries(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.versions.items()))

    def label(self) -> str:
        return f"{self.fingerprint} ({self.libraries()})"

    def shared_label(self) -> Optional[str]:
        """The part every configuration shares, with the libraries; None where the record predates it."""
        return f"{self.shared} ({self.libraries()})" if self.shared else None


@dataclass
class ValidationScore:
    f1: float
    accuracy: float
    size: int
    source: str
    per_class_f1: dict[str, float] = field(default_factory=dict)
    confusion_matrix: list[list[int]] = field(default_factory=list)  # rows: true label, columns: predicted


@dataclass
class EpochScores:
    """One point of a fold's learning curve: the inner split (which chooses the epoch) and the
    held-out fold (scored every epoch for the curve only; nothing reads it to choose)."""

    epoch: int  # 1-based; 0: the model before its first step (the wide path scores it: klue_tc/training/wide.py)
    inner_f1: float
    inner_accuracy: float
    inner_loss: float
    f1: float
    accuracy: float
    loss: float


@dataclass
class TitlePredictions:
    index: np.ndarray  # each title's row: in the job's training titles (the scored fold) or the validation file
    label: np.ndarray  # its true class
    predicted: np.ndarray  # the class predicted, from the full-precision probabilities
    # (titles, classes), float16: ample for resampling, a quarter of float64's size; None where only
    # the classes were kept (the compact file a study commits)
    probs: Optional[np.ndarray] = None

    @classmethod
    def of(cls, index: np.ndarray, label: np.ndarray, probs: np.ndarray) -> TitlePredictions:
        return cls(
            np.asarray(index, dtype=np.int32),
            np.asarray(label, dtype=np.int16),
            np.asarray(probs).argmax(1).astype(np.int16),
            np.asarray(probs, dtype=np.float16),
        )


@dataclass
class FoldPredictions:
    """A fold model's per-title predictions on the titles it is scored on, so that intervals can
    resample titles: saved beside its record by the results store (klue_tc/store/results.py)."""

    scored: TitlePredictions
    validation: Optional[TitlePredictions] = None

    def save(self, path: Path, with_probs: bool = True) -> None:
        """Without `with_probs`, the classes alone: a few kB a fold, small enough for git."""
        names = ("index", "label", "predicted", "probs") if with_probs else ("index", "label", "predicted")
        arrays = {
            f"{part}_{name}": getattr(titles, name)
            for part, titles in (("scored", self.scored), ("validation", self.validation))
            if titles is not None
            for name in names
            if getattr(titles, name) is not None
        }

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:  # a handle: given a path, numpy would append .npz to it
                np.savez_compressed(handle, **arrays)

        atomic_write(path, write)

    @classmethod
    def load(cls, path: Path) -> FoldPredictions:
        with np.load(path) as stored:
            parts = {
                part: TitlePredictions(
                    *(stored[f"{part}_{name}"] for name in ("index", "label", "predicted")),
                    stored[f"{part}_probs"] if f"{part}_probs" in stored else None,
                )
                for part in ("scored", "validation")
                if f"{part}_index" in stored
            }
        return cls(parts["scored"], parts.get("validation"))

    @classmethod
    def read(cls, path: Path) -> Optional[FoldPredictions]:
        """The predictions saved at `path`; None where there are none, or (in one line) damaged ones:
        the scores they sit beside stand alone."""
        if not path.is_file():
            return None
        try:
            return cls.load(path)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            why = "its compressed data does not decompress" if isinstance(err, zlib.error) else type(err).__name__
            log.warning("damaged predictions %s skipped (%s)", path, why)
            return None


@dataclass
class FoldResult:
    fold: int
    f1: float
    accuracy: float
    best_epoch: int  # 1-based, as the progress lines count; 0: the model before its first step was kept (wide path)
    epochs_run: int
    train_samples_per_s: Optional[float]
    time_to_first_step_s: Optional[float]
    # The fold's wall time from data preparation to its last checkpoint, over every sitting it ran in
    # (records without `sittings`, of older code, count only a resumed fold's last sitting).
    train_seconds: float
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
    # Where its loss stopped being finite (its F1 is NaN then, left out of every mean); None: it did not.
    diverged: Optional[str] = None
    # The inner split's score at the chosen epoch (what chose it), beside f1/accuracy: the held-out
    # fold's score of the chosen checkpoint. Records of older code lack them (None, 0, []).
    inner_f1: Optional[float] = None
    inner_accuracy: Optional[float] = None
    inner_size: int = 0
    selected_on: str = SELECTED_ON_SCORED_FOLD
    learning_curve: list[EpochScores] = field(default_factory=list)
    model_size: Optional[ModelSize] = None  # records of older code lack it
    sittings: Optional[int] = None  # the processes it trained in: 1, or more where it was resumed
    checkpoint_sha256: Optional[str] = None  # checked before the checkpoint is loaded; None in older records
    schema: int = RECORD_SCHEMA
    # Not in the JSON: the results store saves and loads it beside the record.
    predictions: Optional[FoldPredictions] = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        payload = asdict(replace(self, predictions=None))
        del payload["predictions"]
        if self.describe is not None:
            payload["describe"] = self.describe.to_dict()
        if payload["code"] is not None and (shared := payload["code"].pop("shared")):
            # beside `code`, not in it: code older than the shared part reads `code` as it always was
            payload["shared_code"] = shared
        return payload

    def relative_to(self, base: Path) -> FoldResult:
        """The record with its model files named relative to `base` where they lie inside it, so
        that the folder holding them and the record can move or be copied as one."""

        def inside(path: Optional[str]) -> Optional[str]:
            if not path or not Path(path).is_absolute():
                return path
            try:
                return Path(path).resolve().relative_to(base.resolve()).as_posix()
            except ValueError:
                return path

        return replace(self, checkpoint=inside(self.checkpoint), tokenizer_dir=inside(self.tokenizer_dir) or "")

    def resolved_against(self, base: Path) -> FoldResult:
        """The record with relative model paths read from `base` (absolute ones are kept)."""

        def under(path: Optional[str]) -> Optional[str]:
            return str(base / path) if path and not Path(path).is_absolute() else path

        return replace(self, checkpoint=under(self.checkpoint), tokenizer_dir=under(self.tokenizer_dir) or "")

    @classmethod
    def from_dict(cls, payload: dict) -> FoldResult:
        known = {f.name for f in fields(cls)} - {"predictions"}
        values = {k: v for k, v in upgraded(payload).items() if k in known}
        if isinstance(values.get("code"), dict):
            values["code"] = CodeVersion(**values["code"], shared=payload.get("shared_code"))
        for key, kind in (
            ("describe", Describe),
            ("validation", ValidationScore),
            ("model_size", ModelSize),
        ):
            if isinstance(values.get(key), dict):
                values[key] = kind(**values[key])
        values["learning_curve"] = [EpochScores(**epoch) for epoch in values.get("learning_curve", [])]
        return cls(**values)

    def save(self, path: Path) -> None:
        """With its own checksum: a results record is read by every later run of its configuration."""
        atomic_write_json(path, with_checksum(redact(self.to_dict())))  # an env-expanded override keeps no token

    @classmethod
    def load(cls, path: Path) -> FoldResult:
        """The record; a DamagedFileError where it does not match its checksum (older records have none)."""
        return cls.from_dict(checked_json(path))


def upgraded(payload: dict) -> dict:
    """A fold record's JSON as this code's schema reads it, whichever code wrote it. Schema 0 (no
    `schema`): a record of code before self-pretraining has no describe.pretrain (it started from
    scratch) and one before the inner split no selected_on (the scored fold chose its epoch); its
    missing inner scores, learning curve, model size and sittings stay unknown (None, empty)."""
    if payload.get("schema", 0) >= RECORD_SCHEMA:
        return payload
    payload = {**payload, "schema": RECORD_SCHEMA}
    if isinstance(payload.get("describe"), dict):
        payload["describe"] = {"pretrain": FROM_SCRATCH, **payload["describe"]}
    payload.setdefault("selected_on", SELECTED_ON_SCORED_FOLD)
    return payload


@dataclass(frozen=True)
class FoldValidation:
    """One fold's model alone on the validation titles."""

    fold: int
    f1: float
    accuracy: float


@dataclass
class RunValidation:
    """The fold ensemble (averaged probabilities) on the validation titles: what the run predicts;
    and each fold's model alone. In metrics.json as the `validation_*` keys."""

    ensemble: ValidationScore
    folds: list[FoldValidation] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "validation_f1": self.ensemble.f1,
            "validation_accuracy": self.ensemble.accuracy,
            "validation_per_class_f1": self.ensemble.per_class_f1,
            "validation_fold_f1": [asdict(fold) for fold in self.folds],
            "validation_size": self.ensemble.size,
            "validation_source": self.ensemble.source,
            "validation_confusion_matrix": self.ensemble.confusion_matrix,
        }

    @classmethod
    def from_dict(cls, payload: dict) -> Optional[RunValidation]:
        """None where no validation set was scored."""
        if "validation_f1" not in payload:
            return None
        ensemble = ValidationScore(
            payload["validation_f1"],
            payload["validation_accuracy"],
            payload.get("validation_size", 0),
            payload.get("validation_source", ""),
            payload.get("validation_per_class_f1", {}),
            payload.get("validation_confusion_matrix", []),
        )
        return cls(ensemble, [FoldValidation(**fold) for fold in payload.get("validation_fold_f1", [])])


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
    validation: Optional[RunValidation] = None  # with a validation set scored
    label_names: Optional[list[str]] = None  # the classes in id order; None in runs from before: YNAT's

    @property
    def f1(self) -> CVSummary:
        """The CV macro-F1 over the folds that did not diverge."""
        return CVSummary.of([r.f1 for r in self.folds])

    @property
    def accuracy(self) -> CVSummary:
        return CVSummary.of([r.accuracy for r in self.folds])

    @property
    def diverged_folds(self) -> list[int]:
        return [r.fold for r in self.folds if r.diverged]

    @property
    def score(self) -> float:
        """The configuration's CV macro-F1; NaN with a diverged fold: such a configuration is no candidate."""
        return float("nan") if self.diverged_folds else self.f1.mean

    def to_dict(self) -> dict:
        f1, accuracy = self.f1, self.accuracy
        speed = CVSummary.of([r.train_samples_per_s for r in self.folds if r.train_samples_per_s is not None])
        return {
            **self.describe.to_dict(),
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
            "diverged_folds": self.diverged_folds,
            "reused_folds": self.reused_folds,
            "reused_from_other_code": self.reused_from_other_code,
            "code_versions": sorted({r.code.label() for r in self.folds if r.code}),
            "label_names": self.label_names,
            **(self.validation.to_dict() if self.validation is not None else {}),
        }

    @classmethod
    def from_dict(cls, payload: dict) -> RunResult:
        describe = Describe(**{f.name: payload[f.name] for f in fields(Describe) if f.name in payload})
        return cls(
            describe,
            payload["config_hash"],
            payload.get("sweep"),
            payload.get("cv_folds", 0),
            [FoldResult.from_dict(r) for r in payload["folds"]],
            payload.get("reused_folds", []),
            payload.get("reused_from_other_code", []),
            RunValidation.from_dict(payload),
            payload.get("label_names"),
        )

    def save(self, path: Path) -> None:
        """metrics.json names each fold's model relative to the run directory, which holds it; each
        fold's predicted classes go beside it (fold<k>.predicted.npz, a few kB), so that the run's
        report can resample its titles wherever the results store lies."""
        for record in self.folds:
            if record.predictions is not None:
                record.predictions.save(predicted_path(path.parent, record.fold), with_probs=False)
        folds = [r.relative_to(path.parent) for r in self.folds]
        # a name from an env-expanded override keeps no token
        atomic_write_json(path, redact(replace(self, folds=folds).to_dict()))

    @classmethod
    def load(cls, path: Path) -> RunResult:
        """The run's result with each fold's model (and predictions) read from this run directory,
        wherever it lies now."""
        result = cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        result.folds = [_in_run_dir(r, path.parent) for r in result.folds]
        for record in result.folds:
            record.predictions = FoldPredictions.read(predicted_path(path.parent, record.fold))
        return result


def predicted_path(run_dir: Path, fold: int) -> Path:
    """A run directory's copy of a fold's predicted classes, named as the results store names them."""
    return run_dir / f"fold{fold}.predicted.npz"


def _in_run_dir(record: FoldResult, run_dir: Path) -> FoldResult:
    """Relative paths are read from the run directory. Older metrics.json files named absolute
    paths, always inside the run's own fold<k>/ folder: those are read from this run directory too,
    so a moved run finds its files and a copy never reads the original's."""
    fold_dir = f"fold{record.fold}"

    def rebased(path: Optional[str]) -> Optional[str]:
        if path and Path(path).is_absolute() and Path(path).parent.name == fold_dir:
            return f"{fold_dir}/{Path(path).name}"
        return path

    legacy = replace(record, checkpoint=rebased(record.checkpoint), tokenizer_dir=rebased(record.tokenizer_dir) or "")
    return legacy.resolved_against(run_dir)
