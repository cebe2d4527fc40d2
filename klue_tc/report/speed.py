"""Seconds per epoch, one table per machine: a fold's seconds compare only with those of folds
trained on the same device type with the same thread count, so no figure here averages across them."""

from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd

from klue_tc.report.sections import Findings, by_design, layer_table
from klue_tc.store.records import FoldResult


def machine(record: FoldResult) -> str:
    """The device type a fold trained on, with torch's CPU threads where it counted them."""
    return machine_name(record.device, record.threads)


def machine_name(device: Optional[str], threads: Optional[int]) -> str:
    device = device or "unknown device"
    return f"{device}, {threads} thread{'s' if threads != 1 else ''}" if threads else device


def seconds_per_epoch(records: Sequence[FoldResult]) -> pd.DataFrame:
    """One row per fold: its machine, its configuration and its wall seconds per epoch run (the
    fold's training time, which includes scoring the inner split and the held-out fold each epoch,
    over its epochs)."""
    rows = [
        {
            "machine": machine(r),
            "config_hash": r.config_hash,
            "seconds_per_epoch": r.train_seconds / r.epochs_run,
        }
        for r in records
        if r.epochs_run > 0 and r.train_seconds
    ]
    return pd.DataFrame(rows, columns=["machine", "config_hash", "seconds_per_epoch"])


def seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def cell_text(median: float, folds: int, low: float, high: float) -> str:
    """'55 (3; 38–98)': the median over the folds, their count and, for two or more, their range."""
    spread = f"; {seconds(low)}–{seconds(high)}" if folds > 1 else ""
    return f"{seconds(median)} ({folds}{spread})"


def per_machine_tables(records: Sequence[FoldResult]) -> dict[str, pd.DataFrame]:
    """Per machine: rows the configuration without its layer count, columns the layer counts, cells
    the median seconds per epoch over that machine's folds of it, '(n)' its fold count, and with two
    or more folds their range: wall seconds move with whatever else shares the machine."""
    folds = seconds_per_epoch(records)
    if folds.empty:
        return {}

    def cell(rows: pd.DataFrame) -> str:
        spent = rows["seconds_per_epoch"]
        return cell_text(spent.median(), len(spent), spent.min(), spent.max())

    tables = {name: by_design(part, records, cell) for name, part in folds.groupby("machine", sort=False)}
    order = folds["machine"].value_counts()  # the machine with most folds first
    return {name: tables[name] for name in order.index}


def speed_section(records: Sequence[FoldResult]) -> Findings:
    tables = per_machine_tables(records)
    lines = ["## Seconds per epoch, per machine", ""]
    if not tables:
        return Findings.left_out("seconds per epoch", "no fold records its training time")
    lines += [
        "Median wall seconds per epoch over a machine's folds (the fold's training time, with each "
        "epoch's scoring, over the epochs it ran); (n; low–high) its folds and their range. One table "
        "per device type and thread count: seconds are never averaged across machines, and compare "
        "only within a table. They are wall clock under whatever else ran on the machine at the time "
        "(side-by-side sweeps share its cores), which the range shows; the forward FLOPs per title "
        "(Model sizes) are the cost that no load moves.",
        "",
    ]
    untold = sum(r.sittings is None for r in records)
    if untold:
        lines += [
            f"{untold} of {len(records)} folds are from code that timed a resumed fold's last sitting only "
            "and did not record whether it resumed: where one did, its seconds per epoch read low.",
            "",
        ]
    for name, table in tables.items():
        lines += [f"### {name}", "", *layer_table(table), ""]
    return Findings(lines)
