"""What the records can answer: which questions the grid can judge.

A question (or a factor's effects) is judged when the grid holds the levels it compares and its
reference side learnt something: a grid whose every configuration on that side scores within noise
of chance (about 1/K macro-F1 on K classes: any fixed guessing rule does; klue_tc/report/exclusions.py
near_chance at 1.96 standard errors) has no difference worth a verdict, and the report says so in
one line instead. That guard leaves no configuration out: only the exclusion rules the runs declared
do (klue_tc/report/exclusions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import pandas as pd

from klue_tc.report.claims import DEEP, SHALLOW, Claim
from klue_tc.report.effects import REFERENCES
from klue_tc.report.encoder_traits import encoders_with, is_blstm, is_convolution
from klue_tc.report.exclusions import Exclusion, chance_f1, near_chance

GUARD_Z = 1.96  # two-sided 95 %, as the report's other intervals


def nothing_learnt_line(folds: pd.DataFrame, rows: pd.Series, what: str) -> Optional[str]:
    """One line where every configuration among `rows` is within noise of chance (None: some learnt)."""
    configs = folds.loc[rows, "config_hash"].unique()
    if not len(configs):
        return f"no record of {what}"
    at_chance = near_chance(folds, GUARD_Z).reindex(configs).fillna(True)
    if not at_chance.all():
        return None
    best = folds[folds["config_hash"].isin(configs)].groupby("config_hash")["f1"].mean().max()
    return (
        f"{len(configs)} of {len(configs)} configurations of {what} do not beat chance "
        f"(CV macro-F1 at most {best:.4f}; a classifier ignoring the title scores about {chance_f1(folds):.4f})"
    )


@dataclass(frozen=True)
class Question:
    """What a claim needs from the grid: the levels it compares, and its reference side's rows."""

    id: str
    needs: str  # the levels, in words
    has_levels: Callable[[pd.DataFrame], bool]
    reference: Callable[[pd.DataFrame], pd.Series]  # a boolean mask over the fold rows
    reference_name: str
    factor: str  # the factor it compares (an exclusion's kept_in names these)


def _encoders(folds: pd.DataFrame) -> set:
    return set(folds["encoder"])


def _with(folds: pd.DataFrame, trait) -> pd.Series:
    """A mask over the fold rows: those of an encoder whose blocks hold a module `trait` names."""
    return folds["encoder"].isin(encoders_with(sorted(_encoders(folds)), trait))


def _study_encoders(folds: pd.DataFrame) -> bool:
    """A convolutional encoder, a TRANS-BLSTM and a plain transformer (an encoder with neither)."""
    convolutional, blstm = _with(folds, is_convolution), _with(folds, is_blstm)
    return bool(convolutional.any() and blstm.any() and (~convolutional & ~blstm).any())


def _depths(folds: pd.DataFrame) -> bool:
    blstm = folds[_with(folds, is_blstm)]
    return blstm["layers"].isin(SHALLOW).any() and blstm["layers"].isin(DEEP).any()


def _both_placements(folds: pd.DataFrame) -> bool:
    return bool((folds.groupby("encoder")["ln"].nunique() > 1).any())


QUESTIONS = [
    Question(
        "i",
        "the study's encoders (cnn, transformer and a TRANS-BLSTM)",
        _study_encoders,
        lambda f: ~_with(f, is_convolution),
        "the encoders cnn is compared with",
        factor="encoder",
    ),
    Question(
        "ii",
        "the study's encoders (cnn, transformer and a TRANS-BLSTM)",
        _study_encoders,
        lambda f: ~_with(f, is_blstm),
        "the encoders TRANS-BLSTM is compared with",
        factor="encoder",
    ),
    Question(
        "iii",
        f"a TRANS-BLSTM at {min(SHALLOW)}-{max(SHALLOW)} and at {min(DEEP)}-{max(DEEP)} layers",
        _depths,
        lambda f: _with(f, is_blstm) & f["layers"].isin(SHALLOW),
        f"TRANS-BLSTM at {min(SHALLOW)}-{max(SHALLOW)} layers",
        factor="layers",
    ),
    Question("iv", "post- and pre-LN of one encoder", _both_placements, lambda f: f["ln"] == "post", "post-LN", "ln"),
    Question(
        "v",
        "two tokenizers",
        lambda f: f["tokenizer"].nunique() > 1,
        lambda f: pd.Series(True, index=f.index),
        "the grid",
        factor="tokenizer",
    ),
    Question(
        "vi",
        "two layer counts",
        lambda f: f["layers"].nunique() > 1,
        lambda f: f["layers"] == f["layers"].min(),
        "the fewest layers",
        factor="layers",
    ),
    Question(
        "vii",
        "encoders with and without self-pretraining",
        lambda f: f["pretrain"].nunique() > 1,
        lambda f: f["pretrain"] == "none",
        "the encoders trained from scratch",
        factor="pretrain",
    ),
]


def what_is_missing(folds: pd.DataFrame, question: Question, exclusion: Optional[Exclusion] = None) -> Optional[str]:
    """Why `question` cannot be judged from these records, in a phrase (None: it can); `exclusion`: the
    declared rules applied, whose kept folds its comparisons read unless the question's factor keeps all."""
    if not question.has_levels(folds):
        return f"needs {question.needs}"
    compared = folds if exclusion is None or exclusion.keeps(question.factor) else exclusion.folds
    if not question.reference(compared).any():
        return f"needs {question.reference_name} among the configurations the declared exclusions keep"
    if not question.has_levels(compared):
        return f"needs {question.needs} among the configurations the declared exclusions keep"
    return nothing_learnt_line(compared, question.reference(compared), question.reference_name)


def compares_every_configuration(claim_id: str, exclusion: Exclusion) -> bool:
    """Whether a claim reads every configuration, the left-out ones included (its factor is kept_in)."""
    question = next((q for q in QUESTIONS if q.id == claim_id.split(".")[0]), None)
    return question is not None and exclusion.keeps(question.factor)


def judgeable(
    folds: pd.DataFrame, claims: Sequence[Claim], exclusion: Optional[Exclusion] = None
) -> tuple[list[Claim], list[str]]:
    """The claims the records can judge (with their sub-claims), and a phrase per question they cannot."""
    missing = {q.id: what_is_missing(folds, q, exclusion) for q in QUESTIONS}
    kept = [c for c in claims if missing.get(c.id.split(".")[0]) is None]
    return kept, [f"({q}) {why}" for q, why in missing.items() if why is not None]


def effects_missing(folds: pd.DataFrame, factor: str) -> Optional[str]:
    """Why a factor's effects are left out (None: they are shown): its reference level learnt nothing."""
    reference = REFERENCES[factor]
    return nothing_learnt_line(folds, folds[factor] == reference, f"{factor} {reference}")
