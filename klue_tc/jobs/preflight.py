"""Everything a job will read or write, checked before its first training step.

Each problem is one `KlueTcError` line (exit 2): a bad validation file fails in seconds, not after
every fold has trained.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from klue_tc.core.config import RunConfig
from klue_tc.core.errors import ConfigError, DataError, DiskFullError, ResourceError
from klue_tc.core.files import human_size, is_disk_full
from klue_tc.core.registry import TOKENIZERS
from klue_tc.data.soft_labels import teacher_targets
from klue_tc.data.titles import (
    LabelledTitles,
    duplicate_groups,
    stratified_subsample,
    title_folds,
    training_titles,
    validation_titles,
)
from klue_tc.training.job_context import JobInputs

log = logging.getLogger(__name__)


# Less free than this on a store's disk is a full disk to a job: a small model's checkpoints and
# training state alone take some megabytes (a large one's, with its EMA, some tens).
MIN_FREE_BYTES = 16 * 1024 * 1024
_PROBE = b"\0" * 4096  # a block: a full disk refuses it at the flush, an empty file it still takes


def require_writable(folder: Path, what: str, needed: int = MIN_FREE_BYTES) -> None:
    """The folder, or the nearest folder above it that exists (nothing is made), takes a file and has
    `needed` bytes free. A file is written, flushed and removed there: a read-only mount, a missing
    permission or a full disk refuses that, where access() alone would let root through and a full
    disk would fail only at the first checkpoint, after a fold's training."""
    existing = folder.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ResourceError(f"{what} {folder} cannot be made: {existing} is a file")
    try:
        descriptor, probe = tempfile.mkstemp(dir=existing, prefix=".klue_tc-write-check.")
        try:
            os.write(descriptor, _PROBE)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
            os.unlink(probe)
    except OSError as err:
        if is_disk_full(err):
            raise DiskFullError(full_disk_line(folder, what, existing)) from None
        raise ResourceError(f"{what} {folder} is not writable ({existing}: {err.strerror})") from None
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise DiskFullError(
            full_disk_line(folder, what, existing, f"{human_size(free)} free, {human_size(needed)} needed")
        )


def full_disk_line(folder: Path, what: str, existing: Path, detail: str = "no space left") -> str:
    return (
        f"{what} {folder}: its disk is full ({detail} at {existing}); free some space (or raise the quota), "
        "or point it at another disk, and run the same command again"
    )


def check_folds(data: LabelledTitles, folds: int, seed: int) -> None:
    """Every class present can be stratified over the folds (a distinct title for each fold) and
    keeps two titles in every training fold (the inner split that chooses the epoch holds one out)."""
    counts = np.bincount(data.labels, minlength=data.num_classes)
    present = np.flatnonzero(counts)
    if len(present) < 2:
        only = data.label_names[present[0]]
        raise DataError(
            f"{data.source}: every title is of one class ({only}, {counts[present[0]]} titles); a classifier needs "
            "titles of at least two classes: add titles of another class (or name the label column with "
            "data.label_column=)"
        )
    groups = duplicate_groups(data.texts)
    distinct = counts if groups is None else np.array([len(set(groups[data.labels == c])) for c in range(len(counts))])
    fewest = present[np.argmin(distinct[present])]
    name, have = data.label_names[fewest], int(distinct[fewest])
    if have < folds:
        copies = f" ({counts[fewest]} rows: copies of a title count once)" if have < counts[fewest] else ""
        fix = f"lower cv.folds to {have} or add titles of {name}" if have >= 3 else f"add titles of {name}, 3 at least"
        raise DataError(
            f"{data.source}: cv.folds={folds} needs at least {folds} titles of every class present; "
            f"{name} has {have}{copies}: {fix}"
        )
    # cv.folds=1: one final model trains on every title (klue_tc/jobs/folds.py)
    splits = title_folds(data, folds, seed) if folds > 1 else [(np.arange(len(data.labels)), None)]
    for fold, (train, _) in enumerate(splits):
        in_training = np.bincount(data.labels[train], minlength=data.num_classes)
        short = [c for c in present if in_training[c] < 2]
        if short:
            name = data.label_names[short[0]]
            raise DataError(
                f"{data.source}: class {name} keeps {in_training[short[0]]} title(s) in fold {fold}'s training part "
                f"({counts[short[0]]} in all), and choosing the epoch needs two (the inner split holds one out): "
                f"add titles of {name} or change cv.folds"
            )


def report_duplicates(data: LabelledTitles) -> None:
    """One line for titles that appear more than once (each kept in one fold with its copies), with
    those whose copies carry different labels counted and one shown."""
    groups = duplicate_groups(data.texts)
    if groups is None:
        return
    sizes = np.bincount(groups)
    repeated = np.flatnonzero(sizes > 1)
    labels_of = {g: sorted(set(data.labels[groups == g].tolist())) for g in repeated}
    conflicting = [g for g in repeated if len(labels_of[g]) > 1]
    line = (
        f"{data.source}: {len(repeated)} title(s) appear more than once ({int(sizes[repeated].sum())} rows); "
        "each title's rows are kept in one fold"
    )
    if conflicting:
        g = conflicting[0]
        rows = np.flatnonzero(groups == g)
        example = ", ".join(f"{data.label_names[c]} x{int((data.labels[rows] == c).sum())}" for c in labels_of[g])
        line += (
            f"; {len(conflicting)} of them carry different labels (e.g. {data.texts[rows[0]]!r}: {example}): "
            "check those rows"
        )
    log.warning(line)


def check_inputs(run: RunConfig, run_dir: Path, results_root: Path) -> JobInputs:
    require_writable(run_dir, "the run directory")
    require_writable(results_root, "the results store (results.dir)")
    require_writable(Path(os.path.expanduser(run.data.cache_dir)), "the cache (data.cache_dir)")
    if run.pretrain.objective != "none":
        require_writable(run.pretrain.store_dir(results_root), "the pretrained-encoder store (pretrain.dir)")
    data = training_titles(run.data)
    if run.data.limit is not None and run.data.limit > len(data):
        raise ConfigError(f"data.limit={run.data.limit} is above the {len(data)} titles of {data.source}")
    data = stratified_subsample(data, run.data.limit, run.seed)
    check_folds(data, run.cv.folds, run.cv.seed)
    report_duplicates(data)
    validation = validation_titles(run.data, data.label_names)
    tokenizer_identity = TOKENIZERS[run.tokenizer.name].build.content_identity(run.tokenizer)
    from klue_tc.core.hardware import require_asked_gpu  # torch: only once the files are known to be good

    require_asked_gpu(run.trainer)
    teacher = teacher_targets(run.distill.teacher, data.texts, data.label_names) if run.distill.on else None
    return JobInputs(data, validation, tokenizer_identity, teacher)
