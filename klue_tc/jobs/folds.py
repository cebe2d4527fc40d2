"""Which titles each of a job's folds trains on and is scored on: stratified k-fold CV, or with
`cv.folds=1` one final model on every training title, scored on the validation titles.

A final model chooses its epoch on an inner split of its training titles, as every fold does; the
validation titles take the held-out fold's place (scored once by the chosen checkpoint, and each
epoch for the learning curve only), so it is trained, recorded and served like any fold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from klue_tc.core.config import RunConfig
from klue_tc.core.errors import ConfigError
from klue_tc.data.titles import LabelledTitles, title_folds
from klue_tc.training.job_context import JobInputs


@dataclass(frozen=True)
class FoldTitles:
    """One fold's titles: `titles` holds every row the indices name."""

    titles: LabelledTitles
    train_idx: np.ndarray  # trained on (an inner split of them chooses the epoch)
    scored_idx: np.ndarray  # scored once by the chosen checkpoint
    held_out: np.ndarray  # the training titles the fold leaves out (its pretraining corpus does too)


def is_final(run: RunConfig) -> bool:
    """`cv.folds=1`: one model on every training title, no cross-validation."""
    return run.cv.folds == 1


def require_scored_titles(run: RunConfig, inputs: JobInputs) -> None:
    """A final model is scored on the validation titles: without them it would have no score."""
    if is_final(run) and inputs.validation is None:
        raise ConfigError(
            "cv.folds=1 trains one final model on every training title and scores it on the validation "
            "titles, and there are none: pass data.validation_path= (or use cv.folds=2 or more)"
        )


def job_folds(run: RunConfig, inputs: JobInputs) -> list[FoldTitles]:
    """Every fold of the job, by number."""
    train = inputs.train
    if not is_final(run):
        return [
            FoldTitles(train, train_idx, scored_idx, scored_idx)
            for train_idx, scored_idx in title_folds(train, run.cv.folds, run.cv.seed)
        ]
    validation = inputs.validation
    both = LabelledTitles(
        train.texts + validation.texts,
        np.concatenate([train.labels, validation.labels]),
        train.source,
        train.label_names,
    )
    everything = np.arange(len(train))
    return [FoldTitles(both, everything, np.arange(len(train), len(both)), np.array([], dtype=np.int64))]


def prepare(run: RunConfig, fold: FoldTitles, cache, pretrained=None, soft_targets=None):
    """The fold's tokenizer, encoded splits and batches' data (klue_tc.training.fold.prepare_fold). A final
    model's scored titles are numbered as rows of the validation file, as its validation predictions are.
    `soft_targets`: the teacher's probabilities for the job's training titles (they come first in a
    final model's titles, so the rows it trains on index them as they are)."""
    from klue_tc.training.fold import prepare_fold

    prepared = prepare_fold(run, fold.titles, fold.train_idx, fold.scored_idx, cache, pretrained, soft_targets)
    if is_final(run):
        prepared = replace(prepared, val_index=fold.scored_idx - len(fold.train_idx))
    return prepared
