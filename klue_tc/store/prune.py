"""What pruning a results store removes, and the bytes that frees: the model files of configurations
that no sweep runs any more, the pretrained encoders only they started from, and W&B offline runs
past an age. Records (`fold<k>.json`, `fold<k>.predicted.npz`, config.yaml) are never removed: the
report, the ensemble's out-of-fold choice and a re-run's skip read them alone; a re-run of a
pruned configuration reuses its scores and says its checkpoint is gone (results.resume=false trains
it again).

A fold's checkpoint and tokenizer have two names: the store's `<key>/fold<k>/` and the job's run
folder, hard-linked (klue_tc/store/results.py); both go, or no byte would be freed. A file still
linked from elsewhere is counted as kept. A fold whose job holds its lock is left alone.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from klue_tc.core.files import human_size
from klue_tc.store.disk import MODEL_FOLDER, PRETRAINED_DIR, files_below
from klue_tc.store.in_progress import lock_held

PRUNED_KINDS = ("checkpoints", "tokenizers", "pretrained", "wandb")
PRUNED_NAMES = {
    "checkpoints": "checkpoints",
    "tokenizers": "tokenizers",
    "pretrained": "pretrained encoders",
    "wandb": "W&B runs",
}
WANDB_RUN = re.compile(r"offline-run-.*")
DAY_S = 86_400


@dataclass
class Plan:
    """Files to remove, each with its kind (PRUNED_KINDS), and the folders they empty."""

    files: dict[Path, str] = field(default_factory=dict)
    folders: set[Path] = field(default_factory=set)  # removed once empty, deepest first
    busy: list[str] = field(default_factory=list)  # what a running job holds: left alone
    wandb_runs: int = 0

    def add_tree(self, folder: Path, kind_of) -> None:
        for path, _ in files_below(folder):
            self.files[path] = kind_of(path.relative_to(folder))
        self.folders |= {folder, *(p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink())}


def model_kind(relative: Path) -> str:
    return "tokenizers" if "tokenizer" in relative.parts[:-1] else "checkpoints"


def model_folders(store: Path, keys: Iterable[str], plan: Plan) -> None:
    """Each fold's model folder and resumable training state of the configurations `keys`."""
    for key in sorted(keys):
        for folder in sorted((Path(store) / key).glob("fold*")):
            if not (folder.is_dir() and MODEL_FOLDER.fullmatch(folder.name)):
                continue
            fold = folder.name.split(".")[0]
            if lock_held(folder.parent / f"{fold}.lock"):
                plan.busy.append(f"{key}/{fold}")
                continue
            plan.add_tree(folder, model_kind)


def run_folder_copies(runs: Optional[Path], store: Path, keys: set[str], plan: Plan) -> None:
    """The other names, in the run folders below `runs`, of the model files the plan removes, and
    the model folders of the runs of `keys` (their metrics.json names the configuration) that were
    copied rather than linked."""
    if runs is None or not runs.is_dir():
        return
    store = Path(store).absolute()
    planned = {}
    for path, kind in plan.files.items():
        try:
            stat = path.stat()
        except OSError:
            continue
        planned[stat.st_dev, stat.st_ino] = kind
    for path, stat in files_below(runs.absolute(), skip=(store,)):
        if (stat.st_dev, stat.st_ino) in planned:
            plan.files[path] = planned[stat.st_dev, stat.st_ino]
            plan.folders.add(path.parent)
    for metrics in runs.absolute().rglob("metrics.json"):
        if metrics.is_relative_to(store):
            continue
        try:
            key = json.loads(metrics.read_text(encoding="utf-8")).get("config_hash")
        except (OSError, ValueError, AttributeError):
            continue
        if key in keys:
            for folder in metrics.parent.glob("fold*"):
                if folder.is_dir() and re.fullmatch(r"fold\d+", folder.name):
                    plan.add_tree(folder, model_kind)


def pretrained_only_for(store: Path, pruned: set[str], plan: Plan) -> None:
    """The pretrained encoders in the store (`<store>/pretrained/<key>/`) that the records of the
    pruned configurations started from and no other record does; one no record names is kept (a
    fold may be about to start from it), and so is one being trained."""
    store = Path(store)
    named: dict[str, set[str]] = {}
    for record in store.glob("*/fold*.json"):
        try:
            pretrained = json.loads(record.read_text(encoding="utf-8")).get("pretrained") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(pretrained, dict) and pretrained.get("key"):
            named.setdefault(pretrained["key"], set()).add(record.parent.name)
    for encoder, users in sorted(named.items()):
        folder = store / PRETRAINED_DIR / encoder
        if not folder.is_dir() or not users <= pruned:
            continue
        if lock_held(folder / "train.lock"):
            plan.busy.append(f"{PRETRAINED_DIR}/{encoder}")
            continue
        plan.add_tree(folder, lambda _: "pretrained")


def old_wandb_runs(runs: Optional[Path], days: float, plan: Plan, now: Optional[float] = None) -> None:
    """The W&B offline runs below `runs` (`.../wandb/offline-run-*/`) whose newest file is older than
    `days` days: one still written to is never old."""
    if runs is None or not runs.is_dir():
        return
    now = time.time() if now is None else now
    for folder in sorted(runs.absolute().rglob("offline-run-*")):
        if not (folder.is_dir() and not folder.is_symlink() and folder.parent.name == "wandb"):
            continue
        newest = max((stat.st_mtime for _, stat in files_below(folder)), default=folder.stat().st_mtime)
        if now - newest > days * DAY_S:
            plan.add_tree(folder, lambda _: "wandb")
            plan.wandb_runs += 1


@dataclass
class Freed:
    """The bytes a plan frees, by kind, and those it leaves (files linked from outside the plan)."""

    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PRUNED_KINDS, 0))
    kept_linked: int = 0

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def split(self) -> str:
        return ", ".join(f"{PRUNED_NAMES[k]} {human_size(self.bytes[k])}" for k in PRUNED_KINDS)


def freed_by(plan: Plan) -> Freed:
    """A file's bytes are freed only where every name it has is in the plan."""
    names: dict[tuple[int, int], list[Path]] = {}
    stats = {}
    for path in plan.files:
        try:
            stat = path.stat()
        except OSError:
            continue
        names.setdefault((stat.st_dev, stat.st_ino), []).append(path)
        stats[stat.st_dev, stat.st_ino] = stat
    freed = Freed()
    for inode, paths in names.items():
        stat = stats[inode]
        if len(paths) >= stat.st_nlink:
            freed.bytes[plan.files[paths[0]]] += stat.st_size
        else:
            freed.kept_linked += stat.st_size
    return freed


def carry_out(plan: Plan) -> None:
    """Remove the plan's files, then the folders they leave empty (deepest first)."""
    for path in plan.files:
        path.unlink(missing_ok=True)
    for folder in sorted(plan.folders, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:  # not empty: something not planned is in it
            continue
    for folder in {f for f in plan.folders if f.name.startswith("offline-run-")}:
        shutil.rmtree(folder, ignore_errors=True)  # W&B's own links inside a run


def removed_line(freed: Freed, dry_run: bool) -> str:
    verb = "would free" if dry_run else "freed"
    line = f"{verb} {human_size(freed.total)}: {freed.split()}"
    if freed.kept_linked:
        line += f"; {human_size(freed.kept_linked)} stays, linked from outside the store and its run folders"
    return line
