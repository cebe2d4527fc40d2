"""The report as text: Markdown (report.md, claims.md's companion tables) and the terminal's rich tables."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional

import pandas as pd

from klue_tc.report.claims import Claim
from klue_tc.report.context import Effects, Report, Verdicts
from klue_tc.report.grid_model import Grid
from klue_tc.report.loading import Recipe

METRICS = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}
BASELINE = "TF-IDF char_wb 1-3-grams + linear SVM"


def recipe_line(recipe: Recipe, folds: pd.DataFrame) -> str:
    """The scale the records were made at (from their config.yaml), in one line."""
    data, cv, trainer = recipe.data, recipe.cv, recipe.trainer
    titles = f"{data.limit:,} stratified titles" if data.limit else "every title"
    return (
        f"Recipe: {titles} of {Path(str(data.path or 'the KLUE YNAT train split')).name}, "
        f"{cv.folds} folds (seed {cv.seed}), up to {trainer.max_epochs} epochs with early stopping "
        f"after {trainer.early_stopping_patience} without gain, precision "
        f"{', '.join(sorted(set(folds['precision'].astype(str))))}; validation titles: "
        f"{Path(str(data.validation_path)).name if data.validation_path else 'none'}."
    )


COLUMNS = {  # per metric: the summary's mean, interval and tie columns
    "f1": ("f1_mean", "f1_low", "f1_high", "within_noise_of_best"),
    "validation_f1": ("validation_f1", "validation_f1_low", "validation_f1_high", "validation_within_noise_of_best"),
}


def f1_tables(summary: pd.DataFrame, metric: str = "f1") -> dict[str, pd.DataFrame]:
    """Per tokenizer: rows encoder / LN (/ pretrain), columns the layer counts, cells 'mean ±half'
    of the grid model's 95 % interval, (n=k) only where a cell has fewer folds than the most; the
    best in bold, * tied with it by the grid model."""
    from klue_tc.report.plots import row_labels

    mean, low, high, tied = COLUMNS[metric]
    most = summary["folds"].max()
    shared = uniform_half(summary, metric)

    def cell(row) -> str:
        if pd.isna(row[mean]):
            return "–"
        # The interval's centre is the model's mean: the fold mean, or for a cell short of folds the
        # mean adjusted for how hard its folds were (the fold effects the other cells show).
        centre, half = (
            ((row[high] + row[low]) / 2, (row[high] - row[low]) / 2) if pd.notna(row[high]) else (row[mean], None)
        )
        text = f"{centre:.3f}" + (f" ±{half:.3f}" if half is not None and shared is None else "")
        text += f" (n={row['folds']})" if row["folds"] < most else ""
        text += f" ({row['seeds']} seeds)" if row.get("seeds", 0) > 1 else ""
        if row[tied] == "best":
            return f"**{text}**"
        return f"{text} *" if row[tied] == "yes" else text

    cells = summary.assign(row=row_labels(summary), cell=summary.apply(cell, axis=1))
    tables = {}
    for tokenizer, part in cells.groupby("tokenizer", sort=False):
        table = part.pivot(index="row", columns="layers", values="cell")
        table = table.reindex(index=part["row"].drop_duplicates(), columns=sorted(part["layers"].unique()))
        table.index.name, table.columns.name = row_title(summary), "layers"
        tables[tokenizer] = table.fillna("–")
    return tables


def uniform_half(summary: pd.DataFrame, metric: str) -> Optional[float]:
    """The half-width every cell's interval shares to the table's 3 decimals (a balanced grid), else
    None: then each cell prints its own."""
    _, low, high, _ = COLUMNS[metric]
    halves = ((summary[high] - summary[low]) / 2).dropna().round(3)
    return float(halves.iloc[0]) if len(halves) and halves.nunique() == 1 else None


def row_title(summary: pd.DataFrame) -> str:
    from klue_tc.report.plots import row_parts

    return " / ".join({"ln": "LN"}.get(part, part) for part in row_parts(summary))


def markdown_table(frame: pd.DataFrame, header: list[str]) -> list[str]:
    rows = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    return rows + [
        "| " + " | ".join(map(str, [index, *values])) + " |" for index, values in zip(frame.index, frame.values)
    ]


def titles_part(row) -> str:
    """'; titles low..high': the crossed bootstrap's interval, where the titles were resampled too."""
    low, high = getattr(row, "titles_low", float("nan")), getattr(row, "titles_high", float("nan"))
    return "" if pd.isna(low) else f"; titles {low:+.3f}..{high:+.3f}"


def interval_text(row) -> str:
    """'+0.007 (+0.005..+0.009)': a contrast with its grid-model interval (and the titles' one)."""
    if pd.isna(row.low):
        return f"{row.difference:+.3f} (no interval)"
    return f"{row.difference:+.3f} ({row.low:+.3f}..{row.high:+.3f}{titles_part(row)})"


TITLES_NOTE = (
    "Validation intervals marked 'titles' also resample the validation titles: {method}, the same contrast "
    "re-read on each resample (at the same confidence)."
)


CV_TITLES_NOTE = (
    "CV intervals marked 'titles' (shown where some cell has several pretraining seeds) resample the "
    "pretraining seeds of each such cell, then the folds, then each fold's held-out titles: a hierarchical "
    "bootstrap, so that they include pretraining's run-to-run variance (Pretraining seeds below)."
)


def effects_table(effects: pd.DataFrame) -> list[str]:
    frame = effects.assign(
        text=effects.apply(interval_text, axis=1),
        what=effects.apply(lambda r: f"{r.factor}: {r.level} − {r.reference}", axis=1),
    )
    table = frame.pivot_table(index="what", columns="metric", values="text", aggfunc="first", sort=False)
    columns = [m for m in METRICS if m in table.columns]
    return markdown_table(table[columns], ["paired difference", *(METRICS[m] for m in columns)])


def grid_line(grid: Optional[Grid], summary: pd.DataFrame, metric: str) -> str:
    """How the table's intervals and marks were made, with the fit's pooled noise."""
    from klue_tc.report.grid_model import TIES_METHOD

    if len(summary) == 1:
        return (
            "One configuration: its mean over its folds (report.csv has the sample std); the grid model's "
            "intervals and ties compare configurations, and there is no other."
        )
    fit = grid.fit if grid is not None else None
    noise = (
        f" (pooled residual std {fit.sigma:.4f} F1 over {len(fit.means)} cells, {fit.df} residual df"
        + (
            f"; pretraining's seed-to-seed std {math.sqrt(fit.seed_variance):.4f} F1, {fit.seed_df} df, "
            "in every pretrained cell's interval"
            if fit.seed_df
            else ""
        )
        + ")"
        if fit is not None and fit.df > 0
        else ""
    )
    shared = uniform_half(summary, metric)
    each = (
        f"every cell's interval is its mean ±{shared:.3f} (the grid is balanced), so the cells show the mean alone"
        if shared is not None
        else "each cell shows ±half its interval"
    )
    titles = (
        " report.csv's validation_f1_titles_low and _high give each cell's interval with the validation "
        "titles resampled too (crossed bootstrap over folds × titles)."
        if metric == "validation_f1" and summary.get("validation_f1_titles_low", pd.Series(dtype=float)).notna().any()
        else ""
    )
    return (
        f"Each cell: its mean at the average fold with the 95 % t interval of one model of the whole grid, "
        f"fold F1 = cell + fold + noise{noise}; {each}. (n=k): a cell with fewer than "
        f"{summary['folds'].max()} folds, its mean adjusted for how hard those folds were (report.csv's "
        f"mean columns are the plain fold means). **bold**: the best; *: tied with it ({TIES_METHOD}, 95 %)." + titles
    )


def interaction_lines(table: pd.DataFrame) -> list[str]:
    """The interaction families as one table (a column per metric), then their verdicts."""
    from klue_tc.report.interactions import verdicts as interaction_verdicts

    if table.empty:  # the records vary no two factors together: nothing to say
        return []

    def interval(row) -> str:
        return f"**{interval_text(row)}**" if row.kind == "interaction" else interval_text(row)

    main = table[table["exclusion"] == table["exclusion"].iloc[0]]  # "declared" first where any applies
    frame = main.assign(
        text=main.apply(interval, axis=1),
        what=main.apply(lambda r: f"{r.family}: {r.comparison} ({r.confidence * 100:.4g} %)", axis=1),
    )
    pivot = frame.pivot_table(index="what", columns="metric", values="text", aggfunc="first", sort=False)
    columns = [m for m in METRICS if m in pivot.columns]
    lines = [
        "## Interactions",
        "",
        "Does one factor's effect depend on another? Contrasts of the grid model on matched sets only "
        "(cells alike in every other factor, each set with a cell at every level of both factors, named "
        "below), the intervals as the marginal effects': within a family they are read at once, each at "
        "Bonferroni's level (shown); **bold**: the difference of differences itself (interactions.csv).",
        "",
        *markdown_table(pivot[columns].fillna("–"), ["contrast", *(METRICS[m] for m in columns)]),
        "",
        *matched_lines(main),
        *[f"- {line}" for line in interaction_verdicts(main)],
        "",
    ]
    if len(main) < len(table):
        lines += interactions_both_ways(main, table[table["exclusion"] != main["exclusion"].iloc[0]])
    return lines


def matched_lines(table: pd.DataFrame) -> list[str]:
    """Each family's matched sets, once where every metric has the same."""
    lines = []
    for family, part in table.groupby("family", sort=False):
        texts = dict(zip(part["metric"], part["matched"]))
        if len(set(texts.values())) == 1:
            lines.append(f"- Matched sets, {family}: {next(iter(texts.values()))}.")
        else:
            lines += [f"- Matched sets, {family}, {METRICS[m]}: {text}." for m, text in texts.items()]
    return lines


def interaction_signs(part: pd.DataFrame) -> dict[str, int]:
    """Each difference of differences' verdict: +1 / -1 where its interval lies above / below zero, else 0."""
    rows = part[part["kind"] == "interaction"]
    return {r.comparison: (r.low > 0) - (r.high < 0) for r in rows.itertuples()}


def interactions_both_ways(declared: pd.DataFrame, plain: pd.DataFrame) -> list[str]:
    """The verdicts of each family the declared exclusion changes, as read on every configuration."""
    from klue_tc.report.interactions import verdicts as interaction_verdicts

    lines = []
    for (metric, family), part in plain.groupby(["metric", "family"], sort=False):
        mine = declared[(declared["metric"] == metric) & (declared["family"] == family)]
        if interaction_signs(mine) != interaction_signs(part):
            if mine.empty:
                lines.append(f"- with the declared exclusion, {METRICS[metric]}, {family}: no matched set")
            lines += [f"- without the declared exclusion: {line}" for line in interaction_verdicts(part)]
            lines += [f"  {m}" for m in matched_lines(part)]
    return (
        [
            "The declared exclusion changes these verdicts; read on every configuration (interactions.csv's rows "
            "with exclusion none):",
            "",
            *lines,
            "",
        ]
        if lines
        else []
    )


def verdict_lines(verdicts: Verdicts, single: bool = False) -> list[str]:
    """One line per metric of verdicts, one naming what the rest need; or one line saying why there are none."""
    if not any(verdicts.judged.values()) and single:
        return ["One configuration: the original study's claims compare configurations; none is judged."]
    if not any(verdicts.judged.values()):
        return [f"No verdicts: {'; '.join(verdicts.not_judged)}."]
    lines = ["Judged from the records (claims.md has the evidence):", ""]
    for metric, claims in verdicts.judged.items():
        lines += [f"- {METRICS[metric]}: " + "; ".join(f"({c.id}) {c.verdict}" for c in claims if "." not in c.id)]
    if verdicts.not_judged:
        lines += [f"- not judged: {'; '.join(verdicts.not_judged)}"]
    if verdicts.left_out:
        lines += [f"- {verdicts.left_out}"]
    lines += both_ways_lines(verdicts)
    return lines


def both_ways_lines(verdicts: Verdicts) -> list[str]:
    """One line per metric naming each verdict the declared exclusions change, both ways."""
    lines = []
    for metric, changed in verdicts.both_ways.items():
        judged = {c.id: c for c in verdicts.judged.get(metric, [])}
        moves = [
            f"({id}) {judged[id].verdict} {signed_or_blank(judged[id])}with the exclusion, "
            + (f"{plain.verdict} {signed_or_blank(plain)}without" if plain is not None else "not judged without")
            for id, plain in changed.items()
        ]
        lines.append(f"- {METRICS[metric]}, verdicts the declared exclusion changes: {'; '.join(moves)}")
    return lines


def signed_or_blank(claim: Claim) -> str:
    from klue_tc.report.grid_model import signed

    return f"({signed(claim.difference)}) " if claim.measured else ""


def found_interactions(table: Optional[pd.DataFrame]) -> list[str]:
    """One line naming, per metric, the interactions whose interval excludes zero (the Interactions
    section words each)."""
    if table is None or table.empty:
        return []
    lines = []
    for exclusion, part in table.groupby("exclusion", sort=False):
        found = part[(part["kind"] == "interaction") & ((part["low"] > 0) | (part["high"] < 0))]
        names = {m: sorted(set(rows["family"])) for m, rows in found.groupby("metric", sort=False)}
        text = "; ".join(f"{METRICS[m]}: {', '.join(f)}" for m, f in names.items()) or "none"
        where = {"declared": " with the declared exclusion", "none": ""}[exclusion]
        if table["exclusion"].nunique() > 1 and exclusion == "none":
            where = " without it"
        lines.append(f"- interactions whose interval excludes zero{where}: {text} (Interactions below)")
    return lines


def effects_lines(effects: Effects) -> list[str]:
    if effects.table.empty and not effects.left_out:  # the records vary no factor: nothing to say
        return []
    if effects.table.empty:
        return ["## Marginal effects", "", f"No marginal effects: {'; '.join(effects.left_out)}.", ""]
    lines = [
        "## Marginal effects",
        "",
        f"Each level against the reference, averaged over matched sets of cells that differ only "
        f"in that factor; 95 % interval: {effects.table['method'].iloc[0]} (effects.csv).",
        "",
        *effects_table(effects.table),
        "",
    ]
    validation = effects.table[effects.table["metric"] == "validation_f1"]
    if "titles_low" in validation and validation["titles_low"].notna().any():
        from klue_tc.report.title_bootstrap import METHOD

        lines += [TITLES_NOTE.format(method=METHOD), ""]
    cv = effects.table[effects.table["metric"] == "f1"] if "titles_low" in effects.table else effects.table.iloc[:0]
    if cv["titles_low"].notna().any():
        lines += [CV_TITLES_NOTE, ""]
    if effects.left_out:
        lines += [f"Left out: {'; '.join(effects.left_out)}.", ""]
    return lines


def to_markdown(report: Report) -> str:
    """report.md: every section of the report's contents that has something to show, in order."""
    from klue_tc.report.contents import SECTIONS

    return "\n".join("\n".join(section.lines(report)) for section in SECTIONS if section.shows(report))


def head_lines(report: Report) -> list[str]:
    """The title, what the records are and what made them, the recipe and how CV F1 was chosen."""
    folds, summary = report.folds, report.summary
    codes = sorted(set(folds["code"]))
    lines = [
        f"# F1 comparison: {report.directory.name}",
        "",
        f"{len(summary)} configuration{'s' if len(summary) > 1 else ''}, {len(folds)} (configuration, fold) records; "
        f"records made by code {', '.join(codes)}."
        + (f" Written, with the files and plots beside it, by `{report.command}`." if report.command else ""),
        "",
    ]
    if report.recipe is not None:
        lines += [recipe_line(report.recipe, folds), ""]
    lines += [selection_line(folds), ""]
    if len(codes) > 1:
        lines += [f"**Warning: this table mixes records of {len(codes)} code versions** (results.reuse=any).", ""]
    if report.shared is not None:
        lines += [report.shared.line(), ""]
    return lines


def verdicts_section(report: Report) -> list[str]:
    """The verdicts of every claim, the interactions found and the further analyses' one-liners."""
    return [
        "## Verdicts",
        "",
        *verdict_lines(report.verdicts, len(report.summary) == 1),
        *found_interactions(report.interactions),
        *[f"- {found.verdict}" for found in report.findings() if found.verdict],
    ]


def metric_section(report: Report, metric: str) -> list[str]:
    """One metric's F1 tables (a table per tokenizer), with how they were made and the bar to clear."""
    summary, baseline = report.summary, report.reference
    if not summary[metric if metric != "f1" else "f1_mean"].notna().any():
        return []
    lines = [
        "",
        f"## {METRICS[metric]}" + (": mean with its 95 % interval (grid model)" if len(summary) > 1 else ""),
        "",
        grid_line(report.grids.get(metric), summary, metric),
        "",
    ]
    if metric == "validation_f1":
        lines += [*ensemble_lines(summary), ""]
    if baseline is not None and pd.notna(baseline.get(metric)):
        spread = f" ± {baseline['f1_std']:.3f} (sample std)" if metric == "f1" else ""
        lines += [
            f"The bar to clear, {BASELINE} on the same folds: **{baseline[metric]:.3f}**{spread} "
            f"({baseline['folds']} folds"
            + (f"; C chosen on each inner split: {', '.join(baseline['C'])}" if baseline.get("C") else "")
            + ").",
            "",
        ]
    for tokenizer, table in f1_tables(summary, metric).items():
        lines += [
            f"### tokenizer: {tokenizer}",
            "",
            *markdown_table(table, [table.index.name, *(f"{n} layers" for n in table.columns)]),
            "",
        ]
    return lines


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


def missing_lines(report: Report) -> list[str]:
    return ["## Missing", "", *[f"- {m}" for m in report.missing], ""] if report.missing else []


def plots_line(report: Report) -> list[str]:
    return [f"Plots: {', '.join(report.plots)}", ""] if report.plots else []


def not_in_this_report(report: Report) -> list[str]:
    """One list of what the further analyses would show and why the records cannot, where a heading
    each would say only that there is nothing under it."""
    absent = [found.absent for found in report.findings() if found.absent]
    return ["## Not in this report", "", *(f"- {why}." for why in absent), ""] if absent else []


def ensemble_lines(summary: pd.DataFrame) -> list[str]:
    """What a validation cell is, and beside it the fold ensemble where a run scored one: the score
    a run prints and predicts with is the ensemble's, which the cells (one model each) are not."""
    from klue_tc.report.plots import row_labels

    line = (
        "Each cell: the mean of the fold models' validation macro-F1, each fold's model alone. A run that "
        "trains all folds prints (last line, metrics.json's validation_f1) and `python -m klue_tc.predict` "
        "uses the fold ensemble instead: the fold models' averaged probabilities"
    )
    scored = summary[summary["validation_ensemble_f1"].notna()]
    if scored.empty:
        return [line + "; no run here scored one (each job trained one fold)."]
    labels = summary["tokenizer"] + " / " + row_labels(summary) + " / L" + summary["layers"].astype(str)
    table = pd.DataFrame(
        {
            "fold models' mean": scored["validation_f1"].map("{:.3f}".format),
            "fold ensemble": scored["validation_ensemble_f1"].map("{:.3f}".format),
        }
    ).set_axis(labels[scored.index])
    return [line + ":", "", *markdown_table(table, ["configuration", *table.columns])]


def job_time(seconds: float) -> str:
    """Seconds in the unit that reads: hours from two hours, else minutes, else seconds."""
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds"


def selection_line(folds: pd.DataFrame) -> str:
    """How each fold's CV F1 was chosen, from the records (klue_tc.store.records reads older ones as chosen
    on the scored fold)."""
    from klue_tc.store.records import SELECTED_ON_INNER_SPLIT

    inner = int((folds["selected_on"] == SELECTED_ON_INNER_SPLIT).sum())
    rule = (
        "CV macro-F1: each fold's held-out titles scored once, by the checkpoint of the epoch its inner split "
        "(a stratified share of its training titles, cv.inner_fraction) chose; early stopping reads that split too"
    )
    if inner == len(folds):
        return f"{rule}."
    old = "each fold's best epoch on its held-out titles, chosen on those same titles (optimistic)"
    if inner == 0:
        return f"CV macro-F1: {old}; records of code older than the inner-split selection."
    return f"**Mixed selection**: {inner} of {len(folds)} folds: {rule}; the rest: {old}."


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


def print_tables(tables: Mapping[str, pd.DataFrame]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for tokenizer, table in tables.items():
        out = Table(title=f"CV macro-F1, tokenizer: {tokenizer}")
        out.add_column(table.index.name)
        for layers in table.columns:
            out.add_column(f"{layers} layers", justify="right")
        for row, values in zip(table.index, table.values):
            out.add_row(str(row), *[v.replace("**", "") for v in values])
        console.print(out)
