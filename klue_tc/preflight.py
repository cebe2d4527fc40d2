"""Everything a job will read or write, checked before its first training step.

Each problem is one `KlueTcError` line (exit 2): a bad validation file fails in seconds, not after
every fold has trained.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from klue_tc.config import RunConfig
from klue_tc.data import LabelledTitles, stratified_subsample, training_titles, validation_titles
from klue_tc.errors import ConfigError, DataError, ResourceError
from klue_tc.registry import TOKENIZERS


@dataclass
class JobInputs:
    train: LabelledTitles  # after data.limit's subsample
    validation: Optional[LabelledTitles]
    tokenizer_identity: Optional[str]  # the content hash of a published tokenizer model, if one is read


def require_writable(folder: Path, what: str) -> None:
    """The folder, or the nearest folder above it that exists, can be written to (nothing is made)."""
    existing = folder.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ResourceError(f"{what} {folder} cannot be made: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ResourceError(f"{what} {folder} is not writable ({existing} does not allow it)")


def check_folds(data: LabelledTitles, folds: int) -> None:
    """Stratified k-fold needs every class to have at least k titles."""
    counts = np.bincount(data.labels, minlength=data.num_classes)
    present = counts > 0
    if present.sum() < 2:
        raise DataError(f"{data.source}: the titles hold {int(present.sum())} class(es); classification needs two")
    fewest = int(np.argmin(np.where(present, counts, np.iinfo(np.int64).max)))
    if counts[fewest] < folds:
        raise DataError(
            f"{data.source}: cv.folds={folds} needs at least {folds} titles of every class present; "
            f"{data.label_names[fewest]} has {counts[fewest]} (lower cv.folds or use more titles)"
        )


def check_inputs(run: RunConfig, run_dir: Path, results_root: Path) -> JobInputs:
    require_writable(run_dir, "the run directory")
    require_writable(results_root, "the results store (results.dir)")
    require_writable(Path(os.path.expanduser(run.data.cache_dir)), "the cache (data.cache_dir)")
    data = training_titles(run.data)
    if run.data.limit is not None and run.data.limit > len(data):
        raise ConfigError(f"data.limit={run.data.limit} is above the {len(data)} titles of {data.source}")
    data = stratified_subsample(data, run.data.limit, run.seed)
    check_folds(data, run.cv.folds)
    validation = validation_titles(run.data, data.label_names)
    tokenizer_identity = TOKENIZERS[run.tokenizer.name].build.content_identity(run.tokenizer)
    from klue_tc.hardware import require_asked_gpu  # torch: only once the files are known to be good

    require_asked_gpu(run.trainer)
    return JobInputs(data, validation, tokenizer_identity)
