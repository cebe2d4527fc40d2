"""Does a cell trained again agree with the committed record? Each configuration of a re-run (a
fresh clone, another machine) set against the same configuration of a reference store, matched by
what it is (its Describe and pretraining seed, not its key: another code version keys it otherwise)
on the folds both hold. It agrees where the difference of their means is within max(0.01, 2 x the
reference cell's fold-to-fold standard deviation): on another CPU a fold's numbers move by rounding,
never by more than the folds differ among themselves."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from klue_tc.report.labels import configuration_label
from klue_tc.report.replicates import pretraining_seed
from klue_tc.store.records import Describe, FoldResult

FLOOR = 0.01  # the least tolerance: about one fold's noise on a few thousand titles
SPREADS = 2.0  # the tolerance in reference fold standard deviations, where that is larger
METRICS = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1 (fold models' mean)"}


@dataclass(frozen=True)
class Agreement:
    label: str
    metric: str
    folds: tuple[int, ...]  # compared: held by both
    rerun: float
    reference: float
    tolerance: float

    @property
    def difference(self) -> float:
        return self.rerun - self.reference

    @property
    def agrees(self) -> bool:
        return abs(self.difference) <= self.tolerance


def value(record: FoldResult, metric: str) -> float:
    if metric == "f1":
        return float(record.f1)
    return float(record.validation.f1) if record.validation is not None else math.nan


def cells(records: Sequence[FoldResult]) -> dict[str, dict[int, FoldResult]]:
    """The records by what their configuration is (as label_of names it), then by fold."""
    found: dict[str, dict[int, FoldResult]] = {}
    for record in records:
        found.setdefault(label_of(record.describe, pretraining_seed(record)), {})[record.fold] = record
    return found


def label_of(describe: Describe, seed: Optional[int]) -> str:
    return configuration_label(describe, exact=True) + (f" (pretraining seed {seed})" if seed is not None else "")


def recheck(rerun: Sequence[FoldResult], reference: Sequence[FoldResult]) -> tuple[list[Agreement], list[str]]:
    """Every re-run cell against the reference's, metric by metric; and a line per re-run cell the
    reference lacks."""
    committed = cells(reference)
    agreements, unmatched = [], []
    for label, folds in sorted(cells(rerun).items()):
        theirs = committed.get(label)
        shared = tuple(sorted(set(folds) & set(theirs or {})))
        if not shared:
            unmatched.append(f"{label}: no record of its folds {sorted(folds)} in the reference")
            continue
        for metric in METRICS:
            all_of_theirs = [value(r, metric) for r in theirs.values()]
            if any(math.isnan(v) for v in all_of_theirs) or any(math.isnan(value(folds[k], metric)) for k in shared):
                continue
            spread = float(np.std(all_of_theirs, ddof=1)) if len(all_of_theirs) > 1 else 0.0
            agreements.append(
                Agreement(
                    label,
                    metric,
                    shared,
                    float(np.mean([value(folds[k], metric) for k in shared])),
                    float(np.mean([value(theirs[k], metric) for k in shared])),
                    max(FLOOR, SPREADS * spread),
                )
            )
    return agreements, unmatched


def recheck_markdown(agreements: Sequence[Agreement], unmatched: Sequence[str], rerun: Path, reference: Path) -> str:
    agreed = sum(a.agrees for a in agreements)
    lines = [
        f"# Re-check: {rerun} against {reference}",
        "",
        f"Each configuration trained again, against the same configuration (and pretraining seed) of the "
        f"reference on the folds both hold: it agrees where the difference of the means is within "
        f"max({FLOOR}, {SPREADS:g} x the reference cell's fold standard deviation). "
        f"{agreed} of {len(agreements)} comparisons agree.",
        "",
        "| configuration | metric | folds | re-run | reference | difference | tolerance | agrees |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {a.label} | {METRICS[a.metric]} | {', '.join(map(str, a.folds))} | {a.rerun:.4f} | {a.reference:.4f} "
        f"| {a.difference:+.4f} | {a.tolerance:.4f} | {'yes' if a.agrees else '**no**'} |"
        for a in agreements
    ]
    if unmatched:
        lines += ["", *(f"- {line}" for line in unmatched)]
    return "\n".join(lines) + "\n"
