"""The results store: one JSON record per (configuration, fold), written atomically.

Records are keyed by a stable hash of the resolved configuration without the keys that do not
change the result (paths, logging, launcher), plus the training data's content hash, so sweeps
and reruns find finished work wherever the data or outputs live.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from klue_tc.config import RunConfig

# Keys that never change a trained model's numbers.
IGNORED_SECTIONS = ("experiment", "sweep", "logger", "results")
IGNORED_KEYS = {
    "data": ("path", "validation_path", "cache_dir", "num_workers", "eval_batch_size"),
    "tokenizer": ("model_path", "hub_repo"),
    "trainer": ("progress_bar", "log_every_n_steps", "devices"),
    "cv": ("fold",),
}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.value if hasattr(value, "value") else value


def result_relevant_config(run: RunConfig) -> dict:
    config = _plain(asdict(run))
    for section in IGNORED_SECTIONS:
        config.pop(section, None)
    for section, keys in IGNORED_KEYS.items():
        for key in keys:
            config[section].pop(key, None)
    return config


def config_hash(run: RunConfig, data_fingerprint: str) -> str:
    payload = json.dumps({"config": result_relevant_config(run), "data": data_fingerprint}, sort_keys=True)
    return hashlib.sha1(payload.encode()).hexdigest()[:12]


def atomic_write_json(path: Path, payload: Any) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, ensure_ascii=False, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class ResultsStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str, fold: int) -> Path:
        return self.root / key / f"fold{fold}.json"

    def get(self, key: str, fold: int) -> Optional[dict]:
        path = self._path(key, fold)
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def put(self, key: str, fold: int, record: dict) -> None:
        atomic_write_json(self._path(key, fold), record)

    def training_state_dir(self, key: str, fold: int) -> Path:
        """Where a fold keeps its training state while it trains (the latest epoch's full checkpoint
        and the best one), so that an interrupted fold resumes from its last finished epoch."""
        return self.root / key / f"fold{fold}.training"

    def discard_training_state(self, key: str, fold: int) -> None:
        """Called once the fold's record is written: the record and the run folder hold what is kept."""
        shutil.rmtree(self.training_state_dir(key, fold), ignore_errors=True)

    def records(self) -> list[dict]:
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.root.glob("*/fold*.json"))]
