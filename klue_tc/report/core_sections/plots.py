"""The line naming the plots the F1 tables and effects drew."""

from __future__ import annotations

from klue_tc.report.context import Report


def plots_line(report: Report) -> list[str]:
    return [f"Plots: {', '.join(report.plots)}", ""] if report.plots else []
