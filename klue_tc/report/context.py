"""What every section of report.md reads: one report context (the loaded folds, summary, grids,
effects, verdicts, baselines, recipe ...), and the Section protocol a section keeps."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Protocol, Sequence

import pandas as pd

from klue_tc.report.claims import Claim
from klue_tc.report.grid_model import Grid
from klue_tc.report.loading import Recipe
from klue_tc.report.markdown import BASELINE
from klue_tc.report.sections import Findings
from klue_tc.report.summary import SharedCells
from klue_tc.store.records import FoldResult


@dataclass
class Verdicts:
    """The claims judged per metric, and a phrase per question the records cannot judge."""

    judged: Mapping[str, list[Claim]]
    not_judged: list[str] = field(default_factory=list)
    left_out: Optional[str] = None  # the configurations the declared exclusion rules leave out, in a line
    # Per metric, claim id -> the claim judged on every configuration (None: not judged there), for
    # each verdict the declared exclusions change.
    both_ways: Mapping[str, Mapping[str, Optional[Claim]]] = field(default_factory=dict)
    family_size: int = 0  # the comparisons in the study's one multiplicity family (klue_tc.report.claims.Family)


@dataclass
class Effects:
    """The marginal effects shown, and why any factor's are left out."""

    table: pd.DataFrame
    left_out: list[str] = field(default_factory=list)


@dataclass
class Report:
    """One report's inputs, loaded and judged once; each section reads what it needs."""

    directory: Path
    summary: pd.DataFrame  # one row per configuration
    folds: pd.DataFrame  # one row per (configuration, fold)
    effects: Effects
    verdicts: Verdicts
    recipe: Optional[Recipe] = None
    missing: list[str] = field(default_factory=list)  # the cells missing or short of folds, a line each
    plots: Sequence[str] = ()  # the plots the F1 tables and effects drew, by file name
    grids: Mapping[str, Grid] = field(default_factory=dict)
    interactions: Optional[pd.DataFrame] = None
    shared: Optional[SharedCells] = None
    baselines: Sequence[dict] = ()  # the linear baselines' scores, the reference (TF-IDF + SVM) first
    records: Sequence[FoldResult] = ()  # the fold records themselves (the further analyses read them)
    command: Optional[str] = None  # the command line that writes the report again
    contents: Sequence[Section] = ()  # its parts in order (klue_tc/report/contents.py's SECTIONS)
    _lines: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _found: dict[str, Findings] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def cell_records(self) -> list[FoldResult]:
        """The records the tables read, each named by its cell: a configuration pretrained with
        several seeds is one key, its seeds' folds together (klue_tc/report/replicates.py)."""
        from klue_tc.report.replicates import by_cell

        return by_cell(self.records, self.folds)

    @property
    def reference(self) -> Optional[dict]:
        """The bar to clear: TF-IDF + SVM's scores on the same folds, where computed."""

        return next((b for b in self.baselines if b["name"] == BASELINE), None)

    def lines_of(self, section: Lines) -> list[str]:
        """A section's lines, made once per report."""
        if section.title not in self._lines:
            self._lines[section.title] = section.make(self)
        return self._lines[section.title]

    def findings_of(self, analysis: Analysis) -> Findings:
        """A further analysis' findings, made once per report; none where no record names a configuration."""
        if analysis.title not in self._found:
            self._found[analysis.title] = analysis.analyse(self) if self.records else Findings([])
        return self._found[analysis.title]

    def findings(self) -> list[Findings]:
        """Every further analysis' findings, in the report's order."""
        return [self.findings_of(s) for s in self.contents if isinstance(s, Analysis)]


class Section(Protocol):
    """A part of report.md: shown where it has something to say for this report."""

    title: str

    def shows(self, report: Report) -> bool: ...

    def lines(self, report: Report) -> list[str]: ...


@dataclass(frozen=True)
class Lines:
    """A section made by one function of the report: shown where that gives any line."""

    title: str
    make: Callable[[Report], list[str]]

    def shows(self, report: Report) -> bool:
        return bool(report.lines_of(self))

    def lines(self, report: Report) -> list[str]:
        return report.lines_of(self)


@dataclass(frozen=True)
class Analysis:
    """A further analysis of the records (sizes, speed, per class ...): its findings also give
    report.csv columns, plots, a line for the Verdicts and, where it has nothing, a line for the
    report's last list."""

    title: str
    analyse: Callable[[Report], Findings]

    def shows(self, report: Report) -> bool:
        return bool(report.findings_of(self).lines)

    def lines(self, report: Report) -> list[str]:
        return report.findings_of(self).lines
