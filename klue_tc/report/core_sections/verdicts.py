"""The Verdicts section: every claim's verdict per metric, the interactions found and the further
analyses' one-liners."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from klue_tc.report.claims import Claim
from klue_tc.report.context import Report, Verdicts
from klue_tc.report.markdown import METRICS


def verdicts_section(report: Report) -> list[str]:
    """The verdicts of every claim, the interactions found and the further analyses' one-liners."""
    return [
        "## Verdicts",
        "",
        *verdict_lines(report.verdicts, len(report.summary) == 1),
        *found_interactions(report.interactions),
        *[f"- {found.verdict}" for found in report.findings() if found.verdict],
    ]


def verdict_lines(verdicts: Verdicts, single: bool = False) -> list[str]:
    """One line per metric of verdicts, one naming what the rest need; or one line saying why there are none."""
    if not any(verdicts.judged.values()) and single:
        return ["One configuration: the original study's claims compare configurations; none is judged."]
    if not any(verdicts.judged.values()):
        return [f"No verdicts: {'; '.join(verdicts.not_judged)}."]
    lines = ["Judged from the records (claims.md has the evidence):", ""]
    for metric, claims in verdicts.judged.items():
        lines += [f"- {METRICS[metric]}: " + "; ".join(f"({c.id}) {c.verdict}" for c in claims if "." not in c.id)]
    if verdicts.not_judged:
        lines += [f"- not judged: {'; '.join(verdicts.not_judged)}"]
    if verdicts.left_out:
        lines += [f"- {verdicts.left_out}"]
    lines += both_ways_lines(verdicts)
    return lines


def both_ways_lines(verdicts: Verdicts) -> list[str]:
    """One line per metric naming each verdict the declared exclusions change, both ways."""
    lines = []
    for metric, changed in verdicts.both_ways.items():
        judged = {c.id: c for c in verdicts.judged.get(metric, [])}
        moves = [
            f"({id}) {judged[id].verdict} {signed_or_blank(judged[id])}with the exclusion, "
            + (f"{plain.verdict} {signed_or_blank(plain)}without" if plain is not None else "not judged without")
            for id, plain in changed.items()
        ]
        lines.append(f"- {METRICS[metric]}, verdicts the declared exclusion changes: {'; '.join(moves)}")
    return lines


def signed_or_blank(claim: Claim) -> str:
    from klue_tc.report.grid_model import signed

    return f"({signed(claim.difference)}) " if claim.measured else ""


def found_interactions(table: Optional[pd.DataFrame]) -> list[str]:
    """One line naming, per metric, the interactions whose interval excludes zero (the Interactions
    section words each)."""
    if table is None or table.empty:
        return []
    lines = []
    for exclusion, part in table.groupby("exclusion", sort=False):
        found = part[(part["kind"] == "interaction") & ((part["low"] > 0) | (part["high"] < 0))]
        names = {m: sorted(set(rows["family"])) for m, rows in found.groupby("metric", sort=False)}
        text = "; ".join(f"{METRICS[m]}: {', '.join(f)}" for m, f in names.items()) or "none"
        where = {"declared": " with the declared exclusion", "none": ""}[exclusion]
        if table["exclusion"].nunique() > 1 and exclusion == "none":
            where = " without it"
        lines.append(f"- interactions whose interval excludes zero{where}: {text} (Interactions below)")
    return lines
