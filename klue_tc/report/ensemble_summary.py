"""The ensemble in the F1 report: where `python -m klue_tc.ensemble DIR` has written ensemble.csv
beside the report, its score, its gains over its best member and the linear baselines (at both
class mixes) and the chosen members' weights, read from that file; report.csv gets each
configuration's weight. The ensemble stage owns the numbers; this section only places them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from klue_tc.report.grid_model import signed
from klue_tc.report.sections import Findings

ENSEMBLE_CSV = "ensemble.csv"


def ensemble_section(directory: Path) -> Findings:
    path = Path(directory) / ENSEMBLE_CSV
    if not path.is_file():
        return Findings.left_out("the ensemble", f"no {ENSEMBLE_CSV} here (python -m klue_tc.ensemble {directory})")
    table = pd.read_csv(path)
    ensemble = table[table["role"] == "ensemble"]
    if ensemble.empty or pd.isna(ensemble["validation_f1"].iloc[0]):
        return Findings.left_out("the ensemble", f"{path} scores no validation titles")
    row = ensemble.iloc[0]
    chosen = table[(table["role"] == "candidate") & (table["weight"] > 0)].sort_values("weight", ascending=False)
    comparisons = table[table["role"] == "comparison"]
    lines = [
        "## The ensemble",
        "",
        f"From {ENSEMBLE_CSV} (`python -m klue_tc.ensemble {directory}` writes it, with ensemble.md and "
        f"ensemble.png; members and weights chosen on out-of-fold predictions only): validation macro-F1 "
        f"**{row['validation_f1']:.4f}** ({row['validation_f1_low']:.4f}..{row['validation_f1_high']:.4f}), "
        f"{len(chosen)} members chosen: "
        + ", ".join(f"{name} {weight:.2f}" for name, weight in zip(chosen["name"], chosen["weight"]))
        + ".",
        "",
        "| ensemble minus | validation titles as they come | at the training titles' class mix |",
        "|---|---|---|",
    ]
    mix = comparisons["class_mix"] if "class_mix" in comparisons else pd.Series("validation", comparisons.index)
    for versus in dict.fromkeys(comparisons["versus"]):
        cells = []
        for which in ("validation", "training"):
            found = comparisons[(comparisons["versus"] == versus) & (mix == which)]
            cells.append(
                "–"
                if found.empty
                else f"{signed(found['difference'].iloc[0])} "
                f"({signed(found['difference_low'].iloc[0])}..{signed(found['difference_high'].iloc[0])})"
            )
        lines.append(f"| {versus} | {cells[0]} | {cells[1]} |")
    weights = table[(table["role"] == "candidate") & (table["kind"] == "neural")].set_index("key")["weight"]
    columns = weights.rename("ensemble_weight").to_frame()
    columns.index.name = "config_hash"
    verdict = (
        "the ensemble of the sweep's fold models and the baselines: "
        f"{row['validation_f1']:.4f} on the validation titles"
    )
    best = comparisons[mix == "validation"]
    if not best.empty and not math.isnan(best["difference"].iloc[0]):
        verdict += f", {signed(best['difference'].iloc[0])} over {best['versus'].iloc[0]} (The ensemble below)"
    return Findings(lines + [""], columns=columns, verdict=verdict)
