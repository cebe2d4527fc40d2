"""Titles without labels (blind.tsv: `id`, `title`) predicted by the ensemble stage's models, once
every member, weight, temperature and class offset has been chosen on the out-of-fold predictions:
the blind titles only pass through the fitted models, they choose nothing.

Written as `<dir>/blind/<model>.csv` (`id,label,<one probability column per class>`,
klue_tc/data/predictions.py): each linear baseline as its fold ensemble, the mean of its fold models'
calibrated probabilities, as it is scored on the validation titles (`tfidf-svm`, `nbsvm`), and the
same offset by class with its own offsets chosen on its own out-of-fold predictions
(`tfidf-svm-offset`, `nbsvm-offset`); and the ensemble (`ensemble`), where every chosen member's
fold models are on disk, else one line naming those that are not."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from klue_tc.data.identified import IdentifiedTitles
from klue_tc.ensemble.members import LINEAR, Member
from klue_tc.training.calibration import offset

if TYPE_CHECKING:
    from klue_tc.ensemble.stage import Ensemble

BLIND_DIR = "blind"
ENSEMBLE_FILE = "ensemble"
OFFSET_SUFFIX = "-offset"
# The kind in a file's name (docs/ensembles.md): the baselines' store names, NB-SVM's without its hyphen.
FILE_NAMES = {"tfidf-svm": "tfidf-svm", "nb-svm": "nbsvm"}


@dataclass
class BlindPredictions:
    source: str  # the file the titles came from
    ids: list[str]  # in the file's order
    label_names: list[str]
    probs: dict[str, np.ndarray] = field(default_factory=dict)  # file name (no suffix): (titles, classes)
    baseline_offsets: dict[str, np.ndarray] = field(default_factory=dict)  # a baseline's own class offsets
    notes: list[str] = field(default_factory=list)


def file_name(member: Member) -> str:
    return FILE_NAMES.get(member.key, member.key)


def missing_fold_models(member: Member) -> list[str]:
    """The member's folds whose models are not on disk (a network's checkpoint or tokenizer; a
    baseline's are fitted again from their settings first)."""
    if member.kind == LINEAR:
        from klue_tc.training.linear_files import model_files

        if member.restore is not None:
            member.restore()
        return [f"fold {f.fold}" for f in member.folds if not all(p.is_file() for p in model_files(f.model))]
    return [
        f"fold {r.fold}"
        for r in member.folds
        if not (r.checkpoint and Path(r.checkpoint).is_file() and Path(r.tokenizer_dir).is_dir())
    ]


def predict_blind(ensemble: Ensemble, titles: IdentifiedTitles, batch_size: int) -> BlindPredictions:
    """The baselines' and the ensemble's probabilities for `titles`, by the models already chosen."""
    from klue_tc.ensemble.stage import fold_model_probs, own_class_offsets

    classes = len(ensemble.label_names)
    blind = BlindPredictions(titles.source, list(titles.ids), list(ensemble.label_names))
    weights = dict(zip((m.key for m in ensemble.members), ensemble.selection.weights))
    chosen = [m for m in ensemble.members if weights[m.key] > 0]
    wanted = [m for m in ensemble.members if (m.kind == LINEAR and not m.votes) or weights[m.key] > 0]
    missing = {m.key: missing_fold_models(m) for m in wanted}
    complete = not any(missing[m.key] for m in chosen)  # else the networks predict nothing: no ensemble
    fold_means: dict[str, np.ndarray] = {}
    for member in wanted:
        if not missing[member.key] and (member.kind == LINEAR or complete):
            fold_means[member.key] = member.fold_mean(fold_model_probs(member, titles.texts, classes, batch_size))
    for member in ensemble.members:
        if member.kind != LINEAR or member.votes:
            continue
        if member.key not in fold_means:
            blind.notes.append(f"no blind predictions of {member.name}: {', '.join(missing[member.key])} missing")
            continue
        name = file_name(member)
        blind.baseline_offsets[name] = own_class_offsets(member, ensemble.titles.labels)
        blind.probs[name] = fold_means[member.key]
        blind.probs[name + OFFSET_SUFFIX] = offset(fold_means[member.key], blind.baseline_offsets[name])
    absent = [m for m in chosen if missing[m.key]]
    if absent:
        folds = sum(len(missing[m.key]) for m in absent)
        blind.notes.append(
            f"no blind {ENSEMBLE_FILE}.csv: {folds} fold model(s) of {len(absent)} chosen member(s) not on disk "
            f"({'; '.join(f'{m.name}: {len(missing[m.key])} of {len(m.folds)}' for m in absent)}); "
            "it needs every chosen member's fold models, as the sweep trained them"
        )
    else:
        blind.probs[ENSEMBLE_FILE] = ensemble.combine([fold_means.get(m.key) for m in ensemble.members])
    return blind


def write_blind(blind: BlindPredictions, folder: Path) -> list[Path]:
    """`folder/<model>.csv` for each model that predicted the titles; the paths written."""
    from klue_tc.data.predictions import save_predictions

    return [
        save_predictions(Path(folder) / f"{name}.csv", blind.ids, probs, blind.label_names)
        for name, probs in blind.probs.items()
    ]
