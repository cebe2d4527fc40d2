"""The report's last list: what the further analyses would show and why the records cannot."""

from __future__ import annotations

from klue_tc.report.context import Report


def not_in_this_report(report: Report) -> list[str]:
    """One list of what the further analyses would show and why the records cannot, where a heading
    each would say only that there is nothing under it."""
    absent = [found.absent for found in report.findings() if found.absent]
    return ["## Not in this report", "", *(f"- {why}." for why in absent), ""] if absent else []
