"""The Diverged folds section: the folds whose loss stopped being finite."""

from __future__ import annotations

from klue_tc.report.context import Report


def diverged_lines(report: Report) -> list[str]:
    """The folds whose loss stopped being finite: listed apart, left out of every mean above."""
    diverged = report.folds.attrs.get("diverged", [])
    if not diverged:
        return []
    return [
        "## Diverged folds",
        "",
        "Left out of every mean above:",
        "",
        *[
            f"- {row['encoder']}, {row['ln']}-LN, {row['layers']} layers, head {row['head']}, {row['tokenizer']} "
            f"({row['config_hash']}), fold {row['fold']}: {row['diverged']}"
            for row in diverged
        ],
        "",
    ]
