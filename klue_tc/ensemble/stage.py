"""The ensemble stage: the candidate members read from a sweep's records (and the linear baselines
fitted on the same folds), each member's temperature and the selection chosen on the out-of-fold
predictions alone, then scored on the validation titles against its best member and the baselines,
each as its own fold ensemble."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from klue_tc.core.config import EVAL_BATCH_SIZE
from klue_tc.core.errors import KlueTcError
from klue_tc.data.titles import LABEL_NAMES
from klue_tc.ensemble.members import LINEAR, Member, Titles, neural_members
from klue_tc.ensemble.scoring import Difference, PairedTitles, StudentScore
from klue_tc.ensemble.selection import LOG_LOSS, MAX_ROUNDS, PATIENCE, Selection, greedy_selection, macro_f1_of
from klue_tc.store.records import FoldResult
from klue_tc.training.calibration import fit_class_offsets, fit_temperature, logits_of, offset

if TYPE_CHECKING:
    from klue_tc.data.identified import IdentifiedTitles
    from klue_tc.ensemble.blind import BlindPredictions

log = logging.getLogger(__name__)

VOTES_LINE = (
    "{n} of {total} members' records keep no probabilities (made by older code, or a run directory's copy "
    "without its results store): they take part by their fold models' votes (one-hot classes), without a "
    "temperature"
)

HELD_OUT_READ_LINE = (
    "{members} pretrained on corpora that held their folds' held-out training titles as unlabelled text "
    "(pretrain.include_held_out_titles): their out-of-fold probabilities, which choose the members, weights "
    "and temperatures, come from encoders that read those titles, so they flatter them beside the linear "
    "baselines; no validation title was in any corpus, so the validation scores are not affected"
)


# A baseline given class offsets of its own, in the comparisons: its key and name's suffixes.
OFFSET_KEY, OFFSET_NAME = "+offsets", ", offset by class"


class EnsembleError(KlueTcError):
    """The records cannot make an ensemble."""


@dataclass
class ValidationScores:
    source: str  # the file, or the runs' validation titles
    f1: float  # the ensemble's
    low: float
    high: float
    members: dict[str, float]  # each member's fold ensemble (and each baseline's offset by class)
    differences: list[Difference]  # the ensemble minus its best member and each baseline
    # The same at the training titles' class mix: each validation title weighs p_train / p_val of its class.
    train_mix_f1: Optional[float] = None
    train_mix_differences: list[Difference] = field(default_factory=list)


@dataclass
class Ensemble:
    directory: Path
    members: list[Member]  # every candidate, in the library's order
    titles: Titles
    selection: Selection
    label_names: list[str]
    notes: list[str] = field(default_factory=list)
    validation: Optional[ValidationScores] = None
    student: Optional[StudentScore] = None  # a student distilled from it, on the same validation titles
    # Titles without labels (blind.tsv) predicted once everything is chosen (klue_tc/ensemble/blind.py).
    blind: Optional[BlindPredictions] = None
    # Added to the log of the weighted mean, one per class (klue_tc/training/calibration.py); None: the mean alone.
    class_offsets: Optional[np.ndarray] = None

    @property
    def weights(self) -> dict[str, float]:
        return {m.key: float(w) for m, w in zip(self.members, self.selection.weights)}

    @property
    def chosen(self) -> list[tuple[Member, float]]:
        return [(m, float(w)) for m, w in zip(self.members, self.selection.weights) if w > 0]

    @property
    def best_member(self) -> Member:
        """The member of highest out-of-fold macro-F1 (of equals, the lower log-loss): the selection's first pick."""
        return self.members[self.selection.order[0]]

    def combine(self, parts: Sequence[Optional[np.ndarray]]) -> Optional[np.ndarray]:
        """The weighted mean of the members' calibrated probabilities, offset by class where the
        offsets are chosen (None where a chosen member has no probabilities)."""
        used = [(p, w) for p, w in zip(parts, self.selection.weights) if w > 0]
        if any(p is None for p, _ in used):
            return None
        mean = sum(w * p for p, w in used)
        return mean if self.class_offsets is None else offset(mean, self.class_offsets)

    @property
    def oof_f1(self) -> float:
        """The out-of-fold macro-F1 of the ensemble as it predicts (chosen on these titles: flattered)."""
        return macro_f1_of(self.titles.labels, self.oof_probs())

    def oof_probs(self) -> np.ndarray:
        return self.combine([m.calibrated_oof for m in self.members])

    def validation_probs(self) -> Optional[np.ndarray]:
        return self.combine([m.fold_ensemble() for m in self.members])


def read_held_out_titles(record: FoldResult) -> bool:
    """Whether the fold's encoder was pretrained on a corpus holding the fold's own held-out titles."""
    pretrained = record.pretrained or {}
    return bool(pretrained.get("include_held_out_titles") or pretrained.get("include_scored_titles"))


def label_names_of(records: Sequence[FoldResult], classes: int) -> list[str]:
    """The classes' names in id order, as the records' validation scores name them (YNAT's else)."""
    for record in records:
        named = list(record.validation.per_class_f1) if record.validation else []
        if len(named) == classes:
            return named
    return list(LABEL_NAMES) if classes == len(LABEL_NAMES) else [str(k) for k in range(classes)]


def fold_model_probs(member: Member, texts: Sequence[str], classes: int, batch_size: int) -> list[np.ndarray]:
    """Each of the member's fold models on `texts`, as its records keep them (one-hot votes where
    the member votes); its fold ensemble is the mean of these calibrated (Member.fold_ensemble)."""
    from klue_tc.ensemble.serving import as_votes, linear_fold_probs, neural_fold_probs

    if member.kind == LINEAR:
        probs = [linear_fold_probs(f.model, f.temperature, texts, classes) for f in member.folds]
    else:
        probs = [
            neural_fold_probs(Path(r.checkpoint or ""), Path(r.tokenizer_dir), texts, batch_size) for r in member.folds
        ]
    return [as_votes(p) for p in probs] if member.votes else probs


def rescored_on(
    members: Sequence[Member], path: Path, label_names: list[str], batch_size: int
) -> tuple[np.ndarray, str]:
    """Every member's fold models on the titles of `path` (labelled): their probabilities replace
    the records' validation ones; a member whose models are not on disk is left unscored."""
    from klue_tc.data.titles import read_labelled_file

    titles = read_labelled_file(path, label_names=label_names)
    for member in members:
        try:
            probs = fold_model_probs(member, titles.texts, len(label_names), batch_size)
        except (FileNotFoundError, IsADirectoryError, OSError) as err:
            log.warning("%s: its fold models cannot score %s (%s): left unscored", member.name, path, err)
            member.validation = None
            continue
        member.validation = probs
        member.fold_validation_f1 = float(np.mean([macro_f1_of(titles.labels, p) for p in probs]))
    return titles.labels.astype(np.int64), str(path)


def library(directory: Path, baselines: bool, models: bool) -> tuple[list[Member], Titles, list[str], list[str]]:
    """The candidate members, the titles they are scored on, the classes' names and the notes."""
    from klue_tc.ensemble.linear import linear_members
    from klue_tc.ensemble.sources import ensemble_records
    from klue_tc.report.loading import run_recipe

    records = ensemble_records(directory)
    if not records:
        raise EnsembleError(f"{directory}: no finished fold record (metrics.json or a results store) below it")
    members, titles, notes = neural_members(records)
    if titles is None:
        raise EnsembleError(f"{directory}: no configuration scores every training title once: " + "; ".join(notes))
    if baselines:
        linear, said = linear_members(run_recipe(directory), directory, titles, models)
        members += linear
        notes += said
    return members, titles, label_names_of(records, members[0].oof.shape[1]), notes


def own_class_offsets(member: Member, labels: np.ndarray) -> np.ndarray:
    """A linear baseline's own class offsets, chosen on its own calibrated out-of-fold predictions
    as the ensemble's are on its weighted mean."""
    return fit_class_offsets(logits_of(member.calibrated_oof), labels)


def offset_baselines(ensemble: Ensemble, sides: dict, names: dict) -> list[str]:
    """Each linear baseline's fold ensemble given the ensemble's last step too, its own class offsets
    chosen on its own out-of-fold predictions: the offsets alone must not pass for the ensemble's
    gain. Added to `sides` and `names`; their keys returned."""
    added = []
    for member in ensemble.members:
        if member.kind != LINEAR or member.votes or sides[member.key] is None:
            continue
        key = member.key + OFFSET_KEY
        offsets = own_class_offsets(member, ensemble.titles.labels)
        sides[key], names[key] = offset(sides[member.key], offsets), member.name + OFFSET_NAME
        added.append(key)
    return added


def score_validation(ensemble: Ensemble, source: str) -> Optional[ValidationScores]:
    from klue_tc.report.class_mix import importance_weights

    labels = ensemble.titles.validation_labels
    probs = ensemble.validation_probs()
    if labels is None or probs is None:
        return None
    classes = probs.shape[1]
    paired = PairedTitles(labels, classes)
    predicted = probs.argmax(1)
    sides = {m.key: m.fold_ensemble() for m in ensemble.members}
    names = {m.key: m.name for m in ensemble.members}
    best = ensemble.best_member
    against = [best.key] + [m.key for m in ensemble.members if m.kind == LINEAR and m is not best]
    if ensemble.class_offsets is not None:
        against += offset_baselines(ensemble, sides, names)
    scores = {key: paired.f1(p.argmax(1)) for key, p in sides.items() if p is not None}
    against = [key for key in against if sides[key] is not None]
    differences = [paired.difference(names[key], predicted, sides[key].argmax(1), key=key) for key in against]
    low, high = paired.interval(predicted)
    mix = importance_weights(
        np.bincount(ensemble.titles.labels, minlength=classes), np.bincount(labels, minlength=classes)
    )
    mixed = PairedTitles(labels, classes, class_weights=mix)
    return ValidationScores(
        source,
        paired.f1(predicted),
        low,
        high,
        scores,
        differences,
        mixed.f1(predicted),
        [mixed.difference(names[key], predicted, sides[key].argmax(1), key=key) for key in against],
    )


def build_ensemble(
    directory: str | Path,
    validation_file: Optional[Path] = None,
    max_rounds: int = MAX_ROUNDS,
    patience: int = PATIENCE,
    metric: str = LOG_LOSS,
    baselines: bool = True,
    batch_size: int = EVAL_BATCH_SIZE,
    class_offsets: bool = True,
    blind: Optional[IdentifiedTitles] = None,
) -> Ensemble:
    """The ensemble of the records below `directory`; `validation_file` (labelled) replaces the
    runs' validation titles, scored by every member's fold models. `class_offsets`: the weighted
    mean is offset by class, the offsets chosen on the out-of-fold predictions after the selection.
    `blind`: titles without labels, predicted by the linear baselines' fold ensembles (with and
    without their own class offsets) and the ensemble once all is chosen; they choose nothing."""
    directory = Path(directory)
    members, titles, label_names, notes = library(directory, baselines, models=validation_file is not None)
    voting = [m for m in members if m.votes]
    if voting:
        notes.append(VOTES_LINE.format(n=len(voting), total=len(members)))
    transductive = [m.name for m in members if m.kind != LINEAR and any(read_held_out_titles(r) for r in m.folds)]
    if transductive:
        notes.append(HELD_OUT_READ_LINE.format(members=", ".join(transductive)))
    source = "the runs' validation titles"
    if validation_file is not None:
        titles.validation_labels, source = rescored_on(members, validation_file, label_names, batch_size)
    for member in members:  # the out-of-fold titles alone choose each temperature
        if not member.votes:
            member.temperature = fit_temperature(logits_of(member.oof), titles.labels)
    selection = greedy_selection([m.calibrated_oof for m in members], titles.labels, max_rounds, patience, metric)
    ensemble = Ensemble(directory, members, titles, selection, label_names, notes)
    if class_offsets:
        ensemble.class_offsets = fit_class_offsets(logits_of(ensemble.oof_probs()), titles.labels)
    ensemble.validation = score_validation(ensemble, source)
    if blind is not None:  # last: every member, weight, temperature and offset is chosen by now
        from klue_tc.ensemble.blind import predict_blind

        ensemble.blind = predict_blind(ensemble, blind, batch_size)
    return ensemble
