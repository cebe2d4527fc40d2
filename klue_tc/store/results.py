"""The results store: one `FoldResult` per (configuration, fold), written atomically.

A configuration's key hashes every setting declared to change the numbers (klue_tc/core/config.py), the
training titles' content, the tokenizer's model file where it reads one, and the precision the job
resolves to; so sweeps and reruns find finished work wherever the data or outputs live. A record
counts as finished only when the code that made it makes this code's numbers (klue_tc/store/fingerprint.py),
unless `results.reuse=any` says to take it anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import yaml

from klue_tc.core.checksums import require_checksum
from klue_tc.core.config import RunConfig, keyed_settings
from klue_tc.core.errors import DamagedFileError
from klue_tc.core.files import atomic_write_text, exclusive_lock, link_or_copy, link_or_copy_tree
from klue_tc.store.fingerprint import counts_for
from klue_tc.store.records import CodeVersion, FoldPredictions, FoldResult, ModelSize

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"


def config_hash(
    run: RunConfig,
    data_fingerprint: str,
    precision: str,
    tokenizer_identity: Optional[str] = None,
    pretrain_inputs: Optional[str] = None,
    teacher: Optional[str] = None,
) -> str:
    """`pretrain_inputs`: a hash of what the pretraining corpus reads besides the training titles;
    `teacher`: the SHA-256 of the soft-label file a distilled model learns from."""
    settings = keyed_settings(run)
    if not run.pretrain.active:
        settings.pop("pretrain")  # the key every record made before pretraining existed has
    payload = {"config": settings, "data": data_fingerprint, "precision": precision}
    if tokenizer_identity:
        payload["tokenizer_model"] = tokenizer_identity
    if pretrain_inputs:
        payload["pretrain_inputs"] = pretrain_inputs
    if teacher:
        payload["teacher"] = teacher
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Lookup:
    record: Optional[FoldResult]
    reused_other_code: bool = False  # a record of other code, taken because results.reuse=any


class ResultsStore:
    def __init__(self, root: str | Path):
        # Absolute: a record names its model files relative to its own folder, which only an
        # absolute path can be made relative to (`results.dir` is relative by default).
        self.root = Path(root).expanduser().absolute()

    def _path(self, key: str, fold: int) -> Path:
        return self.root / key / f"fold{fold}.json"

    @staticmethod
    def predictions_path(record_path: Path) -> Path:
        """Older code's copy of the per-title predictions with their probabilities (git-ignored),
        fold<k>.predictions.npz: read where it is there, never written now."""
        return record_path.with_suffix(".predictions.npz")

    @staticmethod
    def predicted_classes_path(record_path: Path) -> Path:
        """The record's per-title predictions, beside it: the classes and their probabilities
        (float16, compressed: 0.1 to 0.2 MB a fold), what a committed study keeps, so that the report's
        intervals and any ensemble (klue_tc/ensemble/) are rebuilt from the records alone. Older
        code kept the classes alone here."""
        return record_path.with_suffix(".predicted.npz")

    def read(self, key: str, fold: int) -> Optional[FoldResult]:
        """The stored record, or None; a damaged one (cut short by a crash or a full disk, or not
        matching its checksum), or one whose checkpoint does not match the checksum it keeps, is
        reported in one line and moved aside, so the fold trains again."""
        path = self._path(key, fold)
        if not path.is_file():
            return None
        try:
            record = self.load(path)
            if record.checkpoint and Path(record.checkpoint).is_file():  # a record whose model is gone keeps its scores
                require_checksum(Path(record.checkpoint), record.checkpoint_sha256, path.name)
            return record
        except DamagedFileError as err:
            log.warning("%s; the fold trains again", err)
        except (OSError, ValueError, TypeError, KeyError) as err:
            log.warning("damaged results record %s (%s); the fold trains again", path, type(err).__name__)
        path.replace(path.with_suffix(".damaged"))
        return None

    @classmethod
    def load(cls, path: Path) -> FoldResult:
        """The record at `path` with its model files and its predictions where they were saved (older
        records have none; older code kept the probabilities in a file of their own, read first)."""
        record = in_model_folder(FoldResult.load(path).resolved_against(path.parent), path)
        record.predictions = FoldPredictions.read(cls.predictions_path(path)) or FoldPredictions.read(
            cls.predicted_classes_path(path)
        )
        return record

    def find(self, key: str, fold: int, code: CodeVersion, reuse_any: bool) -> Lookup:
        record = self.read(key, fold)
        if record is None or counts_for(record.code, code):
            return Lookup(record)
        if reuse_any:
            return Lookup(record, reused_other_code=True)
        log.info(
            "fold %d of %s was made by other code (%s, now %s): training it again",
            fold,
            key,
            record.code.label() if record.code else "unknown",
            code.label(),
        )
        return Lookup(None)

    def put(self, key: str, fold: int, record: FoldResult, config: Optional[dict] = None) -> None:
        """Store the record with its model files, hard-linked into the store and named relative to
        it, so that resuming needs no run directory (which may have moved); `config` (the job's
        resolved config) is kept once per configuration beside its folds, so the store alone says
        what produced its numbers (the report reads it)."""
        path = self._path(key, fold)
        if record.checkpoint and Path(record.checkpoint).is_file() and Path(record.tokenizer_dir).is_dir():
            model_dir = model_folder(path)
            model_dir.mkdir(parents=True, exist_ok=True)
            checkpoint = model_dir / Path(record.checkpoint).name
            if Path(record.checkpoint).resolve() != checkpoint.resolve():
                link_or_copy(Path(record.checkpoint), checkpoint)
                link_or_copy_tree(Path(record.tokenizer_dir), model_dir / "tokenizer")
            record = replace(record, checkpoint=str(checkpoint), tokenizer_dir=str(model_dir / "tokenizer"))
        predictions, classes = self.predictions_path(path), self.predicted_classes_path(path)
        if record.predictions is not None:  # first: a record is never without the predictions it had
            record.predictions.save(classes)
            predictions.unlink(missing_ok=True)  # a predecessor's, made by older code
        else:  # a retrained fold's record must not meet its predecessor's predictions
            predictions.unlink(missing_ok=True)
            classes.unlink(missing_ok=True)
        record.relative_to(path.parent).save(path)
        if config is not None and not (self.root / key / CONFIG_FILE).is_file():
            text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
            atomic_write_text(self.root / key / CONFIG_FILE, text)

    def holds(self, key: str, fold: int) -> bool:
        return self._path(key, fold).is_file()

    def add_model_size(self, key: str, fold: int, size: ModelSize) -> None:
        """Write a size measured after training into a record of older code that lacks one, with the
        record's checksum made again; its scores, paths and predictions stay as they are."""
        path = self._path(key, fold)
        replace(FoldResult.load(path), model_size=size).save(path)

    def claim(self, key: str, fold: int) -> contextlib.AbstractContextManager[None]:
        """Hold the fold while it trains: a second identical job waits here, then finds the record."""
        return exclusive_lock(
            self.root / key / f"fold{fold}.lock",
            f"fold {fold} of {key} is being trained by another job: waiting for it",
        )

    def training_state_dir(self, key: str, fold: int) -> Path:
        """Where a fold keeps its training state while it trains (the latest epoch's full checkpoint
        and the best one), so that an interrupted fold resumes from its last finished epoch."""
        return self.root / key / f"fold{fold}.training"

    def discard_training_state(self, key: str, fold: int) -> None:
        """Called once the fold's record is written: the record and the run folder hold what is kept."""
        shutil.rmtree(self.training_state_dir(key, fold), ignore_errors=True)

    def records(self) -> list[FoldResult]:
        found = []
        for path in sorted(self.root.glob("*/fold*.json")):
            try:
                found.append(self.load(path))
            except DamagedFileError as err:
                log.warning("%s; the record is skipped", err)
            except (OSError, ValueError, TypeError, KeyError) as err:
                log.warning("damaged results record %s skipped (%s)", path, type(err).__name__)
        return found


def model_folder(record_path: Path) -> Path:
    """Where the store keeps a record's checkpoint and tokenizer: fold<k>/ beside fold<k>.json."""
    return record_path.with_suffix("")


def in_model_folder(record: FoldResult, record_path: Path) -> FoldResult:
    """The record with its model files read from the store's model folder where the paths it names
    lead nowhere: records written under a relative `results.dir` named them from the working folder,
    so that read from the record's folder they were doubled (outputs/results/<key>/outputs/results/...)."""
    folder = model_folder(record_path)
    checkpoint, tokenizer_dir = record.checkpoint, record.tokenizer_dir
    if checkpoint and not Path(checkpoint).is_file() and (folder / Path(checkpoint).name).is_file():
        checkpoint = str(folder / Path(checkpoint).name)
    if tokenizer_dir and not Path(tokenizer_dir).is_dir() and (folder / "tokenizer").is_dir():
        tokenizer_dir = str(folder / "tokenizer")
    return replace(record, checkpoint=checkpoint, tokenizer_dir=tokenizer_dir)
