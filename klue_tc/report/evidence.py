"""What the records can answer: which configurations learnt anything, and which questions the grid can judge.

A classifier that ignores the title scores about 1/K macro-F1 or less on K classes (any fixed
guessing rule does) and a cross-entropy near ln K (that of the class mix); a configuration *learnt*
when its fold mean clears 1/K by 1.96 standard errors, the larger of its folds' spread and the
sampling noise of F1 on the titles it was scored on, and, where its records keep learning curves,
its folds' lowest inner-split loss is below 0.9 ln K (a stalled pretraining's folds sit at 1.89 for
ln 7 = 1.95 while scoring 0.18 macro-F1; every fold that learnt reaches about 0.7). Differences
from a model that learnt nothing are noise about the factor compared, so where some configurations
learnt, those that did not are left out of every comparison (named in one line) but pretraining's:
a pretrained encoder that fine-tunes to chance is the effect of pretraining it asks about. A
question (or a factor's effects) is judged when the grid holds the levels it compares and its
reference side learnt; otherwise the report says, in one line, what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import pandas as pd

from klue_tc.report.claims import BLSTM, DEEP, SHALLOW, Claim
from klue_tc.report.effects import REFERENCES

Z = 1.96  # two-sided 95 %, as the report's other intervals
LOSS_SHARE = 0.9  # of ln K: an inner-split loss above it learnt next to nothing from the titles


def chance_f1(folds: pd.DataFrame) -> float:
    """The macro-F1 a classifier ignoring its input reaches at most (about 1/K for K classes)."""
    return 1 / int(folds["classes"].max())


def learnt(folds: pd.DataFrame, metric: str = "f1") -> pd.Series:
    """Per configuration (config_hash): does its mean clear chance by 1.96 standard errors and, where
    its records keep learning curves, its lowest inner-split loss fall below LOSS_SHARE x ln K?"""
    chance = chance_f1(folds)
    scored = folds.dropna(subset=[metric])
    by_config = scored.groupby("config_hash").agg(
        mean=(metric, "mean"), std=(metric, "std"), n=(metric, "size"), titles=("val_size", "sum")
    )
    sampling = (chance * (1 - chance) / by_config["titles"].clip(lower=1)) ** 0.5
    spread = (by_config["std"] / by_config["n"] ** 0.5).fillna(0.0)
    above_chance = by_config["mean"] - Z * pd.concat([sampling, spread], axis=1).max(axis=1) > chance
    if "best_inner_loss" not in scored:
        return above_chance
    loss = scored.groupby("config_hash")["best_inner_loss"].median()
    stalled = loss >= LOSS_SHARE * math.log(folds["classes"].max())  # NaN (no curve) is not stalled
    return above_chance & ~stalled.reindex(above_chance.index, fill_value=False)


def not_learnt_line(folds: pd.DataFrame, rows: pd.Series, what: str) -> Optional[str]:
    """One line naming the configurations among `rows` that did not beat chance (None: all did)."""
    configs = folds.loc[rows, "config_hash"].unique()
    if not len(configs):
        return f"no record of {what}"
    verdicts = learnt(folds).reindex(configs).fillna(False)
    if verdicts.all():
        return None
    failed = folds[folds["config_hash"].isin(verdicts.index[~verdicts])]
    best = failed.groupby("config_hash")["f1"].mean().max()
    return (
        f"{(~verdicts).sum()} of {len(verdicts)} configurations of {what} do not beat chance "
        f"(CV macro-F1 at most {best:.4f}; a classifier ignoring the title scores about {chance_f1(folds):.4f})"
    )


# The factor whose comparisons keep the configurations that did not learn (module docstring).
KEEPS_FAILURES = "pretrain"


@dataclass(frozen=True)
class LearntPart:
    folds: pd.DataFrame  # the folds of the configurations that learnt; every fold where none or all did
    left_out: list[str]  # the others, each as 'label (CV macro-F1)'

    def line(self) -> Optional[str]:
        if not self.left_out:
            return None
        return (
            f"{len(self.left_out)} configuration(s) that learnt next to nothing (macro-F1 within noise of chance, "
            f"or an inner-split loss that never fell below {LOSS_SHARE} ln K), left out of every comparison but "
            f"pretraining's (whose effect not learning is): {', '.join(self.left_out)}"
        )


def _label(row: pd.Series) -> str:
    parts = [row.get("tokenizer"), row["encoder"], row["ln"], f"L{row['layers']}", row.get("pretrain")]
    return " / ".join(str(p) for p in parts if p is not None)


def learnt_part(folds: pd.DataFrame) -> LearntPart:
    """The folds the comparisons read: those of the configurations that learnt, where some did not."""
    verdicts = learnt(folds)
    failed = verdicts.index[~verdicts]
    if not len(failed) or verdicts.sum() == 0:  # none failed, or nothing learnt: the questions say so
        return LearntPart(folds, [])
    rows = folds[folds["config_hash"].isin(failed)].groupby("config_hash")
    labels = [f"{_label(part.iloc[0])} ({part['f1'].mean():.3f})" for _, part in rows]
    return LearntPart(folds[~folds["config_hash"].isin(failed)], labels)


@dataclass(frozen=True)
class Question:
    """What a claim needs from the grid: the levels it compares, and its reference side's rows."""

    id: str
    needs: str  # the levels, in words
    has_levels: Callable[[pd.DataFrame], bool]
    reference: Callable[[pd.DataFrame], pd.Series]  # a boolean mask over the fold rows
    reference_name: str
    factor: str = ""  # the factor it compares, where one


def _encoders(folds: pd.DataFrame) -> set:
    return set(folds["encoder"])


def _study_encoders(folds: pd.DataFrame) -> bool:
    return {"cnn", "transformer"} <= _encoders(folds) and bool(set(BLSTM) & _encoders(folds))


def _depths(folds: pd.DataFrame) -> bool:
    blstm = folds[folds["encoder"].isin(BLSTM)]
    return blstm["layers"].isin(SHALLOW).any() and blstm["layers"].isin(DEEP).any()


def _both_placements(folds: pd.DataFrame) -> bool:
    return bool((folds.groupby("encoder")["ln"].nunique() > 1).any())


QUESTIONS = [
    Question(
        "i",
        "the study's encoders (cnn, transformer and a TRANS-BLSTM)",
        _study_encoders,
        lambda f: f["encoder"] != "cnn",
        "the encoders cnn is compared with",
    ),
    Question(
        "ii",
        "the study's encoders (cnn, transformer and a TRANS-BLSTM)",
        _study_encoders,
        lambda f: ~f["encoder"].isin(BLSTM),
        "the encoders TRANS-BLSTM is compared with",
    ),
    Question(
        "iii",
        f"a TRANS-BLSTM at {min(SHALLOW)}-{max(SHALLOW)} and at {min(DEEP)}-{max(DEEP)} layers",
        _depths,
        lambda f: f["encoder"].isin(BLSTM) & f["layers"].isin(SHALLOW),
        f"TRANS-BLSTM at {min(SHALLOW)}-{max(SHALLOW)} layers",
    ),
    Question("iv", "post- and pre-LN of one encoder", _both_placements, lambda f: f["ln"] == "post", "post-LN"),
    Question(
        "v",
        "two tokenizers",
        lambda f: f["tokenizer"].nunique() > 1,
        lambda f: pd.Series(True, index=f.index),
        "the grid",
    ),
    Question(
        "vi",
        "two layer counts",
        lambda f: f["layers"].nunique() > 1,
        lambda f: f["layers"] == f["layers"].min(),
        "the fewest layers",
    ),
    Question(
        "vii",
        "encoders with and without self-pretraining",
        lambda f: f["pretrain"].nunique() > 1,
        lambda f: f["pretrain"] == "none",
        "the encoders trained from scratch",
        factor=KEEPS_FAILURES,
    ),
]


def what_is_missing(folds: pd.DataFrame, question: Question, compared: Optional[pd.DataFrame] = None) -> Optional[str]:
    """Why `question` cannot be judged from these records, in a phrase (None: it can); `compared`:
    the folds its comparisons read (learnt_part's), where not all of `folds`."""
    if not question.has_levels(folds):
        return f"needs {question.needs}"
    if compared is None or compared is folds or question.factor == KEEPS_FAILURES:
        return not_learnt_line(folds, question.reference(folds), question.reference_name)
    if not question.reference(compared).any():
        return not_learnt_line(folds, question.reference(folds), question.reference_name)
    if not question.has_levels(compared):
        return f"needs {question.needs} among the configurations that beat chance"
    return None


def keeps_failures(claim_id: str) -> bool:
    """Whether a claim compares every configuration, those that did not learn included."""
    question = next((q for q in QUESTIONS if q.id == claim_id.split(".")[0]), None)
    return question is not None and question.factor == KEEPS_FAILURES


def judgeable(
    folds: pd.DataFrame, claims: Sequence[Claim], compared: Optional[pd.DataFrame] = None
) -> tuple[list[Claim], list[str]]:
    """The claims the records can judge (with their sub-claims), and a phrase per question they cannot."""
    missing = {q.id: what_is_missing(folds, q, compared) for q in QUESTIONS}
    kept = [c for c in claims if missing.get(c.id.split(".")[0]) is None]
    return kept, [f"({q}) {why}" for q, why in missing.items() if why is not None]


def effects_missing(folds: pd.DataFrame, factor: str) -> Optional[str]:
    """Why a factor's effects are left out (None: they are shown): its reference level did not learn."""
    reference = REFERENCES[factor]
    return not_learnt_line(folds, folds[factor] == reference, f"{factor} {reference}")
