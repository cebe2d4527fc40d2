"""What a results store and the folders beside it hold on disk, by kind, and what a fold adds to it.

A file is counted once however many names it has: the results store hard-links each fold's
checkpoint and tokenizer from the job's run folder (klue_tc/store/results.py), so the two names are
one file on disk. Sizes are the files' own (what `ls -l` shows), summed.

Kinds: records (a fold's `fold<k>.json`, its per-title predictions `fold<k>.predicted.npz`, the
configuration's config.yaml, locks), checkpoints (a fold's model folder `fold<k>/`: its weights and
its tokenizer; a fold's resumable training state `fold<k>.training/`), pretrained encoders
(`pretrained/`), W&B runs (any `wandb/` folder in the run folders), caches (tokenizers and encoded
titles, `data.cache_dir`) and other (the run folders' logs, configs, metrics, reports and plots).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from klue_tc.core.files import human_size

KINDS = ("records", "checkpoints", "pretrained", "wandb", "caches", "other")
KIND_NAMES = {
    "records": "records",
    "checkpoints": "checkpoints",
    "pretrained": "pretrained encoders",
    "wandb": "W&B runs",
    "caches": "caches",
    "other": "other",
}
# The five a line always names; `other` only where there is some.
NAMED_KINDS = KINDS[:-1]
MODEL_FOLDER = re.compile(r"fold\d+(\.training)?")
RECORD = re.compile(r"fold(\d+)\.json")
PRETRAINED_DIR = "pretrained"

# A fold's files at the paper grid's size, for a store that holds no record yet to measure: the mean
# over the 120 configurations of sweeps/paper.yaml (every title, 5 folds; the default model) of a
# checkpoint and a tokenizer built at that size, and the mean record and predictions of
# docs/ensemble/results' 20 folds (`python -m benchmarks.store_size`, docs/reliability.md): 29.8 MB.
PAPER_FOLD_BYTES = {"record": 5_643, "predictions": 206_912, "checkpoint": 30_756_074, "tokenizer": 282_383}


@dataclass
class DiskUse:
    """Bytes by kind (KINDS)."""

    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def minus(self, earlier: DiskUse) -> DiskUse:
        return DiskUse({kind: self.bytes[kind] - earlier.bytes[kind] for kind in KINDS})

    def split(self, signed: bool = False, named: tuple[str, ...] = NAMED_KINDS) -> str:
        """`records 1.2 MB, checkpoints 40.1 MB, ...`: the `named` kinds, and any other there is some of."""
        kinds = [k for k in KINDS if k in named or self.bytes[k]]
        size = signed_size if signed else human_size
        return ", ".join(f"{KIND_NAMES[k]} {size(self.bytes[k])}" for k in kinds)


def signed_size(n: int) -> str:
    return ("-" if n < 0 else "+") + human_size(abs(n))


@dataclass(frozen=True)
class Places:
    """Where a sweep's files lie: its results store, its pretrained encoders (by default inside the
    store), its run folders (the sweep folder, holding the job folders and W&B runs) and the cache."""

    store: Path
    pretrained: Optional[Path] = None
    runs: Optional[Path] = None
    cache: Optional[Path] = None


def files_below(folder: Optional[Path], skip: tuple[Path, ...] = ()) -> Iterator[tuple[Path, os.stat_result]]:
    """Every regular file below `folder` (not following links), with its stat, leaving out the
    folders in `skip`; none where `folder` is not there."""
    if folder is None or not folder.is_dir():
        return
    skipped = {os.path.abspath(p) for p in skip}
    for top, dirs, files in os.walk(folder, onerror=lambda err: None):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skipped]
        for name in files:
            path = os.path.join(top, name)
            try:
                stat = os.lstat(path)
            except OSError:  # removed meanwhile (a temporary file renamed into place)
                continue
            if not os.path.islink(path):
                yield Path(path), stat


def store_kind(relative: Path) -> str:
    """The kind of a file inside a results store, from its path there."""
    parts = relative.parts
    if parts[0] == PRETRAINED_DIR:
        return "pretrained"
    if "wandb" in parts:
        return "wandb"
    if len(parts) > 2 and MODEL_FOLDER.fullmatch(parts[1]):
        return "checkpoints"
    return "records"


def run_kind(relative: Path) -> str:
    """The kind of a file in a run folder: its W&B runs, its checkpoints, or what else a job writes."""
    if "wandb" in relative.parts:
        return "wandb"
    if relative.suffix == ".ckpt" or "tokenizer" in relative.parts[:-1]:
        return "checkpoints"
    return "other"


def measure(places: Places) -> DiskUse:
    """What `places` hold, each file counted once (the first name it is found under)."""
    use, seen = DiskUse(), set()
    store = places.store.absolute()
    pretrained = (places.pretrained or store / PRETRAINED_DIR).absolute()

    def count(kind: str, stat: os.stat_result) -> None:
        if (stat.st_dev, stat.st_ino) not in seen:
            seen.add((stat.st_dev, stat.st_ino))
            use.bytes[kind] += stat.st_size

    for path, stat in files_below(store):
        count(store_kind(path.relative_to(store)), stat)
    if not pretrained.is_relative_to(store):
        for _, stat in files_below(pretrained):
            count("pretrained", stat)
    if places.runs is not None:
        runs = places.runs.absolute()
        for path, stat in files_below(runs, skip=(store, pretrained)):
            count(run_kind(path.relative_to(runs)), stat)
    if places.cache is not None:
        for _, stat in files_below(places.cache.absolute()):
            count("caches", stat)
    return use


@dataclass(frozen=True)
class FoldSize:
    """A fold's files in a results store, in bytes."""

    record: int = 0  # fold<k>.json
    predictions: int = 0  # fold<k>.predicted.npz (older code's fold<k>.predictions.npz too)
    checkpoint: int = 0  # fold<k>/*.ckpt
    tokenizer: int = 0  # fold<k>/tokenizer/ (and the wide path's n-grams beside it)

    @property
    def total(self) -> int:
        return self.record + self.predictions + self.checkpoint + self.tokenizer

    def parts(self) -> str:
        return (
            f"record {human_size(self.record)}, predictions {human_size(self.predictions)}, "
            f"checkpoint {human_size(self.checkpoint)}, tokenizer {human_size(self.tokenizer)}"
        )


PAPER_FOLD = FoldSize(**PAPER_FOLD_BYTES)


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(stat.st_size for _, stat in files_below(path))


def fold_sizes(store: Path) -> list[FoldSize]:
    """Each fold record's files in the store (`store/<key>/fold<k>.json` and its neighbours)."""
    sizes = []
    for record in sorted(Path(store).glob("*/fold*.json")):
        if not RECORD.fullmatch(record.name):
            continue
        model = record.with_suffix("")
        predictions = [record.with_suffix(".predicted.npz"), record.with_suffix(".predictions.npz")]
        checkpoints = [p for p in model.glob("*.ckpt") if p.is_file()]
        sizes.append(
            FoldSize(
                size_of(record),
                sum(size_of(p) for p in predictions if p.is_file()),
                sum(p.stat().st_size for p in checkpoints),
                size_of(model) - sum(p.stat().st_size for p in checkpoints) if model.is_dir() else 0,
            )
        )
    return sizes


def typical_fold(sizes: list[FoldSize]) -> Optional[FoldSize]:
    """The mean fold, each part over the folds that have it (a fold whose checkpoint was pruned
    still says what a record weighs); None for no fold."""
    if not sizes:
        return None

    def mean(part: str) -> int:
        values = [getattr(s, part) for s in sizes if getattr(s, part)]
        return round(sum(values) / len(values)) if values else 0

    return FoldSize(mean("record"), mean("predictions"), mean("checkpoint"), mean("tokenizer"))
