"""What the report's further analyses (sizes, speed, per-class, class mix, baselines) find: Markdown
lines, the plots they drew, and per-configuration columns for report.csv; and the one way they name
a configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import pandas as pd

from klue_tc.report.labels import has_wide_path, shown_design
from klue_tc.report.markdown import markdown_table
from klue_tc.store.records import FoldResult

DESIGN = ["tokenizer", "encoder", "ln", "head", "layers", "pretrain"]


@dataclass
class Findings:
    """What one further analysis found, computed once per report: its lines, and what else it gives."""

    lines: list[str]
    plots: list[Path] = field(default_factory=list)
    columns: Optional[pd.DataFrame] = None  # indexed by config_hash: joined onto report.csv's rows
    verdict: Optional[str] = None  # one line for the report's Verdicts, naming this section
    absent: Optional[str] = None  # what the section would show and why the records cannot: no heading then

    @classmethod
    def left_out(cls, what: str, why: str) -> Findings:
        """A section with nothing to show: no heading of its own, one item of the report's last list."""
        return cls([], absent=f"{what}: {why}")


def configurations(records: Sequence[FoldResult]) -> pd.DataFrame:
    """One row per configuration (indexed by config_hash): its design and a label naming it, with
    the head where the records hold several and the pretraining where they hold several."""
    rows = {r.config_hash: {name: shown_design(r.describe)[name] for name in DESIGN} for r in records}
    from klue_tc.report.summary import study_order

    order = study_order()
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=DESIGN).sort_values(
        DESIGN,
        kind="stable",
        key=lambda col: (
            col
            if col.name == "layers"
            else col.map(lambda v: (v != "none", str(v)))  # from scratch first
            if col.name == "pretrain"
            else col.map(lambda v: (order.get(v, len(order)), str(v)))
        ),
    )
    frame.index.name = "config_hash"
    shown = ["tokenizer", "encoder", "ln"]
    # as the F1 tables' rows (plots.row_labels): the head where it tells configurations apart or has the wide path
    if frame.groupby("encoder")["head"].nunique().max() > 1 or frame["head"].map(has_wide_path).any():
        shown.append("head")
    label = frame[shown].astype(str).agg(" / ".join, axis=1) + " / L" + frame["layers"].astype(str)
    if frame["pretrain"].nunique() > 1:
        label += " / " + frame["pretrain"].map(lambda p: "scratch" if p == "none" else p)
    return frame.assign(label=label, row=label.str.replace(r" / L\d+", "", regex=True))


def by_design(
    frame: pd.DataFrame,
    records: Sequence[FoldResult],
    cell: Callable[[pd.DataFrame], str],
    split: Optional[str] = None,
    always: bool = False,
) -> pd.DataFrame:
    """A table with a row per configuration without its layer count (in the study's order) and a
    column per layer count: each cell `cell(rows)` of the frame's rows (keyed by config_hash)
    that fall in it, '–' where none do. With `split` (a column of the frame: the pretraining seed),
    wherever a cell would hold rows of several values of it, a row per configuration and value
    instead (indexed by both; `seed_label` names each value, 'not recorded' where it is missing);
    `always`: so split whether or not one does (as a table beside one that is split)."""
    designs = configurations(records)
    frame = frame.join(designs[["row", "layers"]], on="config_hash")
    order = [r for r in dict.fromkeys(designs["row"]) if r in set(frame["row"])]
    rows = ["row"]
    if split is not None and (always or frame.groupby(["row", "layers"])[split].nunique(dropna=False).max() > 1):
        frame = frame.assign(**{split: frame[split].map(seed_label)})
        order = [
            (row, value)
            for row in order
            for value in sorted(
                set(frame.loc[frame["row"] == row, split]), key=lambda v: (not v.isdigit(), v.zfill(12))
            )
        ]
        rows.append(split)
    cells = pd.Series({place: cell(part) for place, part in frame.groupby([*rows, "layers"], sort=False)})
    cells.index.names = [*rows, "layers"]
    table = cells.unstack("layers")
    index = pd.MultiIndex.from_tuples(order, names=rows) if len(rows) > 1 else order
    return table.reindex(index=index, columns=sorted(frame["layers"].unique())).fillna("–")


def seed_label(seed) -> str:
    """A pretraining seed as the tables show it: the number, or 'not recorded' where a record lacks it."""
    return "not recorded" if seed is None or pd.isna(seed) else str(int(seed))


def layer_table(table: pd.DataFrame) -> list[str]:
    """A by_design table as Markdown: the configuration (and, split, the value splitting its rows,
    as `split`'s name), then a column per layer count."""
    if table.index.nlevels > 1:
        split = table.index.names[1]
        table = table.reset_index(level=split)
        return markdown_table(table, ["configuration", split, *(f"{n} layers" for n in table.columns[1:])])
    return markdown_table(table, ["configuration", *(f"{n} layers" for n in table.columns)])


def ranked_by_cv(records: Sequence[FoldResult]) -> pd.Series:
    """Each configuration's CV macro-F1 (fold mean), best first: what chooses "the best", never
    the validation titles those configurations are then shown on."""
    frame = pd.DataFrame({"config_hash": [r.config_hash for r in records], "f1": [r.f1 for r in records]})
    return frame.groupby("config_hash")["f1"].mean().sort_values(ascending=False, kind="stable")


def configuration_scores(records: Sequence[FoldResult]) -> pd.DataFrame:
    """`configurations` with each one's CV macro-F1 (f1_mean) and validation macro-F1 (the mean of
    its fold models'), from the records themselves: every configuration, whatever the table shows."""
    frame = pd.DataFrame(
        {
            "config_hash": [r.config_hash for r in records],
            "f1_mean": [r.f1 for r in records],
            "validation_f1": [r.validation.f1 if r.validation else float("nan") for r in records],
        }
    )
    return configurations(records).join(frame.groupby("config_hash").mean())
