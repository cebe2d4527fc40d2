"""The original study's claims, and a reader's next questions, judged from the fold records.

Claims (i)-(iii) are the original study's and get "reproduced", "refuted" or "inconclusive";
questions (iv)-(vii) are the reader's and get "yes", "no" or "inconclusive". Every number is a
contrast of the grid model (klue_tc.report.grid_model: cell means with the fold as a blocking
factor and the fold noise pooled over the grid). The verdict rule (VERDICT_RULE) reads each
comparison's interval at its level in one multiplicity family per study: every comparison its
verdicts read, on every metric, under Holm's step-down (Family). No variant or level is chosen on
the records that judge it: claim (ii) averages both TRANS-BLSTM variants (fixed in advance) and the
best tokenizer is named after every pair of tokenizers has entered the family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from klue_tc.report.effects import REFERENCES, Effect
from klue_tc.report.encoder_traits import encoders_with, is_blstm, is_convolution
from klue_tc.report.grid_model import CONFIDENCE, TIES_METHOD, Grid, difference_weights, signed
from klue_tc.report.replicates import backing
from klue_tc.store.records import FROM_SCRATCH

REPRODUCED, REFUTED, INCONCLUSIVE, YES, NO = "reproduced", "refuted", "inconclusive", "yes", "no"
SHARP_DROP = 0.02  # two points of macro-F1: well above fold noise, the least a fall called "sharp" can mean
NEGLIGIBLE = 0.01  # one point of macro-F1: a gain this small would not change which design a reader picks
SHALLOW, DEEP = (2, 3, 4), (5, 6)
METRIC_TITLES = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}
VERDICT_RULE = (
    "A comparison's interval is read at its Holm level (below). Claims (i)-(ii): reproduced when every "
    "comparison's interval lies on the claimed side of 0, refuted when any lies wholly on the other side. "
    f"Claim (iii): reproduced when the interval lies below 0 and the estimate is at most -{SHARP_DROP:.2f}, refuted "
    f"when even its lower end is above -{SHARP_DROP:.2f}. Questions (iv)-(vii): no when the whole interval lies "
    f"below {NEGLIGIBLE:.2f} (any gain is too small to change a choice; this is checked first, so a real gain "
    f"smaller than {NEGLIGIBLE:.2f} is a no), else yes when the whole interval lies above 0. Anything else is "
    "inconclusive."
)
FAMILY_RULE = (
    "Multiplicity: one family per study, every comparison listed below on every metric, with every pair of "
    "tokenizers where (v) is judged ({size} here), under "
    "Holm's step-down at 5 %: each comparison's p-value is that of the rule's threshold its estimate is "
    "farthest from (0, or the 0.01 and 0.02 margins), and its Holm level is the confidence at which its "
    "interval excludes that threshold exactly when Holm rejects it. The 95 % interval is printed beside it."
)


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


Read = Callable[[str, Effect, Sequence[float]], Effect]  # (claim id, comparison, thresholds) -> at its level


def two_sided_p(effect: Effect, threshold: float) -> float:
    """The p-value of "the difference is `threshold`", two-sided, as the interval reads it (1 without one)."""
    if not effect.cells or not effect.df or not effect.se > 0:
        return 1.0
    return float(2 * stats.t.sf(abs(effect.difference - threshold) / effect.se, effect.df))


def at_confidence(effect: Effect, confidence: float) -> Effect:
    """The same comparison with its interval at `confidence` (unchanged where it has none)."""
    if not effect.cells or not effect.df or not effect.se > 0:
        return effect
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, effect.df)) * effect.se
    return replace(effect, low=effect.difference - half, high=effect.difference + half, confidence=confidence)


class Family:
    """One study's multiplicity family: every comparison its verdicts read, on every metric.

    Filled by a first pass over the claims (each rule names the thresholds it tests), then closed:
    Holm's step-down over the comparisons' p-values gives each one a level, the confidence at which
    its interval excludes its threshold exactly when Holm rejects there; the second pass reads every
    interval at that level. A comparison's p-value is its smallest over the rule's thresholds: their
    hypotheses are disjoint (a difference cannot be both at most 0 and at least 0.01), so at most one
    of them is true and taking the smallest keeps the family-wise error at 5 %.
    """

    def __init__(self, alpha: float = 1 - CONFIDENCE):
        self.alpha = alpha
        self._p: dict[tuple, float] = {}
        self._levels: Optional[dict[tuple, float]] = None

    @property
    def size(self) -> int:
        return len(self._p)

    def retain(self, reading: str, claim_ids: Sequence[str]) -> None:
        """While open: forget `reading`'s comparisons of claims other than `claim_ids` (those the
        records cannot judge are not shown, so they are not in the family)."""
        if self._levels is None:
            self._p = {k: p for k, p in self._p.items() if k[0] != reading or k[1] in claim_ids}

    def reader(self, reading: str) -> Read:
        """`reading`: the metric (and, where one grid is read twice, which reading) the keys carry."""

        def read(claim_id: str, effect: Effect, thresholds: Sequence[float]) -> Effect:
            key = (reading, claim_id, effect.label)
            if self._levels is None:
                self._p[key] = min(two_sided_p(effect, t) for t in thresholds)
                return effect
            if key not in self._levels:  # a claim the records cannot judge: never shown, not in the family
                return effect
            return at_confidence(effect, 1 - self._levels[key])

        return read

    def close(self) -> Family:
        keys = list(self._p)
        raw = np.array([self._p[k] for k in keys])
        adjusted = multipletests(raw, alpha=self.alpha, method="holm")[1] if len(raw) else raw
        # Rejected iff adjusted < alpha iff raw < alpha * raw / adjusted: that ratio is the level.
        self._levels = {
            k: self.alpha * r / a if a > 0 else self.alpha / len(keys) for k, r, a in zip(keys, raw, adjusted)
        }
        return self


def comparison_text(plain: Effect, held: Effect) -> str:
    """A comparison with its interval at its Holm level and, beside it, at 95 %."""
    if held is plain or not held.cells or math.isnan(held.low):
        return held.text()
    sets = f"{held.cells} matched set{'s' if held.cells > 1 else ''}"
    return (
        f"{held.label}: {signed(held.difference)} (Holm {held.confidence * 100:.4g} % {signed(held.low)}.."
        f"{signed(held.high)}; {plain.confidence * 100:.4g} % {signed(plain.low)}..{signed(plain.high)}; {sets})"
    )


def _claim(
    id: str,
    statement: str,
    verdict: str,
    plain: Sequence[Effect],
    held: Sequence[Effect],
    deciding: Optional[int] = None,
) -> Claim:
    """`plain`: the comparisons at 95 %; `held`: the same at their Holm levels; `deciding`: the index of
    the one the verdict rests on (the first where not given)."""
    pairs = [(p, h) for p, h in zip(plain, held) if p.cells]
    if not pairs:
        return Claim(id, statement, verdict, "not in these records")
    index = 0 if deciding is None else next(i for i, (_, h) in enumerate(pairs) if h is held[deciding])
    plain_d, held_d = pairs[index]
    return Claim(
        id,
        statement,
        verdict,
        "; ".join(comparison_text(p, h) for p, h in pairs),
        held_d.difference,
        held_d.low,
        held_d.high,
        held_d.cells,
        tuple(h for _, h in pairs),
        comparison_text(plain_d, held_d),
    )


def _ordering(effects: Sequence[Effect], above: bool, words=(REPRODUCED, REFUTED)) -> tuple[str, Optional[int]]:
    """Claimed side for every interval -> words[0]; one interval on the other side -> words[1]; else inconclusive.

    Returns the verdict and the index of the deciding comparison (the one nearest to contradicting the claim).
    """
    measured = [i for i, e in enumerate(effects) if e.cells]
    if not measured:
        return INCONCLUSIVE, None
    near = {i: (effects[i].low if above else -effects[i].high) for i in measured}  # must clear 0 for the claim
    far = {i: (effects[i].high if above else -effects[i].low) for i in measured}
    known = [i for i in measured if not math.isnan(near[i])]
    weakest = min(known, key=near.get) if known else measured[0]
    against = [i for i in measured if far[i] < 0]
    if against:
        return words[1], min(against, key=far.get)
    return (words[0] if all(near[i] > 0 for i in measured) else INCONCLUSIVE), weakest


ORDERING_THRESHOLDS = (0.0,)
HELPS_THRESHOLDS = (0.0, NEGLIGIBLE)
SHARP_FALL_THRESHOLDS = (0.0, -SHARP_DROP)


def _helps(effect: Effect) -> str:
    """no: the whole interval below NEGLIGIBLE (checked first); yes: the whole interval a gain."""
    if not effect.cells:
        return INCONCLUSIVE
    return NO if effect.high < NEGLIGIBLE else YES if effect.low > 0 else INCONCLUSIVE


def subject(encoders: Sequence[str]):
    """The encoders a claim is about as one level: the name of one, else the tuple (averaged)."""
    return encoders[0] if len(encoders) == 1 else tuple(encoders)


def cnn_is_lowest(grid: Grid, read: Read) -> Claim:
    """The CNN-augmented encoders: every encoder whose blocks hold a convolution (averaged where several)."""
    convolutional = encoders_with(grid.levels("encoder"), is_convolution)
    name = " and ".join(convolutional)
    compared = f"{name}{', averaged,' if len(convolutional) > 1 else ''} − each other encoder" if name else "none here"
    statement = f"(i) The CNN-augmented encoder is the lowest ({compared})."
    others = [e for e in grid.levels("encoder") if e not in convolutional]
    if not convolutional:
        return _claim("i", statement, INCONCLUSIVE, [], [])
    effects = [grid.difference("encoder", subject(convolutional), other) for other in others]
    held = [read("i", e, ORDERING_THRESHOLDS) for e in effects]
    verdict, deciding = _ordering(held, above=False)
    return _claim("i", statement, verdict, effects, held, deciding)


def trans_blstm_is_highest(grid: Grid, read: Read) -> list[Claim]:
    """TRANS-BLSTM: every encoder whose blocks hold a BLSTM. Judged with the variants averaged
    (fixed before looking), then each variant on its own."""
    present = tuple(encoders_with(grid.levels("encoder"), is_blstm))
    others = [e for e in grid.levels("encoder") if e not in present]
    claims = []
    for id, variants in [("ii", present), *([(f"ii.{v}", (v,)) for v in present] if len(present) > 1 else [])]:
        name = " and ".join(variants) if variants else "no variant"
        statement = f"(ii) TRANS-BLSTM is the highest encoder ({name}{', averaged' if len(variants) > 1 else ''})."
        if not variants:
            claims.append(_claim(id, statement, INCONCLUSIVE, [], []))
            continue
        effects = [grid.difference("encoder", variants, other) for other in others]
        held = [read(id, e, ORDERING_THRESHOLDS) for e in effects]
        verdict, deciding = _ordering(held, above=True)
        claims.append(_claim(id, statement, verdict, effects, held, deciding))
    return claims


def _depth_fall(grid: Grid, encoders: Sequence[str]) -> Effect:
    """mean(layers 5, 6) − mean(layers 2, 3, 4) within each (encoder, tokenizer, ln, pretrain)."""
    cells = grid.where(encoder=tuple(encoders), layers=SHALLOW + DEEP)
    cells = cells.assign(depth=np.where(cells["layers"].isin(DEEP), "deep", "shallow"))
    within = [k for k in ("encoder", "tokenizer", "ln", "pretrain") if k in cells]
    weights, sets = difference_weights(cells, "depth", "deep", "shallow", within)
    label = f"{min(DEEP)}-{max(DEEP)} layers − {min(SHALLOW)}-{max(SHALLOW)} layers"
    return grid.contrast(weights, sets, label, CONFIDENCE)


def _sharp_fall_verdict(effect: Effect) -> str:
    """Reproduced: the interval is below 0 and the estimate at most −SHARP_DROP; refuted: even the
    interval's lower end is above −SHARP_DROP (no sharp fall fits the data); else inconclusive."""
    if not effect.cells:
        return INCONCLUSIVE
    if effect.high < 0 and effect.difference <= -SHARP_DROP:
        return REPRODUCED
    return REFUTED if effect.low > -SHARP_DROP else INCONCLUSIVE


def trans_blstm_falls_from_5_layers(grid: Grid, read: Read) -> list[Claim]:
    present = encoders_with(grid.levels("encoder"), is_blstm)
    claims = []
    # One variant per sub-claim only where there are two: with one, it would repeat the claim.
    per_variant = [(f"iii.{v}", [v]) for v in present] if len(present) > 1 else []
    for id, encoders in [("iii", present), *per_variant]:
        fall = _depth_fall(grid, encoders)
        held = read(id, fall, SHARP_FALL_THRESHOLDS)
        statement = (
            f"(iii) TRANS-BLSTM's F1 falls sharply (by {SHARP_DROP:.2f} or more) from 5 layers on "
            f"({' and '.join(encoders) or 'no variant'})."
        )
        claims.append(_claim(id, statement, _sharp_fall_verdict(held), [fall], [held]))
    return claims


def _question(id: str, statement: str, effect: Effect, read: Read) -> Claim:
    """A reader's question on one comparison, answered by _helps at its Holm level."""
    held = read(id, effect, HELPS_THRESHOLDS)
    return _claim(id, statement, _helps(held), [effect], [held])


def pre_ln_helps(grid: Grid, read: Read) -> list[Claim]:
    claims = []
    for id, scope in [("iv", None), *[(f"iv.{e}", e) for e in grid.levels("encoder")]]:
        effect = grid.difference("ln", "pre", "post", **({} if scope is None else {"encoder": scope}))
        statement = f"(iv) Does pre-LN help at these depths ({scope or 'all encoders'}; pre − post)?"
        claims.append(_question(id, statement, effect, read))
    return claims


def _negated(effect: Effect, label: str) -> Effect:
    """b − a from a − b."""
    weights = None if effect.weights is None else -effect.weights
    return replace(
        effect, label=label, difference=-effect.difference, low=-effect.high, high=-effect.low, weights=weights
    )


def best_tokenizer(grid: Grid, read: Read) -> Claim:
    tokenizers = grid.levels("tokenizer")
    if len(tokenizers) < 2:
        return _claim("v", "(v) Is one tokenizer the best? (one tokenizer only)", INCONCLUSIVE, [], [])
    # Every pair enters the family before the best is named by its means, so naming it biases nothing.
    pairs = {}
    for i, t in enumerate(tokenizers):
        for u in tokenizers[i + 1 :]:
            plain = grid.difference("tokenizer", t, u)
            pairs[t, u] = (plain, read("v", plain, ORDERING_THRESHOLDS))
    for (t, u), (plain, held) in list(pairs.items()):
        label = f"{u} − {t}"
        pairs[u, t] = (_negated(plain, label), _negated(held, label))
    versus = {t: [pairs[t, u] for u in tokenizers if u != t] for t in tokenizers}
    lead = {t: np.mean([p.difference for p, _ in versus[t] if p.cells] or [-math.inf]) for t in tokenizers}
    best = max(tokenizers, key=lead.get)
    plain, held = zip(*versus[best])
    verdict, deciding = _ordering(held, above=True, words=(YES, NO))
    statement = f"(v) Is {best} (highest mean) the best tokenizer (every pair of tokenizers in the family)?"
    return _claim("v", statement, verdict, plain, held, deciding)


def more_layers_help(grid: Grid, read: Read) -> list[Claim]:
    layers = grid.levels("layers")
    reference = REFERENCES["layers"] if REFERENCES["layers"] in layers else (layers[0] if layers else None)
    counts = [n for n in layers if n != reference]
    # The answer is the one contrast over all layer counts (the fitted slope); beside it, the slope
    # under each LN placement (depth and LN interact) and the per-count comparisons.
    claims = [_question("vi", "(vi) Do more layers help at all (fitted slope of F1 over layers)?", grid.slope(), read)]
    placements = [ln for ln in ("post", "pre") if ln in grid.levels("ln")]
    for ln in placements if len(placements) > 1 else []:
        claims.append(_question(f"vi.{ln}", f"(vi) Do more layers help under {ln}-LN?", grid.slope(ln=ln), read))
    effects = [grid.difference("layers", n, reference) for n in counts]
    held = [read("vi.counts", e, HELPS_THRESHOLDS) for e in effects]
    verdicts = [_helps(e) for e in held]
    per_count = YES if YES in verdicts else NO if verdicts and set(verdicts) == {NO} else INCONCLUSIVE
    # The deciding count: the first that helps, else the one nearest to helping.
    deciding = (
        verdicts.index(YES)
        if YES in verdicts
        else max(range(len(held)), key=lambda i: -math.inf if math.isnan(held[i].low) else held[i].low, default=None)
    )
    statement = f"(vi) Each layer count against {reference}: does any help?"
    claims.append(_claim("vi.counts", statement, per_count, effects, held, deciding))
    return claims


def pretraining_helps(grid: Grid, read: Read) -> list[Claim]:
    """(vii) Does self-pretraining help (each objective − none), over the grid and per encoder? With
    several objectives in the grid, each is judged under an id of its own (vii.<objective>)."""
    levels = grid.levels("pretrain")
    objectives = [p for p in levels if p != FROM_SCRATCH] if FROM_SCRATCH in levels else []
    claims = []
    for objective in objectives:
        claims += objective_helps(grid, objective, "vii" if len(objectives) == 1 else f"vii.{objective}", read)
    return claims


def objective_helps(grid: Grid, objective: str, id: str, read: Read) -> list[Claim]:
    encoders = [
        e for e in grid.levels("encoder") if grid.difference("pretrain", objective, FROM_SCRATCH, encoder=e).cells
    ]
    claims = []
    for claim_id, scope in [(id, None), *([(f"{id}.{e}", e) for e in encoders] if len(encoders) > 1 else [])]:
        effect = grid.difference("pretrain", objective, FROM_SCRATCH, **({} if scope is None else {"encoder": scope}))
        seeds = backing(grid.cells, effect.weights)
        statement = (
            f"(vii) Does self-pretraining ({objective}) help ({scope or 'all encoders'}; {objective} − none"
            + (f"; {seeds}" if seeds else "")
            + ")?"
        )
        claims.append(_question(claim_id, statement, effect, read))
    return claims


def _judged(grid: Grid, read: Read) -> list[Claim]:
    return [
        cnn_is_lowest(grid, read),
        *trans_blstm_is_highest(grid, read),
        *trans_blstm_falls_from_5_layers(grid, read),
        *pre_ln_helps(grid, read),
        best_tokenizer(grid, read),
        *more_layers_help(grid, read),
        *pretraining_helps(grid, read),
    ]


def judge_claims(
    folds: pd.DataFrame,
    metric: str = "f1",
    grid: Optional[Grid] = None,
    family: Optional[Family] = None,
    reading: Optional[str] = None,
) -> list[Claim]:
    """Claims (i)-(iii) and questions (iv)-(vii), judged on one metric column.

    `family`: the study's multiplicity family. An open one records this metric's comparisons (the
    claims returned are then provisional); a closed one decides. Without one, this metric's
    comparisons are a family of their own. `reading`: the family's name for this reading (the metric
    by default)."""
    grid = grid or Grid(folds if metric in folds else folds.assign(**{metric: math.nan}), metric)
    reading = reading or metric
    if family is None:
        family = Family()
        _judged(grid, family.reader(reading))
        family.close()
    return _judged(grid, family.reader(reading))


def method_line(family_size: Optional[int] = None) -> str:
    size = f"{family_size}" if family_size else "their number"
    return (
        "Method: every number is a contrast of one model of the whole grid (fold F1 = cell mean + fold "
        "effect + noise, least squares, the noise's variance pooled over every cell; t intervals at its "
        "residual degrees of freedom). Configurations are compared within matched sets (the same other "
        "factors; the head goes with the encoder), averaged over the sets. "
        + FAMILY_RULE.format(size=size)
        + " Verdicts: "
        + VERDICT_RULE
        + " No variant or level is picked on the records that judge it: (ii) averages both TRANS-BLSTM "
        "variants, and (v) names the best tokenizer after every pair has entered the family. The best "
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
    family_size: Optional[int] = None,
) -> str:
    """The judged claims per metric, one line per question the records cannot judge and why, and
    (given `beside`) the verdicts of several studies side by side; `command`: the one that wrote it;
    `both_ways`: each claim a declared exclusion changes, as judged on every configuration."""
    both_ways = both_ways or {}
    lines = ["# The original study's claims, judged from the records", ""]
    if command:
        lines += [f"Written with report.md by `{command}`.", ""]
    lines += [method_line(family_size), ""]
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
