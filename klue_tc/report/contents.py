"""report.md's sections in order: each one module's function or class, fed the one report context
(klue_tc/report/context.py). A new section is its module and one line here."""

from __future__ import annotations

from klue_tc.report.against_baselines import against_baselines_section
from klue_tc.report.baselines import baselines_section
from klue_tc.report.class_mix import class_mix_section
from klue_tc.report.context import Analysis, Lines, Section
from klue_tc.report.core_sections.cost import cost_lines
from klue_tc.report.core_sections.diverged import diverged_lines
from klue_tc.report.core_sections.effects import effects_section
from klue_tc.report.core_sections.head import head_lines
from klue_tc.report.core_sections.interactions import interactions_section
from klue_tc.report.core_sections.metric_tables import metric_section
from klue_tc.report.core_sections.missing import missing_lines
from klue_tc.report.core_sections.not_in_report import not_in_this_report
from klue_tc.report.core_sections.plots import plots_line
from klue_tc.report.core_sections.verdicts import verdicts_section
from klue_tc.report.ensemble_summary import ensemble_section
from klue_tc.report.markdown import METRICS
from klue_tc.report.per_class import per_class_section
from klue_tc.report.pretrained import pretraining_section
from klue_tc.report.replicates import cells_by_key, spread_lines
from klue_tc.report.sizes import size_section
from klue_tc.report.speed import speed_section

SECTIONS: list[Section] = [
    Lines("F1 comparison", head_lines),
    Lines("Verdicts", verdicts_section),
    *[Lines(title, lambda report, metric=metric: metric_section(report, metric)) for metric, title in METRICS.items()],
    Lines("Marginal effects", effects_section),
    Lines("Interactions", interactions_section),
    Lines("Cost and convergence", cost_lines),
    Lines("Missing", missing_lines),
    Lines("Plots", plots_line),
    Lines(
        "Pretraining seeds",
        lambda report: spread_lines(report.folds, report.folds.attrs.get("replicate_conflicts", [])),
    ),
    Analysis("Linear baselines", lambda report: baselines_section(report.baselines, report.recipe)),
    Analysis(
        "Against the linear baselines",
        lambda report: against_baselines_section(report.cell_records, report.baselines, report.recipe),
    ),
    Analysis("The ensemble", lambda report: ensemble_section(report.directory)),
    Analysis("Model sizes", lambda report: size_section(report.cell_records, report.directory, report.baselines)),
    Analysis(
        "The pretrained encoders",
        lambda report: pretraining_section(
            report.records, {key: cell for key, (cell, _) in cells_by_key(report.folds).items()}
        ),
    ),
    Analysis("Seconds per epoch", lambda report: speed_section(report.records)),
    Analysis("Per class", lambda report: per_class_section(report.cell_records, report.directory, report.baselines)),
    Analysis("Class mix", lambda report: class_mix_section(report.cell_records, report.recipe, report.baselines)),
    Lines("Not in this report", not_in_this_report),
    Lines("Diverged folds", diverged_lines),
]
