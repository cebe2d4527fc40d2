"""The report of a folder of runs, written into it: report.md (tables, verdicts, cost), report.csv
(one row per configuration), effects.csv (marginal effects with intervals), claims.md (the original
study's claims judged), and the plots it names."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import pandas as pd

from klue_tc.records import FROM_SCRATCH, FoldResult
from klue_tc.report.grid_model import Grid
from klue_tc.report.interactions import interactions
from klue_tc.report.loading import Recipe, fold_frame, fold_records, optuna_best, run_recipe
from klue_tc.report.render import (
    BASELINE,
    METRICS,
    Effects,
    Verdicts,
    diverged_lines,
    f1_tables,
    print_tables,
    to_markdown,
)
from klue_tc.report.sections import Section
from klue_tc.report.summary import missing_cells, per_configuration, shared_cells, summarise_configs
from klue_tc.report.title_bootstrap import TitleBootstrap, validation_predictions

if TYPE_CHECKING:
    from klue_tc.report.evidence import LearntPart

log = logging.getLogger(__name__)


def judge(
    folds: pd.DataFrame,
    metrics: list[str],
    grids: Optional[dict[str, Grid]] = None,
    part: Optional[LearntPart] = None,
) -> Verdicts:
    """The claims the records can judge, per metric, and what the others need: each claim on the
    configurations that learnt (`part`, learnt_part(folds) where not given), but pretraining's on
    every one (klue_tc/report/evidence.py)."""
    from klue_tc.report.claims import judge_claims
    from klue_tc.report.evidence import judgeable, keeps_failures, learnt_part

    grids = grids or {}
    part = part if part is not None else learnt_part(folds)
    judged, not_judged = {}, []
    for metric in metrics:
        claims = judge_claims(folds, metric, grids.get(metric))
        if part.left_out:
            claims = [c for c in judge_claims(part.folds, metric) if not keeps_failures(c.id)] + [
                c for c in claims if keeps_failures(c.id)
            ]
        judged[metric], not_judged = judgeable(folds, claims, part.folds)
    return Verdicts(judged, not_judged, part.line())


def studies_side_by_side(folds: pd.DataFrame, metrics: list[str], beside: Optional[Path]) -> list:
    """The verdicts of `beside`'s records (another study), then of this grid per pretraining
    objective: empty when there is one study with one objective only."""
    from klue_tc.report.claims import StudyVerdicts

    parts = [
        (f"{level} ({'from scratch' if level == FROM_SCRATCH else 'pretrained'}), this grid", part)
        for level, part in folds.groupby("pretrain", sort=False)
    ]
    parts.sort(key=lambda item: not item[0].startswith(FROM_SCRATCH))
    if beside is not None:
        other = fold_frame(beside)
        scratch = set(other["pretrain"]) == {FROM_SCRATCH}
        parts.insert(0, (f"{beside} ({'from scratch' if scratch else 'every record'})", other))
    if len(parts) < 2:
        return []
    studies = []
    for name, part in parts:
        found = judge(part, [m for m in metrics if m in part and part[m].notna().any()])
        studies.append(StudyVerdicts(name, found.judged, found.not_judged))
    return studies


def effects_of(
    folds: pd.DataFrame,
    metrics: list[str],
    grids: Optional[dict[str, Grid]] = None,
    titles: Optional[TitleBootstrap] = None,
    part: Optional[LearntPart] = None,
) -> Effects:
    """Each factor's marginal effects where its reference level learnt (pretraining's on every configuration,
    the others' on those that learnt: `part`, learnt_part(folds) where not given); a phrase for each left out."""
    from klue_tc.report.effects import EFFECT_COLUMNS, FACTORS, marginal_effects
    from klue_tc.report.evidence import KEEPS_FAILURES, effects_missing, learnt_part

    grids = grids or {}
    part = part if part is not None else learnt_part(folds)
    table = spliced(
        folds,
        part,
        lambda rows, every: pd.concat(
            [marginal_effects(rows, m, grid=grids.get(m) if every else None, titles=titles) for m in metrics],
            ignore_index=True,
        ),
        lambda table: table["factor"] == KEEPS_FAILURES,
    )
    compared = {f: folds if f == KEEPS_FAILURES else part.folds for f in FACTORS}
    left_out = {f: why for f in FACTORS if f in set(table["factor"]) and (why := effects_missing(compared[f], f))}
    table = table[~table["factor"].isin(list(left_out))].reset_index(drop=True)
    notes = [*left_out.values(), *([part.line()] if part.left_out else [])]
    return Effects(table if len(table) else pd.DataFrame(columns=EFFECT_COLUMNS), notes)


def interactions_of(
    folds: pd.DataFrame,
    metrics: list[str],
    grids: dict[str, Grid],
    titles: Optional[TitleBootstrap],
    part: Optional[LearntPart] = None,
) -> pd.DataFrame:
    """Every interaction family per metric: pretraining's on every configuration, the others on the
    configurations that learnt (`part`, learnt_part(folds) where not given; klue_tc/report/evidence.py)."""
    from klue_tc.report.evidence import KEEPS_FAILURES, learnt_part

    return spliced(
        folds,
        part if part is not None else learnt_part(folds),
        lambda rows, every: pd.concat(
            [interactions(rows, m, grids[m] if every else None, titles) for m in metrics], ignore_index=True
        ),
        lambda table: table["family"].str.startswith(KEEPS_FAILURES),
    )


def spliced(
    folds: pd.DataFrame,
    part: LearntPart,
    compute: Callable[[pd.DataFrame, bool], pd.DataFrame],
    pretraining_rows: Callable[[pd.DataFrame], pd.Series],
) -> pd.DataFrame:
    """`compute(folds, True)`'s pretraining rows beside `compute(learnt folds, False)`'s others,
    where some configurations did not learn (klue_tc/report/evidence.py); else `compute(folds, True)`."""
    table = compute(folds, True)
    if not part.left_out:
        return table
    learnt = compute(part.folds, False)
    return pd.concat([learnt[~pretraining_rows(learnt)], table[pretraining_rows(table)]], ignore_index=True)


def draw(summary: pd.DataFrame, effects: Effects, baselines: list[dict], directory: Path) -> list[Path]:
    """Every plot the records support, in the order report.md names them."""
    from klue_tc.report.plots import plot_effects, plot_f1_by_layers, plot_grid_heatmap

    plots = [
        plot_f1_by_layers(summary, directory / "f1_by_layers.png", baselines=baselines),
        plot_grid_heatmap(summary, directory / "grid_heatmap.png"),
    ]
    if not effects.table.empty:
        plots.append(plot_effects(effects.table, directory / "effects.png"))
    if summary["validation_f1"].notna().any():
        plots += [
            plot_f1_by_layers(
                summary,
                directory / "validation_by_layers.png",
                "validation_f1",
                "validation_f1_std",
                baselines,
                "validation macro-F1 (mean ± std of the fold models)",
            ),
            plot_grid_heatmap(summary, directory / "grid_heatmap_validation.png", "validation_f1"),
        ]
    return plots


def further_sections(
    directory: Path, recipe: Optional[Recipe], baselines: list[dict], records: list[FoldResult]
) -> list[Section]:
    """What the records hold beyond the F1 tables: the linear baselines side by side and the best
    configuration against them, sizes, the pretrained encoders, speed per machine, the best
    configurations class by class, and the class mix."""
    from klue_tc.report.against_baselines import against_baselines_section
    from klue_tc.report.baselines import baselines_section
    from klue_tc.report.class_mix import class_mix_section
    from klue_tc.report.per_class import per_class_section
    from klue_tc.report.pretrained import pretraining_section
    from klue_tc.report.sizes import size_section
    from klue_tc.report.speed import speed_section

    if not records:  # runs whose metrics.json name no configuration
        return []
    return [
        baselines_section(baselines, recipe),
        against_baselines_section(records, baselines),
        size_section(records, directory, baselines),
        pretraining_section(records),
        speed_section(records),
        per_class_section(records, directory, baselines),
        class_mix_section(records, recipe, baselines),
    ]


def with_columns(summary: pd.DataFrame, sections: list[Section]) -> pd.DataFrame:
    """report.csv's rows with the sections' per-configuration columns (parameters, reweighted F1) after them."""
    for section in sections:
        if section.columns is not None and not section.columns.empty:
            summary = summary.join(section.columns, on="config_hash")
    return summary


def report_command(directory: Path, baseline: bool, beside: Optional[Path]) -> str:
    """The command line that writes this report again from the same records."""
    flags = ("" if baseline else " --no-baseline") + (f" --beside {beside}" if beside else "")
    return f"python -m klue_tc.report {directory}{flags}"


def write_report(
    directory: str | Path,
    log_to_wandb: bool = False,
    wandb_cfg: Optional[Any] = None,
    group: Optional[str] = None,
    baseline: bool = True,
    beside: Optional[Path] = None,
) -> pd.DataFrame:
    """Write the report's files into `directory`; return the per-configuration rows.

    `wandb_cfg`: a WandbConfig, or a mapping of its keys (the sweep's logger.wandb node); unset keys
    take WandbConfig's defaults. `beside`: another study's records, whose verdicts claims.md shows
    beside this one's."""
    from klue_tc.report.claims import claims_markdown
    from klue_tc.report.evidence import learnt_part

    directory = Path(directory)
    folds = fold_frame(directory)
    best = optuna_best(directory)
    records = fold_records(directory)  # read once: the predictions of every fold are in them
    predictions = validation_predictions(directory, records)
    titles = TitleBootstrap(predictions) if predictions else None
    summary = summarise_configs(folds, best, titles)
    recipe = run_recipe(directory)
    from klue_tc.report.baselines import linear_baselines

    baselines = linear_baselines(recipe, directory) if baseline else []
    reference = next((b for b in baselines if b["name"] == BASELINE), None)
    missing, missing_count = missing_cells(summary, recipe.cv.folds if recipe is not None else None)
    metrics = [m for m in METRICS if folds[m].notna().any()]
    grids = {m: Grid(folds, m) for m in metrics}
    part = learnt_part(folds)  # one verdict per configuration, shared by every comparison below
    effects = effects_of(folds, metrics, grids, titles, part)
    verdicts = judge(folds, metrics, grids, part)
    interplay = interactions_of(folds, metrics, grids, titles, part)
    effects.table.to_csv(directory / "effects.csv", index=False)
    interplay.to_csv(directory / "interactions.csv", index=False)
    (directory / "claims.md").write_text(
        claims_markdown(
            verdicts.judged,
            verdicts.not_judged,
            studies_side_by_side(folds, metrics, beside),
            report_command(directory, baseline, beside),
            left_out=verdicts.left_out,
        ),
        encoding="utf-8",
    )
    plots = draw(summary, effects, baselines, directory)
    sections = further_sections(directory, recipe, baselines, records)
    markdown = to_markdown(
        directory,
        summary,
        folds,
        effects,
        verdicts,
        reference,
        recipe,
        missing,
        [p.name for p in plots],
        shared_cells(per_configuration(folds), best),
        grids,
        interplay,
        [section.verdict for section in sections if section.verdict],
        report_command(directory, baseline, beside),
    )
    diverged = folds.attrs.get("diverged", [])
    for row in diverged:
        log.warning("diverged, left out of the table: %s fold %d: %s", row["config_hash"], row["fold"], row["diverged"])
    markdown += "".join("\n" + "\n".join(section.lines) for section in sections if section.lines)
    plots += [plot for section in sections for plot in section.plots]
    (directory / "report.md").write_text(markdown + diverged_lines(diverged), encoding="utf-8")
    summary = with_columns(summary, sections)
    summary.to_csv(directory / "report.csv", index=False)
    print_tables(f1_tables(summary, "f1"))
    for scores in baselines:  # the reference (TF-IDF + SVM) first, as the report tables them
        validation = f", validation {scores['validation_f1']:.4f}" if pd.notna(scores["validation_f1"]) else ""
        print(f"{scores['name']} on the same folds: CV macro-F1 {scores['f1']:.4f}{validation}")
    if missing:
        log.warning("%d cells missing or short of folds (report.md: Missing)", missing_count)
    if len(set(folds["code"])) > 1:
        log.warning("the table mixes records of %d code versions (report.md names them)", len(set(folds["code"])))
    if log_to_wandb:
        from klue_tc.report.wandb_run import log_report_run, wandb_settings

        log_report_run(summary, effects.table, verdicts.judged, plots, directory, wandb_settings(wandb_cfg), group)
    return summary
