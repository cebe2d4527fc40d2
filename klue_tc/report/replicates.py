"""Replicates: one configuration pretrained more than once (pretrain.seed), read as one cell.

A second pretraining of a configuration has a results key of its own (pretrain.seed is keyed once
set, and the stall rule while on) but the same Describe, titles and folds. The report groups such
keys by their Describe, with the pretraining seed as the replicate: one row of the tables, its mean
the mean over its replicates of each one's fold mean, and the intervals that compare it resample
its replicates before its folds and titles (klue_tc/report/title_bootstrap.py). Two keys of one
Describe pretrained with the same seed are no replicates but a conflict: the report reads one and
names both in a line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Optional, Sequence

import pandas as pd

from klue_tc.report.labels import configuration_label
from klue_tc.store.records import FROM_SCRATCH, Describe, FoldResult

REPLICATE = "replicate"  # the fold frame's column: the pretraining seed (NaN: from scratch)
RECORD_KEY = "record_key"  # the fold frame's column: the record's own key (config_hash names its cell)
DESCRIBE_FIELDS = [f.name for f in fields(Describe)]
METHOD = (
    "Pretraining seeds: a configuration pretrained with several seeds (pretrain.seed) is one cell, its mean "
    "the mean over its seeds of each one's fold mean; the intervals that resample titles (marked 'titles') "
    "draw its seeds with replacement first, then the folds, then the titles (a hierarchical bootstrap), so "
    "they include pretraining's run-to-run variance. The grid model's t intervals include it too: each seed "
    "is a unit of the fit, and the seed-to-seed variance pooled over the replicated cells (beyond their fold "
    "noise) is added for every pretrained cell a contrast reads, over its number of seeds, with "
    "Satterthwaite's degrees of freedom."
)


def pretraining_seed(record: FoldResult) -> Optional[int]:
    """The seed that pretrained the record's encoder (klue_tc.report.loading.upgraded_record names
    the run's for older records); None from scratch."""
    if not record.pretrained or "seed" not in record.pretrained:
        return None
    return int(record.pretrained["seed"])


def grouped(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The fold rows (one per key and fold) with each replicated configuration's keys read as one
    cell (config_hash: the key of its lowest seed; record_key: each row's own), and a line per
    conflict (two keys of one Describe and one pretraining seed: the one with most folds is read)."""
    frame = frame.assign(**{RECORD_KEY: frame["config_hash"]})
    if REPLICATE not in frame:
        return frame, []
    pretrained = frame[frame[REPLICATE].notna() & (frame["pretrain"] != FROM_SCRATCH)]
    describe = [c for c in DESCRIBE_FIELDS if c in frame]
    conflicts, left_out, cell_of = [], set(), {}
    for values, part in pretrained.groupby(describe, sort=True):
        folds = part.groupby(["config_hash", REPLICATE]).size().reset_index(name="folds")
        kept = []
        for seed, keys in folds.groupby(REPLICATE, sort=True):
            ranked = keys.sort_values(["folds", "config_hash"], ascending=[False, True], kind="stable")
            read, others = ranked["config_hash"].iloc[0], list(ranked["config_hash"].iloc[1:])
            kept.append(read)
            if others:
                left_out.update(others)
                name = configuration_label(dict(zip(describe, values)))
                conflicts.append(
                    f"{name}, pretraining seed {int(seed)}: keys {read} and "
                    f"{', '.join(others)} are one configuration pretrained alike; the report reads {read} "
                    "(most folds, then first by key) and leaves the other out"
                )
        if len(kept) > 1:  # replicates: every kept key is read as the lowest seed's cell
            cell_of.update({key: kept[0] for key in kept})
    frame = frame[~frame["config_hash"].isin(left_out)]
    frame = frame.assign(config_hash=frame["config_hash"].map(lambda k: cell_of.get(k, k)))
    return frame, conflicts


def is_replicated(frame: pd.DataFrame) -> bool:
    """Whether some cell of the fold rows has more than one pretraining seed."""
    return REPLICATE in frame and bool((seeds(frame) > 1).any())


def seeds(frame: pd.DataFrame) -> pd.Series:
    """Each cell's number of pretraining seeds (0 from scratch), by config_hash."""
    if REPLICATE not in frame:
        return pd.Series(0, index=pd.Index(frame["config_hash"].unique()))
    return frame.groupby("config_hash", sort=False)[REPLICATE].nunique()


def replicate_means(frame: pd.DataFrame, metric: str) -> pd.Series:
    """Each cell's mean over its replicates of each one's fold mean (the plain fold mean without any)."""
    by = ["config_hash", REPLICATE] if REPLICATE in frame else ["config_hash"]
    per_replicate = frame.groupby(by, sort=False, dropna=False)[metric].mean()
    return per_replicate.groupby(level="config_hash", sort=False).mean()


def cells_by_key(frame: pd.DataFrame) -> dict[str, tuple[str, object]]:
    """Each record key of a replicated cell -> (its cell's config_hash, its pretraining seed)."""
    if RECORD_KEY not in frame or REPLICATE not in frame:
        return {}
    rows = frame[frame[RECORD_KEY] != frame["config_hash"]]
    cells = set(rows["config_hash"])
    rows = frame[frame["config_hash"].isin(cells)].drop_duplicates(RECORD_KEY)
    return {r[RECORD_KEY]: (r["config_hash"], r[REPLICATE]) for r in rows.to_dict("records")}


def by_cell(records: Sequence[FoldResult], frame: pd.DataFrame) -> list[FoldResult]:
    """The records the fold frame reads (a key that lost a conflict is not), each named by its cell's
    key: a replicated cell's seeds become one configuration of their folds together."""
    if RECORD_KEY not in frame:
        return list(records)
    read = set(frame[RECORD_KEY])
    cells = cells_by_key(frame)
    return [
        dataclasses.replace(r, config_hash=cells[r.config_hash][0]) if r.config_hash in cells else r
        for r in records
        if r.config_hash in read
    ]


def per_cell(values: dict[str, float], frame: pd.DataFrame) -> dict[str, float]:
    """Per-key values (each configuration's fold ensemble, say) as each cell's mean over its seeds."""
    cells = cells_by_key(frame)
    if not cells:
        return values
    by_cell: dict[str, list[float]] = {}
    for key, value in values.items():
        by_cell.setdefault(cells.get(key, (key,))[0], []).append(value)
    return {cell: sum(found) / len(found) for cell, found in by_cell.items()}


def backing(cells: pd.DataFrame, weights: Optional[pd.Series]) -> str:
    """The pretraining seeds behind a contrast's cells, by layer count ('2 seeds at 4 layers; 1 at
    2, 6 layers'); empty where every cell it reads has one seed or none."""
    if weights is None or "seeds" not in cells:
        return ""
    used = cells.loc[cells.index.intersection(weights[weights != 0].index)]
    used = used[used["seeds"] > 0]
    if used.empty or used["seeds"].max() <= 1:
        return ""
    groups = used.groupby("seeds")["layers"].apply(lambda layers: ", ".join(map(str, sorted(set(layers)))))
    return "; ".join(
        f"{count} seed{'s' if count > 1 else ''} at {layers} layers"
        for count, layers in sorted(groups.items(), reverse=True)
    )


def spread_lines(frame: pd.DataFrame, conflicts: list[str]) -> list[str]:
    """report.md's section on the pretraining seeds: the method, each replicated cell's CV mean per
    seed and their spread (max − min), and any conflict; empty where no cell is replicated."""
    if not is_replicated(frame) and not conflicts:
        return []
    lines = ["## Pretraining seeds", ""]
    if is_replicated(frame):
        count = seeds(frame)
        replicated = frame[frame["config_hash"].isin(count[count > 1].index)]
        per_seed = replicated.groupby(["config_hash", REPLICATE], sort=True)["f1"].mean()
        lines += [
            METHOD,
            "",
            "CV macro-F1 of each replicated cell per pretraining seed (its fold mean), and the spread:",
            "",
        ]
        lines += ["| cell | seeds | CV macro-F1 per seed | spread (max − min) |", "|---|---|---|---|"]
        first = replicated.drop_duplicates("config_hash").set_index("config_hash")
        for key, means in per_seed.groupby(level="config_hash", sort=False):
            values = means.droplevel("config_hash")
            per = ", ".join(f"{int(s)}: {v:.4f}" for s, v in values.items())
            name = configuration_label(first.loc[key].to_dict())
            lines.append(f"| {name} | {len(values)} | {per} | {values.max() - values.min():.4f} |")
        lines.append("")
    if conflicts:
        lines += ["Conflicts (one configuration, one pretraining seed, two keys):", ""]
        lines += [f"- {line}" for line in conflicts] + [""]
    return lines
