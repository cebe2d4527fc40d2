"""The original study's claims, and a reader's next questions, judged from the fold records.

Claims (i)-(iii) are the original study's and get "reproduced", "refuted" or "inconclusive";
questions (iv)-(vi) are the reader's and get "yes", "no" or "inconclusive". Every number is a
paired difference from klue_tc.report.effects (cells matched on the other factors and the fold, a
bootstrap over cells); a verdict needs the whole 95 % interval on one side of its threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from klue_tc.report.effects import (
    CONFIDENCE,
    REFERENCES,
    Effect,
    bootstrap_cells,
    bootstrap_method,
    matching_keys,
    paired_difference,
)

REPRODUCED, REFUTED, INCONCLUSIVE, YES, NO = "reproduced", "refuted", "inconclusive", "yes", "no"
SHARP_DROP = 0.02  # two points of macro-F1: well above fold noise, the least a fall called "sharp" can mean
NEGLIGIBLE = 0.01  # one point of macro-F1: a gain this small would not change which design a reader picks
BLSTM = ("trans_blstm", "trans_blstm_parallel")
SHALLOW, DEEP = (2, 3, 4), (5, 6)
METRIC_TITLES = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}


@dataclass(frozen=True)
class Claim:
    """A verdict with the comparisons behind it; the number fields are the deciding comparison's."""

    id: str
    statement: str
    verdict: str
    evidence: str
    difference: float = math.nan
    low: float = math.nan
    high: float = math.nan
    cells: int = 0
    comparisons: tuple[Effect, ...] = ()


def _claim(
    id: str, statement: str, verdict: str, comparisons: Sequence[Effect], deciding: Effect | None = None
) -> Claim:
    deciding = deciding or (comparisons[0] if comparisons else Effect(""))
    evidence = "; ".join(e.text() for e in comparisons) or "not in these records"
    return Claim(
        id,
        statement,
        verdict,
        evidence,
        deciding.difference,
        deciding.low,
        deciding.high,
        deciding.cells,
        tuple(comparisons),
    )


def _levels(folds: pd.DataFrame, factor: str) -> list:
    return sorted(folds[factor].dropna().unique()) if factor in folds else []


def _effect(folds: pd.DataFrame, metric: str, factor: str, level, reference, confidence=CONFIDENCE) -> Effect:
    return paired_difference(
        folds, metric, factor, level, reference, matching_keys(folds, factor), confidence=confidence
    )


def _ordering(effects: Sequence[Effect], above: bool, words=(REPRODUCED, REFUTED)) -> tuple[str, Effect | None]:
    """Claimed side for every interval -> words[0]; one interval on the other side -> words[1]; else inconclusive.

    Returns the verdict and the deciding comparison (the one nearest to contradicting the claim).
    """
    near = [(e.low if above else -e.high) for e in effects]  # the bound that must clear 0 for the claim
    far = [(e.high if above else -e.low) for e in effects]
    if not effects:
        return INCONCLUSIVE, None
    weakest = effects[int(np.nanargmin(near))] if not all(map(math.isnan, near)) else effects[0]
    if any(f < 0 for f in far):
        return words[1], effects[int(np.nanargmin(far))]
    return (words[0] if all(n > 0 for n in near) else INCONCLUSIVE), weakest


def _helps(effect: Effect) -> str:
    """yes: the whole interval is a gain; no: any gain is below NEGLIGIBLE (losses included)."""
    return YES if effect.low > 0 else NO if effect.high < NEGLIGIBLE else INCONCLUSIVE


def cnn_is_lowest(folds: pd.DataFrame, metric: str) -> Claim:
    statement = "(i) The CNN-augmented encoder is the lowest (cnn − each other encoder)."
    if "cnn" not in _levels(folds, "encoder"):
        return _claim("i", statement, INCONCLUSIVE, [])
    effects = [_effect(folds, metric, "encoder", "cnn", other) for other in _levels(folds, "encoder") if other != "cnn"]
    verdict, deciding = _ordering(effects, above=False)
    return _claim("i", statement, verdict, effects, deciding)


def trans_blstm_is_highest(folds: pd.DataFrame, metric: str) -> Claim:
    present = [v for v in BLSTM if v in _levels(folds, "encoder")]
    if not present:
        return _claim("ii", "(ii) TRANS-BLSTM is the highest encoder.", INCONCLUSIVE, [])
    best = present[0]
    if len(present) == 2:  # the better variant by its paired difference; raw means if they share no cell
        between = _effect(folds, metric, "encoder", BLSTM[1], BLSTM[0])
        means = folds.groupby("encoder")[metric].mean()
        best = (
            BLSTM[1] if (between.difference if between.cells else means[BLSTM[1]] - means[BLSTM[0]]) > 0 else BLSTM[0]
        )
    statement = f"(ii) TRANS-BLSTM is the highest encoder (judged with {best}, the better variant by mean)."
    effects = [
        _effect(folds, metric, "encoder", best, other) for other in _levels(folds, "encoder") if other not in BLSTM
    ]
    verdict, deciding = _ordering(effects, above=True)
    return _claim("ii", statement, verdict, effects, deciding)


def _depth_fall(folds: pd.DataFrame, metric: str, encoders: Sequence[str]) -> Effect:
    """mean(layers 5, 6) − mean(layers 2, 3, 4), paired within (encoder, tokenizer, ln, fold)."""
    part = folds[folds["encoder"].isin(encoders) & folds["layers"].isin(SHALLOW + DEEP)]
    part = part.assign(depth=np.where(part["layers"].isin(DEEP), "5-6 layers", "2-4 layers"))
    within = [k for k in ("encoder", "tokenizer", "ln") if k in part]
    return paired_difference(part, metric, "depth", "5-6 layers", "2-4 layers", within)


def _sharp_fall_verdict(effect: Effect) -> str:
    """Reproduced: the interval is below 0 and the estimate at most −SHARP_DROP; refuted: even the
    interval's lower end is above −SHARP_DROP (no sharp fall fits the data); else inconclusive."""
    if effect.high < 0 and effect.difference <= -SHARP_DROP:
        return REPRODUCED
    return REFUTED if effect.low > -SHARP_DROP else INCONCLUSIVE


def trans_blstm_falls_from_5_layers(folds: pd.DataFrame, metric: str) -> list[Claim]:
    present = [v for v in BLSTM if v in _levels(folds, "encoder")]
    claims = []
    # One variant per sub-claim only where there are two: with one, it would repeat the claim.
    per_variant = [(f"iii.{v}", [v]) for v in present] if len(present) > 1 else []
    for id, encoders in [("iii", present), *per_variant]:
        fall = _depth_fall(folds, metric, encoders)
        statement = (
            f"(iii) TRANS-BLSTM's F1 falls sharply (by {SHARP_DROP:.2f} or more) from 5 layers on "
            f"({' and '.join(encoders) or 'no variant'})."
        )
        claims.append(_claim(id, statement, _sharp_fall_verdict(fall) if fall.cells else INCONCLUSIVE, [fall]))
    return claims


def pre_ln_helps(folds: pd.DataFrame, metric: str) -> list[Claim]:
    claims = []
    for id, scope in [("iv", None), *[(f"iv.{e}", e) for e in _levels(folds, "encoder")]]:
        part = folds if scope is None else folds[folds["encoder"] == scope]
        effect = _effect(part, metric, "ln", "pre", "post")
        statement = f"(iv) Does pre-LN help at these depths ({scope or 'all encoders'}; pre − post)?"
        claims.append(_claim(id, statement, _helps(effect) if effect.cells else INCONCLUSIVE, [effect]))
    return claims


def best_tokenizer(folds: pd.DataFrame, metric: str) -> Claim:
    tokenizers = _levels(folds, "tokenizer")
    versus = {t: [_effect(folds, metric, "tokenizer", t, u) for u in tokenizers if u != t] for t in tokenizers}
    if len(tokenizers) < 2:
        return _claim("v", "(v) Is one tokenizer the best? (one tokenizer only)", INCONCLUSIVE, [])
    mean_lead = {t: np.mean([e.difference for e in versus[t] if e.cells] or [-math.inf]) for t in tokenizers}
    best = max(tokenizers, key=mean_lead.get)
    verdict, deciding = _ordering(versus[best], above=True, words=(YES, NO))
    return _claim("v", f"(v) Is {best} (highest by paired mean) the best tokenizer?", verdict, versus[best], deciding)


def _slope_gain(folds: pd.DataFrame, metric: str) -> Effect:
    """The fitted slope of F1 over layers per (encoder, ln, tokenizer, fold), times the grid's span."""
    within = matching_keys(folds, "layers")
    scored = folds.dropna(subset=[metric])
    span = int(scored["layers"].max() - scored["layers"].min()) if len(scored) else 0
    label = f"fitted slope × {span} layers"
    fits = scored.groupby([*within, "fold"])[["layers", metric]]
    slopes = pd.Series(
        {key: stats.linregress(g["layers"], g[metric]).slope * span for key, g in fits if g["layers"].nunique() >= 2},
        dtype=float,
    )
    if slopes.empty:
        return Effect(label)
    slopes.index.names = [*within, "fold"]
    return bootstrap_cells(slopes, within, label)


def more_layers_help(folds: pd.DataFrame, metric: str) -> list[Claim]:
    layers = _levels(folds, "layers")
    reference = REFERENCES["layers"] if REFERENCES["layers"] in layers else (layers[0] if layers else None)
    counts = [n for n in layers if n != reference]
    # Bonferroni: "does any count help" asks one question of the family of len(counts) intervals.
    family = 1 - (1 - CONFIDENCE) / max(len(counts), 1)
    effects = [_effect(folds, metric, "layers", n, reference, family) for n in counts]
    slope = _slope_gain(folds, metric)
    # The answer is the one test over all layer counts (the paired slope); beside it, the
    # per-count comparisons with family-wise intervals.
    claims = [
        _claim(
            "vi",
            "(vi) Do more layers help at all (paired slope of F1 over layers)?",
            _helps(slope) if slope.cells else INCONCLUSIVE,
            [slope],
        )
    ]
    deciding = max(effects, key=lambda e: -math.inf if math.isnan(e.low) else e.low, default=None)
    verdicts = [_helps(e) if e.cells else INCONCLUSIVE for e in effects]
    per_count = YES if YES in verdicts else NO if verdicts and set(verdicts) == {NO} else INCONCLUSIVE
    claims.append(
        _claim(
            "vi.counts",
            f"(vi) Each layer count against {reference}: does any help (Bonferroni intervals over the {len(counts)})?",
            per_count,
            effects,
            deciding,
        )
    )
    return claims


def judge_claims(folds: pd.DataFrame, metric: str = "f1") -> list[Claim]:
    """Claims (i)-(iii) and questions (iv)-(vi), judged on one metric column."""
    folds = folds if metric in folds else folds.assign(**{metric: math.nan})
    return [
        cnn_is_lowest(folds, metric),
        trans_blstm_is_highest(folds, metric),
        *trans_blstm_falls_from_5_layers(folds, metric),
        *pre_ln_helps(folds, metric),
        best_tokenizer(folds, metric),
        *more_layers_help(folds, metric),
    ]


def claims_markdown(
    claims_by_metric: Mapping[str, Sequence[Claim]], not_judged: Sequence[str] = (), resamples: int = 2000
) -> str:
    """The judged claims per metric, then one line per question the records cannot judge and why."""
    lines = [
        "# The original study's claims, judged from the records",
        "",
        f"Method: every number is a paired difference: configurations are matched on the other factors "
        f"(the head goes with the encoder) and on the fold, fold differences are averaged per matched "
        f"cell, and the interval is a {bootstrap_method(resamples)}. Claims (i)-(iii) are reproduced or "
        f"refuted only when the whole interval lies on one side (a sharp fall is {SHARP_DROP:.2f} or more); "
        f"questions (iv)-(vi) answer no when any gain is below {NEGLIGIBLE:.2f}. These verdicts hold at "
        f"this scale (small models trained from scratch on this study's budget), not for every scale.",
        "",
    ]
    for metric, claims in claims_by_metric.items():
        if not claims:
            continue
        lines += [f"## {METRIC_TITLES.get(metric, metric)} (`{metric}`)", ""]
        lines += [f"{'  ' if '.' in c.id else ''}- **{c.verdict}**: {c.statement} {c.evidence}" for c in claims]
        lines.append("")
    if not_judged:
        lines += ["## Not judged", "", *[f"- {why}" for why in not_judged], ""]
    return "\n".join(lines)
