"""Seconds per epoch, one table per machine: a fold's seconds compare only with those of folds
trained on the same device type with the same thread count, so no figure here averages across them."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from klue_tc.records import FoldResult
from klue_tc.report.sections import Section, configurations


def machine(record: FoldResult) -> str:
    """The device type a fold trained on, with torch's CPU threads where it counted them."""
    device = record.device or "unknown device"
    return f"{device}, {record.threads} thread{'s' if record.threads != 1 else ''}" if record.threads else device


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
    designs = configurations(records)
    folds = folds.join(designs, on="config_hash")
    rows = list(dict.fromkeys(designs["row"]))  # the study's order
    tables = {}
    for name, part in folds.groupby("machine", sort=False):
        cells = part.groupby(["row", "layers"], sort=False)["seconds_per_epoch"].agg(["median", "count", "min", "max"])
        text = [cell_text(*cell) for cell in cells[["median", "count", "min", "max"]].itertuples(index=False)]
        table = pd.Series(text, index=cells.index).unstack("layers")
        table = table.reindex(index=[r for r in rows if r in set(part["row"])], columns=sorted(part["layers"].unique()))
        tables[name] = table.fillna("–")
    order = folds["machine"].value_counts()  # the machine with most folds first
    return {name: tables[name] for name in order.index}


def speed_section(records: Sequence[FoldResult]) -> Section:
    from klue_tc.report.render import markdown_table

    tables = per_machine_tables(records)
    lines = ["## Seconds per epoch, per machine", ""]
    if not tables:
        return Section(lines + ["No fold records its training time.", ""])
    lines += [
        "Median wall seconds per epoch over a machine's folds (the fold's training time, with each "
        "epoch's scoring, over the epochs it ran); (n; low–high) its folds and their range. One table "
        "per device type and thread count: seconds are never averaged across machines, and compare "
        "only within a table. They are wall clock under whatever else ran on the machine at the time "
        "(side-by-side sweeps share its cores), which the range shows; the forward FLOPs per title "
        "(Model sizes) are the cost that no load moves.",
        "",
    ]
    for name, table in tables.items():
        lines += [f"### {name}", "", *markdown_table(table, ["configuration", *(f"{n} layers" for n in table.columns)])]
        lines += [""]
    return Section(lines)
