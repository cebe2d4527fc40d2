"""The ensemble as a folder that stands alone: every chosen member's fold models (the networks'
checkpoints and tokenizers, hard-linked where the file system allows; the linear baselines' fitted
models) and ensemble.json, which names them relative to the folder with their weights and
temperatures and holds the ensemble's class offsets. `python -m klue_tc.predict <folder> "title"`
serves it as it serves a run directory; the folder may be moved or copied anywhere. Nothing in it is
a pickle: the checkpoints are read as tensors and plain values, the linear models as arrays and JSON
(klue_tc/training/linear_files.py), so serving it runs no code from it. A folder holding a pickle
(an older version's fold<k>.joblib) is refused in one line naming the command that converts it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from klue_tc.core.config import EVAL_BATCH_SIZE
from klue_tc.core.errors import KlueTcError

if TYPE_CHECKING:
    from klue_tc.ensemble.stage import Ensemble

MANIFEST = "ensemble.json"
FORMAT = "klue_tc ensemble"
# 2: class offsets; a version-1 folder (none) is still served. 3: the linear models as arrays and
# JSON; a folder of version 1 or 2 whose linear models are pickles is converted once (--convert).
VERSION = 3
READABLE_VERSIONS = (1, 2, VERSION)


class ArtefactError(KlueTcError):
    """The ensemble cannot be written, or the folder is not one that can be served."""


def is_artefact(directory: str | Path) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def neural_folds(member, target: Path, folder: str) -> list[dict]:
    from klue_tc.core.files import link_or_copy, link_or_copy_tree

    folds = []
    for record in member.folds:
        checkpoint, tokenizer = Path(record.checkpoint), Path(record.tokenizer_dir)
        place = Path(folder) / f"fold{record.fold}"
        (target / place).mkdir(parents=True)
        link_or_copy(checkpoint, target / place / checkpoint.name)
        link_or_copy_tree(tokenizer, target / place / "tokenizer")
        folds.append(
            {"fold": record.fold, "checkpoint": (place / checkpoint.name).as_posix(), "tokenizer": f"{place}/tokenizer"}
        )
    return folds


def linear_folds(member, target: Path, folder: str) -> list[dict]:
    from klue_tc.core.files import link_or_copy
    from klue_tc.training.linear_files import model_files, model_path

    folds = []
    (target / folder).mkdir(parents=True)

    def on_disk(fold) -> bool:
        return all(p.is_file() for p in model_files(fold.model))

    if member.restore is not None and not all(on_disk(f) for f in member.folds):
        member.restore()
    for fold in member.folds:
        if not on_disk(fold):
            raise ArtefactError(f"{member.name}: fold {fold.fold}'s model {fold.model} is missing")
        name = model_path(Path(folder), f"fold{fold.fold}")
        for source, copy in zip(model_files(fold.model), model_files(target / name)):
            link_or_copy(source, copy)
        name = name.as_posix()
        folds.append({"fold": fold.fold, "model": name, "temperature": fold.temperature, "setting": fold.setting})
    return folds


def write_artefact(ensemble: Ensemble, target: str | Path) -> Path:
    """Write the folder (replacing what was there only once the new one is complete)."""
    from klue_tc.ensemble.members import LINEAR

    target = Path(target)
    if target.exists() and not is_artefact(target) and any(target.iterdir()):
        raise ArtefactError(
            f"{target} exists and is not an ensemble's folder: not replaced (name another with --artefact)"
        )
    missing = [
        f"{member.name} fold {record.fold}"
        for member, _ in ensemble.chosen
        if member.kind != LINEAR
        for record in member.folds
        if not (record.checkpoint and Path(record.checkpoint).is_file() and Path(record.tokenizer_dir).is_dir())
    ]
    if missing:  # before anything is fitted or written
        raise ArtefactError(
            f"no checkpoint or tokenizer on disk for {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            + ": the artefact needs the fold models the sweep trained"
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        members = []
        for member, weight in ensemble.chosen:
            folder = f"members/{member.key}"
            place = linear_folds if member.kind == LINEAR else neural_folds
            members.append(
                {
                    "name": member.name,
                    "key": member.key,
                    "kind": member.kind,
                    "weight": weight,
                    "temperature": member.temperature,
                    "votes": member.votes,
                    "folds": place(member, partial, folder),
                }
            )
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "label_names": ensemble.label_names,
            "made_from": str(ensemble.directory),
            "selection": {"metric": ensemble.selection.metric, "rounds": ensemble.selection.kept_rounds},
            "oof_f1": ensemble.oof_f1,
            "validation_f1": ensemble.validation.f1 if ensemble.validation else None,
            "members": members,
            "class_offsets": None if ensemble.class_offsets is None else [float(v) for v in ensemble.class_offsets],
        }
        (partial / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ArtefactError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") not in READABLE_VERSIONS:
        raise ArtefactError(f"{path}: not a {FORMAT} of version {', '.join(map(str, READABLE_VERSIONS))}")
    return manifest


def artefact_probs(
    directory: str | Path, titles: Sequence[str], batch_size: int = EVAL_BATCH_SIZE
) -> tuple[np.ndarray, list[str]]:
    """The ensemble's probabilities for `titles`, and the classes' names: each member's fold
    models averaged (calibrated, or as votes), the members weighted and the mean offset by class, as
    the ensemble stage scored them."""
    from klue_tc.core.pickles import refuse_pickles
    from klue_tc.training.calibration import offset

    directory = Path(directory)
    manifest = read_manifest(directory)
    refuse_pickles(directory)  # before any model is read
    classes = len(manifest["label_names"])
    total = None
    for member in manifest["members"]:
        contribution = member["weight"] * member_probs(directory, member, titles, classes, batch_size)
        total = contribution if total is None else total + contribution
    if manifest.get("class_offsets") is not None:
        total = offset(total, np.asarray(manifest["class_offsets"]))
    return total.astype(np.float32), list(manifest["label_names"])


def member_probs(
    directory: Path, member: dict, titles: Sequence[str], classes: int, batch_size: int = EVAL_BATCH_SIZE
) -> np.ndarray:
    """One member of the manifest on `titles`: its fold models' mean (calibrated, or as votes), unweighted."""
    from klue_tc.ensemble.serving import as_votes, linear_fold_probs, neural_fold_probs
    from klue_tc.training.calibration import logits_of, tempered

    parts = []
    for fold in member["folds"]:
        if member["kind"] == "linear":
            probs = linear_fold_probs(directory / fold["model"], fold["temperature"], titles, classes)
        else:
            checkpoint, tokenizer = directory / fold["checkpoint"], directory / fold["tokenizer"]
            if not checkpoint.is_file() or not tokenizer.is_dir():
                raise ArtefactError(f"{directory}: {member['name']} fold {fold['fold']}'s model is missing")
            probs = neural_fold_probs(checkpoint, tokenizer, titles, batch_size, folder=directory)
        parts.append(as_votes(probs) if member["votes"] else tempered(logits_of(probs), member["temperature"]))
    return np.mean(parts, axis=0)
