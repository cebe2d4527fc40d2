"""The Missing section: the cells missing or short of folds, a line each."""

from __future__ import annotations

from klue_tc.report.context import Report


def missing_lines(report: Report) -> list[str]:
    return ["## Missing", "", *[f"- {m}" for m in report.missing], ""] if report.missing else []
