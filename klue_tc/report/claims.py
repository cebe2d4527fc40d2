"""The original study's claims, and a reader's next questions, judged from the fold records.

Claims (i)-(iii) are the original study's and get "reproduced", "refuted" or "inconclusive";
questions (iv)-(vii) are the reader's and get "yes", "no" or "inconclusive". Every number is a
contrast of the grid model (klue_tc.report.grid_model: cell means with the fold as a blocking
factor and the fold noise pooled over the grid); a verdict needs the whole interval on one side of
its threshold. Where a claim reads several comparisons at once, each interval is at Bonferroni's
1 - 0.05 / (their number). No variant or level is chosen on the records that judge it: claim (ii)
averages both TRANS-BLSTM variants (fixed in advance) and the best tokenizer is read off intervals
simultaneous over every pair, which stay valid whichever one the means then single out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from klue_tc.report.effects import REFERENCES, Effect
from klue_tc.report.encoder_traits import encoders_with, is_blstm, is_convolution
from klue_tc.report.grid_model import (
    CONFIDENCE,
    TIES_METHOD,
    Grid,
    difference_weights,
    family_confidence,
    signed,
)
from klue_tc.report.replicates import backing
from klue_tc.store.records import FROM_SCRATCH

REPRODUCED, REFUTED, INCONCLUSIVE, YES, NO = "reproduced", "refuted", "inconclusive", "yes", "no"
SHARP_DROP = 0.02  # two points of macro-F1: well above fold noise, the least a fall called "sharp" can mean
NEGLIGIBLE = 0.01  # one point of macro-F1: a gain this small would not change which design a reader picks
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
    rests_on: str = ""  # the deciding comparison with its interval

    @property
    def measured(self) -> bool:
        """Whether any matched set of cells was there to judge it."""
        return self.cells > 0

    def judged(self) -> str:
        """The verdict and the comparison it rests on, in one phrase."""
        return f"**{self.verdict}**: {self.rests_on or 'not in these records'}"


def _claim(
    id: str, statement: str, verdict: str, comparisons: Sequence[Effect], deciding: Optional[Effect] = None
) -> Claim:
    comparisons = [c for c in comparisons if c.cells]
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
        deciding.text() if deciding.cells else "",
    )


def _ordering(effects: Sequence[Effect], above: bool, words=(REPRODUCED, REFUTED)) -> tuple[str, Optional[Effect]]:
    """Claimed side for every interval -> words[0]; one interval on the other side -> words[1]; else inconclusive.

    Returns the verdict and the deciding comparison (the one nearest to contradicting the claim).
    """
    effects = [e for e in effects if e.cells]
    if not effects:
        return INCONCLUSIVE, None
    near = [(e.low if above else -e.high) for e in effects]  # the bound that must clear 0 for the claim
    far = [(e.high if above else -e.low) for e in effects]
    weakest = effects[int(np.nanargmin(near))] if not all(map(math.isnan, near)) else effects[0]
    if any(f < 0 for f in far):
        return words[1], effects[int(np.nanargmin(far))]
    return (words[0] if all(n > 0 for n in near) else INCONCLUSIVE), weakest


def _helps(effect: Effect) -> str:
    """yes: the whole interval is a gain; no: any gain is below NEGLIGIBLE (losses included)."""
    if not effect.cells:
        return INCONCLUSIVE
    return YES if effect.low > 0 else NO if effect.high < NEGLIGIBLE else INCONCLUSIVE


def subject(encoders: Sequence[str]):
    """The encoders a claim is about as one level: the name of one, else the tuple (averaged)."""
    return encoders[0] if len(encoders) == 1 else tuple(encoders)


def cnn_is_lowest(grid: Grid) -> Claim:
    """The CNN-augmented encoders: every encoder whose blocks hold a convolution (averaged where several)."""
    convolutional = encoders_with(grid.levels("encoder"), is_convolution)
    name = " and ".join(convolutional)
    compared = f"{name}{', averaged,' if len(convolutional) > 1 else ''} − each other encoder" if name else "none here"
    statement = f"(i) The CNN-augmented encoder is the lowest ({compared})."
    others = [e for e in grid.levels("encoder") if e not in convolutional]
    if not convolutional:
        return _claim("i", statement, INCONCLUSIVE, [])
    level = family_confidence(len(others))
    effects = [grid.difference("encoder", subject(convolutional), other, level) for other in others]
    verdict, deciding = _ordering(effects, above=False)
    return _claim("i", statement, verdict, effects, deciding)


def trans_blstm_is_highest(grid: Grid) -> list[Claim]:
    """TRANS-BLSTM: every encoder whose blocks hold a BLSTM. Judged with the variants averaged
    (fixed before looking), then each variant on its own."""
    present = tuple(encoders_with(grid.levels("encoder"), is_blstm))
    others = [e for e in grid.levels("encoder") if e not in present]
    claims = []
    for id, variants in [("ii", present), *([(f"ii.{v}", (v,)) for v in present] if len(present) > 1 else [])]:
        name = " and ".join(variants) if variants else "no variant"
        statement = f"(ii) TRANS-BLSTM is the highest encoder ({name}{', averaged' if len(variants) > 1 else ''})."
        if not variants:
            claims.append(_claim(id, statement, INCONCLUSIVE, []))
            continue
        # Each variant alone is one of several read together: Bonferroni over all their comparisons.
        level = family_confidence(len(others) * (1 if id == "ii" else len(present)))
        effects = [grid.difference("encoder", variants, other, level) for other in others]
        verdict, deciding = _ordering(effects, above=True)
        claims.append(_claim(id, statement, verdict, effects, deciding))
    return claims


def _depth_fall(grid: Grid, encoders: Sequence[str], confidence: float = CONFIDENCE) -> Effect:
    """mean(layers 5, 6) − mean(layers 2, 3, 4) within each (encoder, tokenizer, ln, pretrain)."""
    cells = grid.where(encoder=tuple(encoders), layers=SHALLOW + DEEP)
    cells = cells.assign(depth=np.where(cells["layers"].isin(DEEP), "deep", "shallow"))
    within = [k for k in ("encoder", "tokenizer", "ln", "pretrain") if k in cells]
    weights, sets = difference_weights(cells, "depth", "deep", "shallow", within)
    label = f"{min(DEEP)}-{max(DEEP)} layers − {min(SHALLOW)}-{max(SHALLOW)} layers"
    return grid.contrast(weights, sets, label, confidence)


def _sharp_fall_verdict(effect: Effect) -> str:
    """Reproduced: the interval is below 0 and the estimate at most −SHARP_DROP; refuted: even the
    interval's lower end is above −SHARP_DROP (no sharp fall fits the data); else inconclusive."""
    if not effect.cells:
        return INCONCLUSIVE
    if effect.high < 0 and effect.difference <= -SHARP_DROP:
        return REPRODUCED
    return REFUTED if effect.low > -SHARP_DROP else INCONCLUSIVE


def trans_blstm_falls_from_5_layers(grid: Grid) -> list[Claim]:
    present = encoders_with(grid.levels("encoder"), is_blstm)
    claims = []
    # One variant per sub-claim only where there are two: with one, it would repeat the claim.
    per_variant = [(f"iii.{v}", [v]) for v in present] if len(present) > 1 else []
    for id, encoders in [("iii", present), *per_variant]:
        fall = _depth_fall(grid, encoders)
        statement = (
            f"(iii) TRANS-BLSTM's F1 falls sharply (by {SHARP_DROP:.2f} or more) from 5 layers on "
            f"({' and '.join(encoders) or 'no variant'})."
        )
        claims.append(_claim(id, statement, _sharp_fall_verdict(fall), [fall]))
    return claims


def pre_ln_helps(grid: Grid) -> list[Claim]:
    encoders = grid.levels("encoder")
    each = family_confidence(len(encoders))
    claims = []
    for id, scope in [("iv", None), *[(f"iv.{e}", e) for e in encoders]]:
        effect = (
            grid.difference("ln", "pre", "post")
            if scope is None
            else grid.difference("ln", "pre", "post", each, encoder=scope)
        )
        statement = f"(iv) Does pre-LN help at these depths ({scope or 'all encoders'}; pre − post)?"
        claims.append(_claim(id, statement, _helps(effect), [effect]))
    return claims


def best_tokenizer(grid: Grid) -> Claim:
    tokenizers = grid.levels("tokenizer")
    if len(tokenizers) < 2:
        return _claim("v", "(v) Is one tokenizer the best? (one tokenizer only)", INCONCLUSIVE, [])
    # Simultaneous over every pair, so naming the best by its means afterwards biases nothing.
    level = family_confidence(len(tokenizers) * (len(tokenizers) - 1) // 2)
    versus = {t: [grid.difference("tokenizer", t, u, level) for u in tokenizers if u != t] for t in tokenizers}
    lead = {t: np.mean([e.difference for e in versus[t] if e.cells] or [-math.inf]) for t in tokenizers}
    best = max(tokenizers, key=lead.get)
    verdict, deciding = _ordering(versus[best], above=True, words=(YES, NO))
    statement = f"(v) Is {best} (highest mean) the best tokenizer (intervals simultaneous over all pairs)?"
    return _claim("v", statement, verdict, versus[best], deciding)


def more_layers_help(grid: Grid) -> list[Claim]:
    layers = grid.levels("layers")
    reference = REFERENCES["layers"] if REFERENCES["layers"] in layers else (layers[0] if layers else None)
    counts = [n for n in layers if n != reference]
    slope = grid.slope()
    # The answer is the one contrast over all layer counts (the fitted slope); beside it, the slope
    # under each LN placement (depth and LN interact) and the per-count comparisons, family-wise.
    claims = [_claim("vi", "(vi) Do more layers help at all (fitted slope of F1 over layers)?", _helps(slope), [slope])]
    placements = [ln for ln in ("post", "pre") if ln in grid.levels("ln")]
    for ln in placements if len(placements) > 1 else []:
        effect = grid.slope(family_confidence(len(placements)), ln=ln)
        claims.append(_claim(f"vi.{ln}", f"(vi) Do more layers help under {ln}-LN?", _helps(effect), [effect]))
    family = family_confidence(len(counts))
    effects = [grid.difference("layers", n, reference, family) for n in counts]
    deciding = max(effects, key=lambda e: -math.inf if math.isnan(e.low) else e.low, default=None)
    verdicts = [_helps(e) for e in effects]
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


def pretraining_helps(grid: Grid) -> list[Claim]:
    """(vii) Does self-pretraining help (each objective − none), over the grid and per encoder? With
    several objectives in the grid, each is judged under an id of its own (vii.<objective>)."""
    levels = grid.levels("pretrain")
    objectives = [p for p in levels if p != FROM_SCRATCH] if FROM_SCRATCH in levels else []
    claims = []
    for objective in objectives:
        claims += objective_helps(grid, objective, "vii" if len(objectives) == 1 else f"vii.{objective}")
    return claims


def objective_helps(grid: Grid, objective: str, id: str) -> list[Claim]:
    encoders = [
        e for e in grid.levels("encoder") if grid.difference("pretrain", objective, FROM_SCRATCH, encoder=e).cells
    ]
    each = family_confidence(len(encoders))
    claims = []
    for claim_id, scope in [(id, None), *([(f"{id}.{e}", e) for e in encoders] if len(encoders) > 1 else [])]:
        effect = (
            grid.difference("pretrain", objective, FROM_SCRATCH)
            if scope is None
            else grid.difference("pretrain", objective, FROM_SCRATCH, each, encoder=scope)
        )
        seeds = backing(grid.cells, effect.weights)
        statement = (
            f"(vii) Does self-pretraining ({objective}) help ({scope or 'all encoders'}; {objective} − none"
            + (f"; {seeds}" if seeds else "")
            + ")?"
        )
        claims.append(_claim(claim_id, statement, _helps(effect), [effect]))
    return claims


def judge_claims(folds: pd.DataFrame, metric: str = "f1", grid: Optional[Grid] = None) -> list[Claim]:
    """Claims (i)-(iii) and questions (iv)-(vii), judged on one metric column."""
    grid = grid or Grid(folds if metric in folds else folds.assign(**{metric: math.nan}), metric)
    return [
        cnn_is_lowest(grid),
        *trans_blstm_is_highest(grid),
        *trans_blstm_falls_from_5_layers(grid),
        *pre_ln_helps(grid),
        best_tokenizer(grid),
        *more_layers_help(grid),
        *pretraining_helps(grid),
    ]


def method_line() -> str:
    return (
        "Method: every number is a contrast of one model of the whole grid (fold F1 = cell mean + fold "
        "effect + noise, least squares, the noise's variance pooled over every cell; t intervals at its "
        "residual degrees of freedom). Configurations are compared within matched sets (the same other "
        "factors; the head goes with the encoder), averaged over the sets. Where a claim reads several "
        "comparisons at once, each interval is at Bonferroni's 1 - 0.05 / (their number), as printed. "
        f"Claims (i)-(iii) are reproduced or refuted only when the whole interval lies on one side (a sharp "
        f"fall is {SHARP_DROP:.2f} or more); questions (iv)-(vii) answer no when any gain is below "
        f"{NEGLIGIBLE:.2f}. No variant or level is picked on the records that judge it: (ii) averages both "
        "TRANS-BLSTM variants, and (v)'s intervals are simultaneous over every pair of tokenizers. The best "
        f"configuration's ties in report.md: {TIES_METHOD}. These verdicts hold at this scale (small models "
        "on this study's budget), not for every scale."
    )


@dataclass(frozen=True)
class StudyVerdicts:
    """One study's (or one part of a grid's) verdicts, for the side-by-side table."""

    name: str
    judged: Mapping[str, Sequence[Claim]]
    not_judged: Sequence[str] = ()  # "(id) why", as klue_tc.report.evidence words them
    # Per metric, claim id -> the claim on every configuration, where a declared exclusion changes it.
    both_ways: Mapping[str, Mapping[str, Optional[Claim]]] = field(default_factory=dict)

    def cell(self, metric: str, id: str) -> str:
        claim = next((c for c in self.judged.get(metric, ()) if c.id == id), None)
        if claim is not None and claim.measured:
            changed = self.both_ways.get(metric, {})
            if id in changed:
                return f"{claim.judged()} (without the declared exclusion: {without(changed[id])})"
            return claim.judged()
        why = next((w for w in self.not_judged if w.startswith(f"({id.split('.')[0]})")), None)
        return f"not yet measured: {why.split(') ', 1)[1]}" if why else "not yet measured"


def without(claim: Optional[Claim]) -> str:
    """A claim as judged on every configuration, where a declared exclusion changes its verdict."""
    return claim.judged() if claim is not None and claim.measured else "not judged"


def what_changed(first: Optional[Claim], last: Optional[Claim], last_name: str) -> str:
    """The move from the first study's verdict to the last one's, with the estimates."""
    if last is None or not last.measured:
        return f"not yet measured in {last_name}"
    if first is None or not first.measured:
        return "not measured in the first"
    shift = f"estimate {signed(first.difference)} → {signed(last.difference)}"
    if first.verdict == last.verdict:
        return f"same verdict ({first.verdict}); {shift}"
    return f"{first.verdict} → {last.verdict}; {shift}"


def side_by_side(studies: Sequence[StudyVerdicts]) -> list[str]:
    """Per metric, a row per claim: each study's verdict with the comparison it rests on, and what
    changed between the first study and the last."""
    lines = ["## Side by side", ""]
    for metric, title in METRIC_TITLES.items():
        ids = list(dict.fromkeys(c.id for s in studies for c in s.judged.get(metric, ())))
        if not ids:
            continue
        statements = {c.id: c.statement for s in studies for c in s.judged.get(metric, ())}
        lines += [
            f"### {title} (`{metric}`)",
            "",
            "| claim | " + " | ".join(s.name for s in studies) + " | what changed |",
            "|---|" + "---|" * (len(studies) + 1),
        ]
        for id in ids:
            first, last = (
                next((c for c in s.judged.get(metric, ()) if c.id == id), None) for s in (studies[0], studies[-1])
            )
            cells = [s.cell(metric, id).replace("|", "/") for s in studies]
            lines.append(
                f"| {statements[id]} | " + " | ".join(cells) + f" | {what_changed(first, last, studies[-1].name)} |"
            )
        lines.append("")
    return lines


def claims_markdown(
    claims_by_metric: Mapping[str, Sequence[Claim]],
    not_judged: Sequence[str] = (),
    beside: Sequence[StudyVerdicts] = (),
    command: Optional[str] = None,
    left_out: Optional[str] = None,
    both_ways: Optional[Mapping[str, Mapping[str, Optional[Claim]]]] = None,
) -> str:
    """The judged claims per metric, one line per question the records cannot judge and why, and
    (given `beside`) the verdicts of several studies side by side; `command`: the one that wrote it;
    `both_ways`: each claim a declared exclusion changes, as judged on every configuration."""
    both_ways = both_ways or {}
    lines = ["# The original study's claims, judged from the records", ""]
    if command:
        lines += [f"Written with report.md by `{command}`.", ""]
    lines += [method_line(), ""]
    if left_out:
        lines += [f"{left_out[0].upper()}{left_out[1:]}.", ""]
    if beside:
        lines += side_by_side(beside)
    for metric, claims in claims_by_metric.items():
        if not claims:
            continue
        lines += [f"## {METRIC_TITLES.get(metric, metric)} (`{metric}`)", ""]
        for c in claims:
            indent = "  " if "." in c.id else ""
            lines.append(f"{indent}- **{c.verdict}**: {c.statement} {c.evidence}")
            if c.id in both_ways.get(metric, {}):
                plain = both_ways[metric][c.id]
                judged = f"**{plain.verdict}**: {plain.evidence}" if plain is not None else "not judged"
                lines.append(f"{indent}  - without the declared exclusion: {judged}")
        lines.append("")
    if not_judged:
        lines += ["## Not judged", "", *[f"- {why}" for why in not_judged], ""]
    return "\n".join(lines)
