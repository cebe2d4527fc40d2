"""The report of a folder of runs, written into it: report.md (tables, verdicts, cost), report.csv
(one row per configuration), effects.csv (marginal effects with intervals), claims.md (the original
study's claims judged), and the plots it names."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from klue_tc.report import contents
from klue_tc.report.code_mix import code_mix
from klue_tc.report.context import Effects, Report, Verdicts
from klue_tc.report.core_sections.metric_tables import f1_tables
from klue_tc.report.exclusions import Declared, Exclusion, apply_exclusions, declared_exclusions, none_excluded
from klue_tc.report.grid_model import Grid
from klue_tc.report.interactions import interactions
from klue_tc.report.loading import ensemble_scores, fold_frame, fold_records, optuna_best, run_recipe
from klue_tc.report.markdown import METRICS
from klue_tc.report.output import write_csv, write_text
from klue_tc.report.render import print_tables, to_markdown
from klue_tc.report.replicates import RECORD_KEY, cells_by_key, is_replicated, per_cell
from klue_tc.report.sections import Findings
from klue_tc.report.settings import refuse_mixed_settings
from klue_tc.report.summary import missing_cells, per_configuration, shared_cells, summarise_configs
from klue_tc.report.title_bootstrap import TitleBootstrap, scored_predictions, validation_predictions
from klue_tc.store.records import FROM_SCRATCH, FoldResult

log = logging.getLogger(__name__)


def judge(
    folds: pd.DataFrame,
    metrics: list[str],
    grids: Optional[dict[str, Grid]] = None,
    exclusion: Optional[Exclusion] = None,
) -> Verdicts:
    """The claims the records can judge, per metric, and what the others need: each claim on the
    folds the declared exclusions keep (`exclusion`; none left out where not given), but a claim whose
    factor they keep on every one (klue_tc/report/exclusions.py); where they leave any configuration
    out, each verdict they change is kept as judged without them too."""
    exclusion = exclusion if exclusion is not None else none_excluded(folds)
    judged, not_judged, size = _judged(folds, metrics, grids or {}, exclusion)
    both_ways = {}
    if exclusion.left_out:
        plain, _, _ = _judged(folds, metrics, grids or {}, none_excluded(folds))
        both_ways = changed_verdicts(judged, plain)
    return Verdicts(judged, not_judged, exclusion.line(), both_ways, size)


def _judged(
    folds: pd.DataFrame, metrics: list[str], grids: dict[str, Grid], exclusion: Exclusion
) -> tuple[dict[str, list], list[str], int]:
    """The claims of every metric, one multiplicity family over all of them: a first pass records
    every comparison, the second reads each at its Holm level (klue_tc.report.claims.Family)."""
    from klue_tc.report.claims import Family

    family = Family()
    _judged_in(folds, metrics, grids, exclusion, family)
    family.close()
    judged, not_judged = _judged_in(folds, metrics, grids, exclusion, family)
    return judged, not_judged, family.size


def _judged_in(
    folds: pd.DataFrame, metrics: list[str], grids: dict[str, Grid], exclusion: Exclusion, family
) -> tuple[dict[str, list], list[str]]:
    from klue_tc.report.claims import judge_claims
    from klue_tc.report.evidence import compares_every_configuration, judgeable

    judged, not_judged = {}, []
    for metric in metrics:
        claims = judge_claims(folds, metric, grids.get(metric), family)
        if exclusion.left_out:
            # An exclusion's comparisons join the same family: both readings count, the conservative side.
            excluded = f"{metric}, declared exclusion"
            kept = {c.id: c for c in judge_claims(exclusion.folds, metric, family=family, reading=excluded)}
            claims = [c if compares_every_configuration(c.id, exclusion) else kept.get(c.id) for c in claims]
            claims = [c for c in claims if c is not None]
        judged[metric], not_judged = judgeable(folds, claims, exclusion)
        shown = [c.id for c in judged[metric]]  # what the records cannot judge is not in the family
        family.retain(metric, shown)
        if exclusion.left_out:
            family.retain(excluded, shown)
    return judged, not_judged


def changed_verdicts(judged: dict[str, list], plain: dict[str, list]) -> dict[str, dict]:
    """Per metric, claim id -> the claim as judged on every configuration (None: not judged there),
    for each claim whose verdict that changes."""
    changed = {}
    for metric, claims in judged.items():
        others = {c.id: c for c in plain.get(metric, [])}
        moved = {c.id: others.get(c.id) for c in claims if c.id not in others or others[c.id].verdict != c.verdict}
        if moved:
            changed[metric] = moved
    return changed


def studies_side_by_side(
    folds: pd.DataFrame, metrics: list[str], beside: Optional[Path], declared: Optional[Declared] = None
) -> list:
    """The verdicts of `beside`'s records (another study, under the exclusion rules its runs declared),
    then of this grid per pretraining objective (under `declared`): empty when there is one study with
    one objective only."""
    from klue_tc.report.claims import StudyVerdicts

    parts = (
        [
            (f"{level} ({'from scratch' if level == FROM_SCRATCH else 'pretrained'}), this grid", part, declared)
            for level, part in folds.groupby("pretrain", sort=False)
        ]
        if "pretrain" in folds
        else []
    )
    parts.sort(key=lambda item: not item[0].startswith(FROM_SCRATCH))
    if beside is not None:
        other = fold_frame(beside)
        scratch = "pretrain" not in other or set(other["pretrain"]) == {FROM_SCRATCH}
        parts.insert(
            0, (f"{beside} ({'from scratch' if scratch else 'every record'})", other, declared_exclusions(beside))
        )
    if len(parts) < 2:
        return []
    studies = []
    for name, part, rules in parts:
        exclusion = apply_exclusions(part, rules) if rules is not None else None
        found = judge(part, [m for m in metrics if m in part and part[m].notna().any()], exclusion=exclusion)
        studies.append(StudyVerdicts(name, found.judged, found.not_judged, found.both_ways))
    return studies


def effects_of(
    folds: pd.DataFrame,
    metrics: list[str],
    grids: Optional[dict[str, Grid]] = None,
    titles: Optional[dict[str, TitleBootstrap]] = None,
    exclusion: Optional[Exclusion] = None,
) -> Effects:
    """Each factor's marginal effects where its reference level learnt, on the folds the declared
    exclusions keep (`exclusion`; none left out where not given) but for a factor they keep on every
    one; a phrase for each left out."""
    from klue_tc.report.effects import EFFECT_COLUMNS, FACTORS, marginal_effects
    from klue_tc.report.evidence import effects_missing

    grids = grids or {}
    exclusion = exclusion if exclusion is not None else none_excluded(folds)
    table = spliced(
        folds,
        exclusion,
        lambda rows, every: pd.concat(
            [marginal_effects(rows, m, grid=grids.get(m) if every else None, titles=titles) for m in metrics],
            ignore_index=True,
        ),
        lambda table: table["factor"].map(exclusion.keeps).astype(bool),
    )
    compared = {f: folds if exclusion.keeps(f) else exclusion.folds for f in FACTORS}
    left_out = {f: why for f in FACTORS if f in set(table["factor"]) and (why := effects_missing(compared[f], f))}
    table = table[~table["factor"].isin(list(left_out))].reset_index(drop=True)
    notes = [*left_out.values(), *([exclusion.line()] if exclusion.line() else [])]
    return Effects(table if len(table) else pd.DataFrame(columns=EFFECT_COLUMNS), notes)


def interactions_of(
    folds: pd.DataFrame,
    metrics: list[str],
    grids: dict[str, Grid],
    titles: Optional[dict[str, TitleBootstrap]],
    exclusion: Optional[Exclusion] = None,
) -> pd.DataFrame:
    """Every interaction family per metric, on the folds the declared exclusions keep (`exclusion`)
    but for a family whose factors they keep; where they leave any configuration out, the rows on
    every configuration follow (exclusion "none"), so that each verdict can be read both ways."""
    from klue_tc.report.interactions import FAMILY_FACTORS

    exclusion = exclusion if exclusion is not None else none_excluded(folds)

    def compute(rows: pd.DataFrame, every: bool) -> pd.DataFrame:
        return pd.concat(
            [interactions(rows, m, grids.get(m) if every else None, titles) for m in metrics], ignore_index=True
        )

    def keeps(table: pd.DataFrame) -> pd.Series:
        return table["family"].map(lambda f: any(exclusion.keeps(x) for x in FAMILY_FACTORS[f])).astype(bool)

    table = spliced(folds, exclusion, compute, keeps)
    if not exclusion.left_out:
        return table
    return pd.concat([table.assign(exclusion="declared"), compute(folds, True)], ignore_index=True)


def spliced(
    folds: pd.DataFrame,
    exclusion: Exclusion,
    compute: Callable[[pd.DataFrame, bool], pd.DataFrame],
    keeps_every: Callable[[pd.DataFrame], pd.Series],
) -> pd.DataFrame:
    """`compute(folds, True)`'s rows that `keeps_every` marks beside `compute(kept folds, False)`'s
    others, where the declared exclusions leave configurations out; else `compute(folds, True)`."""
    table = compute(folds, True)
    if not exclusion.left_out:
        return table
    kept = compute(exclusion.folds, False)
    return pd.concat([kept[~keeps_every(kept)], table[keeps_every(table)]], ignore_index=True)


def cv_bootstrap(folds: pd.DataFrame, records: list[FoldResult]) -> Optional[TitleBootstrap]:
    """Where some cell has several pretraining seeds, CV F1's contrasts re-read by the hierarchical
    bootstrap over seeds, folds and each fold's held-out titles; else none (the grid model's alone)."""
    if not is_replicated(folds):
        return None
    read = set(folds[RECORD_KEY])
    predictions = {k: v for k, v in scored_predictions(records).items() if k[0] in read}
    return TitleBootstrap(predictions, replicates=cells_by_key(folds)) if predictions else None


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


def with_columns(summary: pd.DataFrame, sections: list[Findings]) -> pd.DataFrame:
    """report.csv's rows with the sections' per-configuration columns (parameters, reweighted F1) after them."""
    for section in sections:
        if section.columns is not None and not section.columns.empty:
            summary = summary.join(section.columns, on="config_hash")
    return summary


def write_or_remove(path: Path, content: Optional[str | pd.DataFrame]) -> None:
    """Write the file whole (a table as CSV), or where it would say nothing (no claim judged, no
    effect or interaction), write none and remove one an earlier report left."""
    if content is None:
        path.unlink(missing_ok=True)
    elif isinstance(content, pd.DataFrame):
        write_csv(content, path)
    else:
        write_text(content, path)


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

    directory = Path(directory)
    folds = fold_frame(directory)
    refuse_mixed_settings(directory, folds[RECORD_KEY])  # every key, each seed's of a replicated cell too
    best = optuna_best(directory)
    records = fold_records(directory)  # read once: the predictions of every fold are in them
    read = set(folds[RECORD_KEY])  # a conflict's other key is left out of every comparison
    predictions = {k: v for k, v in validation_predictions(directory, records).items() if k[0] in read}
    titles = TitleBootstrap(predictions, replicates=cells_by_key(folds)) if predictions else None
    summary = summarise_configs(folds, best, titles, per_cell(ensemble_scores(directory), folds))
    recipe = run_recipe(directory)
    from klue_tc.report.baselines import linear_baselines

    baselines = linear_baselines(recipe, directory) if baseline else []
    missing, missing_count = missing_cells(summary, recipe.cv.folds if recipe is not None else None)
    metrics = [m for m in METRICS if folds[m].notna().any()]
    grids = {m: Grid(folds, m) for m in metrics}
    declared = declared_exclusions(directory)  # the rules the runs' configs declare: none by default
    exclusion = apply_exclusions(folds, declared)  # shared by every comparison below
    bootstraps = {"validation_f1": titles, "f1": cv_bootstrap(folds, records)}
    effects = effects_of(folds, metrics, grids, bootstraps, exclusion)
    verdicts = judge(folds, metrics, grids, exclusion)
    interplay = interactions_of(folds, metrics, grids, bootstraps, exclusion)
    write_or_remove(directory / "effects.csv", None if effects.table.empty else effects.table)
    write_or_remove(directory / "interactions.csv", None if interplay.empty else interplay)
    write_or_remove(
        directory / "claims.md",
        claims_markdown(
            verdicts.judged,
            verdicts.not_judged,
            studies_side_by_side(folds, metrics, beside, declared),
            report_command(directory, baseline, beside),
            left_out=verdicts.left_out,
            both_ways=verdicts.both_ways,
            family_size=verdicts.family_size,
        )
        if any(verdicts.judged.values())
        else None,
    )
    plots = draw(summary, effects, baselines, directory)
    report = Report(
        directory,
        summary,
        folds,
        effects,
        verdicts,
        recipe,
        missing,
        [p.name for p in plots],
        grids,
        interplay,
        shared_cells(per_configuration(folds), best),
        baselines,
        records,
        report_command(directory, baseline, beside),
        contents.SECTIONS,
    )
    for row in folds.attrs.get("diverged", []):
        log.warning("diverged, left out of the table: %s fold %d: %s", row["config_hash"], row["fold"], row["diverged"])
    write_text(to_markdown(report), directory / "report.md")
    sections = report.findings()
    plots += [plot for section in sections for plot in section.plots]
    summary = with_columns(summary, sections)
    write_csv(summary, directory / "report.csv")
    print_tables(f1_tables(summary, "f1"))
    for scores in baselines:  # the reference (TF-IDF + SVM) first, as the report tables them
        validation = f", validation {scores['validation_f1']:.4f}" if pd.notna(scores["validation_f1"]) else ""
        print(f"{scores['name']} on the same folds: CV macro-F1 {scores['f1']:.4f}{validation}")
    if missing:
        log.warning("%d cells missing or short of folds (report.md: Missing)", missing_count)
    if (mix := code_mix(folds)).mixed:
        log.warning("the table mixes records of different code: %s", mix.what())
    if log_to_wandb:
        from klue_tc.report.wandb_run import log_report_run, wandb_settings

        log_report_run(summary, effects.table, verdicts.judged, plots, directory, wandb_settings(wandb_cfg), group)
    return summary
