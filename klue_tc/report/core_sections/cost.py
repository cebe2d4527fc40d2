"""The Cost and convergence section: what still improved at its last epoch, what training cost, and where."""

from __future__ import annotations

import pandas as pd

from klue_tc.report.context import Report


def cost_lines(report: Report) -> list[str]:
    """How many configurations still improved at their last epoch, and what training cost."""
    summary, folds = report.summary, report.folds
    improving = summary[summary["still_improving"] > 0]
    return [
        "## Cost and convergence",
        "",
        f"{len(improving)} of {len(summary)} configurations were still improving at their last epoch in at "
        f"least one fold ({int(folds['still_improving'].sum())} of {len(folds)} folds). Training time in all: "
        f"{job_time(folds['seconds'].sum())} of job time (each fold from data preparation to its last "
        f"checkpoint; jobs run side by side share the wall clock).",
        "",
        *device_lines(folds),
        "Seconds per epoch are tabled per machine below (Seconds per epoch, per machine); titles per "
        "second (training steps) are in report.csv.",
        "",
    ]


def job_time(seconds: float) -> str:
    """Seconds in the unit that reads: hours from two hours, else minutes, else seconds."""
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds"


def device_lines(folds: pd.DataFrame) -> list[str]:
    """Where the records were trained; seconds compare only within one machine."""
    devices = folds["device"].value_counts().sort_index().sort_values(ascending=False, kind="stable")
    if len(devices) < 2:
        return [f"Trained on {devices.index[0]}.", ""] if len(devices) else []
    counts = ", ".join(f"{name}: {n} folds" for name, n in devices.items())
    return [
        f"Trained on {len(devices)} machines ({counts}; report.csv names each configuration's): seconds "
        "compare only between folds of one machine.",
        "",
    ]
