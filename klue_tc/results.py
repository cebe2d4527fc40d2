"""The results store: one `FoldResult` per (configuration, fold), written atomically.

A configuration's key hashes every setting declared to change the numbers (klue_tc/config.py), the
training titles' content, the tokenizer's model file where it reads one, and the precision the job
resolves to; so sweeps and reruns find finished work wherever the data or outputs live. A record
counts as finished only when the code that made it makes this code's numbers (klue_tc/fingerprint.py),
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

from klue_tc.config import RunConfig, keyed_settings
from klue_tc.files import atomic_write_text, exclusive_lock, link_or_copy, link_or_copy_tree
from klue_tc.fingerprint import counts_for
from klue_tc.records import CodeVersion, FoldPredictions, FoldResult

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"


def config_hash(
    run: RunConfig,
    data_fingerprint: str,
    precision: str,
    tokenizer_identity: Optional[str] = None,
    pretrain_inputs: Optional[str] = None,
) -> str:
    """`pretrain_inputs`: a hash of what the pretraining corpus reads besides the training titles."""
    settings = keyed_settings(run)
    if not run.pretrain.active:
        settings.pop("pretrain")  # the key every record made before pretraining existed has
    payload = {"config": settings, "data": data_fingerprint, "precision": precision}
    if tokenizer_identity:
        payload["tokenizer_model"] = tokenizer_identity
    if pretrain_inputs:
        payload["pretrain_inputs"] = pretrain_inputs
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Lookup:
    record: Optional[FoldResult]
    reused_other_code: bool = False  # a record of other code, taken because results.reuse=any


class ResultsStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str, fold: int) -> Path:
        return self.root / key / f"fold{fold}.json"

    @staticmethod
    def predictions_path(record_path: Path) -> Path:
        """The record's per-title predictions, beside it: fold<k>.predictions.npz."""
        return record_path.with_suffix(".predictions.npz")

    @staticmethod
    def predicted_classes_path(record_path: Path) -> Path:
        """The same without the probabilities, a few kB: what a committed study keeps (the full
        file is git-ignored) and the report's title-resampling intervals need."""
        return record_path.with_suffix(".predicted.npz")

    def read(self, key: str, fold: int) -> Optional[FoldResult]:
        """The stored record, or None; a damaged one (cut short by a crash or a full disk) is
        reported in one line and moved aside, so the fold trains again."""
        path = self._path(key, fold)
        if not path.is_file():
            return None
        try:
            return self._load(path)
        except (OSError, ValueError, TypeError, KeyError) as err:
            log.warning("damaged results record %s (%s); the fold trains again", path, type(err).__name__)
            path.replace(path.with_suffix(".damaged"))
            return None

    def _load(self, path: Path) -> FoldResult:
        """The record with its predictions where they were saved (older records have none)."""
        record = FoldResult.load(path).resolved_against(path.parent)
        record.predictions = FoldPredictions.read(self.predictions_path(path)) or FoldPredictions.read(
            self.predicted_classes_path(path)
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
            model_dir = path.with_suffix("")
            model_dir.mkdir(parents=True, exist_ok=True)
            checkpoint = model_dir / Path(record.checkpoint).name
            if Path(record.checkpoint).resolve() != checkpoint.resolve():
                link_or_copy(Path(record.checkpoint), checkpoint)
                link_or_copy_tree(Path(record.tokenizer_dir), model_dir / "tokenizer")
            record = replace(record, checkpoint=str(checkpoint), tokenizer_dir=str(model_dir / "tokenizer"))
        predictions, classes = self.predictions_path(path), self.predicted_classes_path(path)
        if record.predictions is not None:  # first: a record is never without the predictions it had
            record.predictions.save(predictions)
            record.predictions.save(classes, with_probs=False)
        else:  # a retrained fold's record must not meet its predecessor's predictions
            predictions.unlink(missing_ok=True)
            classes.unlink(missing_ok=True)
        record.relative_to(path.parent).save(path)
        if config is not None and not (self.root / key / CONFIG_FILE).is_file():
            text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
            atomic_write_text(self.root / key / CONFIG_FILE, text)

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
                found.append(self._load(path))
            except (OSError, ValueError, TypeError, KeyError) as err:
                log.warning("damaged results record %s skipped (%s)", path, type(err).__name__)
        return found
