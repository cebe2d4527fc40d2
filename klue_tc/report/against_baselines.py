"""Does any configuration beat the linear baselines? The configuration best by CV macro-F1 against
each baseline, title by title on the same folds: on the validation titles, which chose nothing,
and on the scored folds, whose scores chose it (there its lead is flattered by that choice, so
only a deficit is evidence). A configuration pretrained with several seeds is one cell
(klue_tc/report/replicates.py): ranked by the mean over its seeds, compared with every seed that has
all its folds, the seeds drawn with replacement before the folds and titles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from klue_tc.report.grid_model import CONFIDENCE, family_confidence, signed
from klue_tc.report.markdown import markdown_table
from klue_tc.report.replicates import REPLICATE, pretraining_seed, replicate_means
from klue_tc.report.sections import Findings, configurations
from klue_tc.report.title_bootstrap import RESAMPLES, TitleBootstrap, nested_difference
from klue_tc.store.records import FoldResult

AHEAD, BEHIND, TIED = "ahead", "behind", "tied"
WORDING = {AHEAD: "ahead of", BEHIND: "behind", TIED: "tied with"}  # "<verdict> <baseline>"
BEST = "best"  # the best configuration's column in the bootstrap
TRAIN_MIX = "validation_f1_train_mix"  # the validation titles weighted to the training titles' class mix
COLUMNS = {
    "validation_f1": "validation macro-F1",
    TRAIN_MIX: "validation macro-F1 at the training titles' class mix",
    "f1": "CV macro-F1 (flattered: the best of these scores)",
}


@dataclass(frozen=True)
class Comparison:
    """The best configuration's macro-F1 minus a baseline's, with its interval."""

    baseline: str
    metric: str  # "validation_f1" or "f1"
    difference: float
    low: float
    high: float
    confidence: float
    folds: int
    seeds: int = 1  # the pretraining seeds read (a replicated cell's)

    @property
    def verdict(self) -> str:
        if math.isnan(self.low):
            return TIED
        return AHEAD if self.low > 0 else BEHIND if self.high < 0 else TIED

    def text(self) -> str:
        folds = "" if self.folds > 1 else "; 1 fold"
        seeds = f"; {self.seeds} seeds" if self.seeds > 1 else ""
        return f"{signed(self.difference)} ({signed(self.low)}..{signed(self.high)}{folds}{seeds})"


Seeds = dict[object, dict[int, FoldResult]]  # a cell's records: pretraining seed -> fold -> record


def _whole_seeds(best: dict[int, FoldResult] | Seeds) -> Seeds:
    """The cell's seeds that have every fold any of them has (a plain fold dict: one seed)."""
    if best and all(isinstance(v, FoldResult) for v in best.values()):
        best = {None: best}
    folds = {f for part in best.values() for f in part}
    return {seed: part for seed, part in best.items() if set(part) == folds}


def validation_comparison(
    best: dict[int, FoldResult] | Seeds,
    baseline: dict,
    confidence: float,
    class_weights: Optional[np.ndarray] = None,
) -> Optional[Comparison]:
    """On the validation titles: seeds, fold models and titles resampled, crossed, the same draws for
    both; with `class_weights` (per class), each title weighs its class's (another class mix)."""
    predictions, replicates = {}, {}
    seeds = _whole_seeds(best)
    for seed, part in seeds.items():
        column = BEST if len(seeds) == 1 else f"{BEST}:{seed}"
        replicates[column] = (BEST, seed)
        for fold, record in part.items():
            titles = record.predictions.validation
            theirs = baseline["predictions"].get(fold, {}).get("validation_predicted")
            if titles is None or theirs is None:
                continue
            predictions[(column, fold)] = (titles.index, titles.label, titles.predicted)
            predictions[(baseline["name"], fold)] = (titles.index, titles.label, np.asarray(theirs)[titles.index])
    bootstrap = (
        TitleBootstrap(predictions, replicates=replicates if len(seeds) > 1 else None, class_weights=class_weights)
        if predictions
        else None
    )
    if bootstrap is None or set(bootstrap.configs) != {BEST, baseline["name"]}:
        return None
    weights = pd.Series({BEST: 1.0, baseline["name"]: -1.0})
    low, high = bootstrap.interval(weights, confidence)
    difference = float(bootstrap.point[BEST] - bootstrap.point[baseline["name"]])
    metric = "validation_f1" if class_weights is None else TRAIN_MIX
    return Comparison(baseline["name"], metric, difference, low, high, confidence, len(bootstrap.folds), len(seeds))


def scored_comparison(best: dict[int, FoldResult] | Seeds, baseline: dict, confidence: float) -> Optional[Comparison]:
    """On the scored folds' held-out titles: seeds resampled, then folds, then the titles within each."""
    per_seed = []
    for part in _whole_seeds(best).values():
        folds = []
        for fold, record in sorted(part.items()):
            theirs = baseline["predictions"].get(fold, {})
            if "scored_predicted" not in theirs:
                continue
            row = dict(zip(theirs["scored_index"], theirs["scored_predicted"]))
            titles = record.predictions.scored
            if set(row) != set(titles.index.tolist()):  # not the same held-out titles: no paired comparison
                return None
            folds.append((titles.label, titles.predicted, np.asarray([row[i] for i in titles.index])))
        if folds:
            per_seed.append((len(folds), *nested_difference(folds)))  # the same draws for every seed
    if not per_seed:
        return None
    difference = float(np.mean([point for _, point, _ in per_seed]))
    values = per_seed[0][2]
    if len(per_seed) > 1:
        drawn = np.random.default_rng([0, 1]).integers(0, len(per_seed), size=(len(values), len(per_seed)))
        values = np.take_along_axis(np.stack([v for _, _, v in per_seed], axis=1), drawn, axis=1).mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(values, [tail, 1 - tail])
    return Comparison(
        baseline["name"], "f1", difference, float(low), float(high), confidence, per_seed[0][0], len(per_seed)
    )


@dataclass(frozen=True)
class Contender:
    """The configuration best by CV among `among` (every configuration, or those of one pretraining),
    and its comparisons with the baselines."""

    among: str
    key: str
    label: str
    comparisons: tuple[Comparison, ...]


def groups(records: Sequence[FoldResult]) -> list[tuple[str, list[FoldResult]]]:
    """Every configuration as one group; where the records hold several pretrainings, one group each,
    so that the question is asked from scratch and pretrained alike."""
    levels = sorted({r.describe.pretrain for r in records}, key=lambda p: (p != "none", p))  # scratch first
    if len(levels) < 2:
        return [("all configurations", list(records))]
    named = {"none": "from scratch"}
    return [(named.get(p, f"pretrained: {p}"), [r for r in records if r.describe.pretrain == p]) for p in levels]


def ranked_cells(records: Sequence[FoldResult]) -> pd.Series:
    """Each cell's CV macro-F1, best first: the mean over its seeds of each one's fold mean."""
    frame = pd.DataFrame(
        {
            "config_hash": [r.config_hash for r in records],
            REPLICATE: [pretraining_seed(r) for r in records],
            "f1": [r.f1 for r in records],
        }
    )
    return replicate_means(frame, "f1").sort_values(ascending=False, kind="stable")


def cell_records(records: Sequence[FoldResult], cell: str) -> Seeds:
    """A cell's records with per-title predictions, by pretraining seed and fold."""
    found: Seeds = {}
    for r in records:
        if r.predictions is not None and r.config_hash == cell:
            found.setdefault(pretraining_seed(r), {})[r.fold] = r
    return found


def compare_best(
    records: Sequence[FoldResult],
    baselines: Sequence[dict],
    class_weights: Optional[np.ndarray] = None,
) -> list[Contender]:
    """Per group, the configuration best by CV macro-F1 against every baseline that kept per-title
    predictions; the intervals Bonferroni-corrected over the groups and baselines read together.
    `records` are read by cell (klue_tc.report.replicates.by_cell: a replicated configuration's
    seeds under one key, each record still naming its seed); `class_weights` (p_train / p_val per
    class) adds the validation titles at the training titles' mix."""
    usable = [b for b in baselines if b.get("predictions")]
    parts = [(among, ranked_cells(part).index[0], part) for among, part in groups(records) if part]
    if not usable or not parts:
        return []
    labels = configurations(records)["label"]
    family = len(usable) * len(parts)
    confidence = family_confidence(family) if family > 1 else CONFIDENCE
    found = []
    for among, key, part in parts:
        best = cell_records(part, key)
        comparisons = [
            comparison
            for baseline in usable
            for comparison in (
                validation_comparison(best, baseline, confidence),
                validation_comparison(best, baseline, confidence, class_weights) if class_weights is not None else None,
                scored_comparison(best, baseline, confidence),
            )
            if comparison is not None
        ]
        if comparisons:
            found.append(Contender(among, key, labels[key], tuple(comparisons)))
    return found


def by_metric(contender: Contender, metric: str) -> list[Comparison]:
    return [v for v in contender.comparisons if v.metric == metric]


def training_mix_weights(recipe) -> Optional[np.ndarray]:
    """p_train / p_val per class (klue_tc/report/class_mix.py), or None where the runs' titles cannot be read."""
    from klue_tc.core.errors import KlueTcError
    from klue_tc.report.class_mix import class_counts, importance_weights

    if recipe is None:
        return None
    try:
        _, train, validation = class_counts(recipe)
    except (KlueTcError, OSError):
        return None
    return importance_weights(train, validation)


def verdict_line(contenders: Sequence[Contender]) -> Optional[str]:
    """The verdicts' one line: each best configuration against each baseline on the validation titles."""

    def said(comparisons: list[Comparison]) -> str:
        return ", ".join(f"{WORDING[v.verdict]} {v.baseline} {v.text()}" for v in comparisons)

    each = [
        f"{c.among}, {c.label}: "
        + said(on_validation)
        + (f"; at the training titles' class mix {said(mixed)}" if (mixed := by_metric(c, TRAIN_MIX)) else "")
        for c in contenders
        if (on_validation := by_metric(c, "validation_f1"))
    ]
    if not each:
        return None
    return (
        "the best by CV against the linear baselines on the validation titles: "
        + "; ".join(each)
        + " (Against the linear baselines below)"
    )


def against_baselines_section(
    records: Sequence[FoldResult],
    baselines: Sequence[dict],
    recipe=None,
) -> Findings:
    """`records` read by cell, as `compare_best` takes them."""

    lines = ["## Against the linear baselines", ""]
    contenders = compare_best(records, baselines, training_mix_weights(recipe))
    if not contenders:
        return Findings.left_out(
            "against the linear baselines", "the records or the baselines kept no per-title predictions"
        )
    comparisons = [v for c in contenders for v in c.comparisons]
    baselines_read = len(dict.fromkeys(v.baseline for v in comparisons))
    rows = {}
    for contender in contenders:
        for name in dict.fromkeys(v.baseline for v in contender.comparisons):
            cell = {v.metric: f"**{v.text()}**: {v.verdict}" for v in contender.comparisons if v.baseline == name}
            rows[f"{contender.label} − {name}"] = [cell.get(metric, "–") for metric in COLUMNS]
    mixed = any(v.metric == TRAIN_MIX for v in comparisons)
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS.values()))
    if not mixed:
        table = table.drop(columns=COLUMNS[TRAIN_MIX])
    family = (
        f"{len(contenders)} groups × {baselines_read} baselines"
        if len(contenders) > 1
        else f"{baselines_read} baselines"
    )
    lines += [
        "Does any configuration beat them? The configuration best by CV macro-F1"
        + (" within each pretraining" if len(contenders) > 1 else "")
        + ", minus each baseline, both from the same folds, title by title; "
        f"{comparisons[0].confidence * 100:g} % intervals (Bonferroni over the {family}) from a paired "
        f"bootstrap ({RESAMPLES} resamples, percentile): on the validation titles, the fold models and the "
        "titles resampled, crossed; on CV, the folds and each fold's held-out titles. The validation titles "
        "chose nothing and judge it; on CV it was chosen as the highest of these very scores, so a lead "
        "there is flattered and only a deficit is evidence. ahead / behind: the interval excludes zero; "
        "tied: it does not."
        + (
            " At the training titles' class mix: the same validation titles, each weighing p_train / p_val of its "
            "class (Class mix below), as if they came in the mix the models were trained and chosen on."
            if mixed
            else ""
        ),
        "",
        *markdown_table(table, ["best by CV − baseline", *table.columns]),
        "",
    ]
    return Findings(lines, verdict=verdict_line(contenders))
