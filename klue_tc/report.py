"""The F1 comparison table of a sweep (or any folder of runs), with its noise and the study's verdicts.

    python -m klue_tc.report outputs/sweeps/study [--wandb]
    python -m klue_tc.report docs/study              # the committed study, from its records alone

Every `metrics.json` and results-store record below the folder is read; fold records are merged by
`config_hash` (a fold seen twice counts once). Written into the folder: report.md (tables,
verdicts, cost), report.csv (one row per configuration), effects.csv (marginal effects with
intervals), claims.md (the original study's claims judged), and the plots.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd
import yaml

from klue_tc.errors import USER_ERROR_EXIT, KlueTcError
from klue_tc.records import FoldResult, RunResult

log = logging.getLogger(__name__)

DESCRIBE = ["tokenizer", "encoder", "ln", "head", "layers"]
CSV_COLUMNS = [
    *DESCRIBE,
    "f1_mean",
    "f1_std",
    "folds",
    "validation_f1",
    "validation_f1_std",
    "accuracy_mean",
    "within_noise_of_best",
    "best_epoch_mean",
    "still_improving",
    "seconds_per_fold",
    "train_samples_per_s",
    "device",
    "config_hash",
    "code",
]
METRICS = {"f1": "CV macro-F1", "validation_f1": "validation macro-F1"}
BASELINE = "TF-IDF char 1-3-grams + linear SVM"
TABLE_KEY = "f1_table"  # the W&B key of the report run's table


class NoResultsError(KlueTcError):
    """The folder holds no finished run to report on."""


def study_order() -> dict[str, int]:
    """Rows and panels follow the registries' order (the study's); anything else sorts after."""
    from klue_tc.registry import VARIANT_GROUPS

    names = [n for registry in VARIANT_GROUPS.values() for n in registry.names()] + ["post", "pre"]
    return {name: i for i, name in enumerate(names)}


def fold_frame(directory: str | Path) -> pd.DataFrame:
    """One row per (configuration, fold), from every metrics.json below `directory` and every
    results-store record (<key>/fold<k>.json) there: a folder of records alone, such as the
    committed docs/study/results, is reported on without its run folders."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NoResultsError(f"{directory}: no such directory")
    rows = []
    for path in sorted(directory.rglob("metrics.json")):
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
            describe = {key: metrics[key] for key in [*DESCRIBE, "config_hash"]}
            rows += [fold_row(describe, record) for record in RunResult.from_dict(metrics).folds]
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("%s skipped: not a klue_tc metrics file (%s: %s)", path, type(err).__name__, err)
    rows += stored_rows(directory)
    if not rows:
        raise NoResultsError(f"{directory}: no metrics.json or results record found (nothing finished to report on)")
    frame = pd.DataFrame(rows).dropna(subset=["f1"]).drop_duplicates(["config_hash", "fold"], keep="last")
    if frame.empty:
        raise NoResultsError(f"{directory}: no fold in any metrics.json has an F1 score")
    return frame.reset_index(drop=True)


def stored_rows(directory: Path) -> list[dict]:
    """Rows from the results-store records below `directory` (those that name their configuration)."""
    from klue_tc.results import ResultsStore

    roots = sorted({path.parent.parent for path in directory.rglob("fold*.json")})
    return [
        fold_row({**asdict(record.describe), "config_hash": record.config_hash}, record)
        for root in roots
        for record in ResultsStore(root).records()
        if record.describe is not None and record.config_hash
    ]


def fold_row(describe: dict, record: FoldResult) -> dict:
    return {
        **describe,
        "fold": record.fold,
        "f1": record.f1,
        "accuracy": record.accuracy,
        "validation_f1": record.validation.f1 if record.validation else float("nan"),
        "best_epoch": record.best_epoch,
        "epochs_run": record.epochs_run,
        "still_improving": record.epochs_run > 0 and record.best_epoch == record.epochs_run,
        "train_samples_per_s": record.train_samples_per_s,
        "seconds": record.train_seconds,
        "code": record.code.label() if record.code else "unknown",
        "precision": record.precision,
        "device": record.device or "unknown",
        "selected_on": record.selected_on,
    }


def _distinct(values: pd.Series) -> str:
    """A configuration's folds may come from several code versions or machines: each named once."""
    return " + ".join(sorted(set(values)))


def summarise_configs(folds: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: fold macro-F1 mean ± sample std (none for one fold), and the rest."""
    from klue_tc.effects import within_noise_of_best

    summary = (
        folds.groupby(["config_hash", *DESCRIBE], sort=False)
        .agg(
            f1_mean=("f1", "mean"),
            f1_std=("f1", "std"),
            folds=("fold", "nunique"),
            validation_f1=("validation_f1", "mean"),
            validation_f1_std=("validation_f1", "std"),
            accuracy_mean=("accuracy", "mean"),
            best_epoch_mean=("best_epoch", "mean"),
            still_improving=("still_improving", "sum"),
            seconds_per_fold=("seconds", "mean"),
            train_samples_per_s=("train_samples_per_s", "mean"),
            device=("device", _distinct),
            code=("code", _distinct),
        )
        .reset_index()
    )
    noise = within_noise_of_best(folds, "f1")["within_noise"]
    # yes / no, or unknown with fewer than two folds in common with the best
    summary["within_noise_of_best"] = summary["config_hash"].map(
        lambda key: "unknown" if pd.isna(noise.get(key, pd.NA)) else "yes" if noise[key] else "no"
    )
    clashes = summary.duplicated(DESCRIBE, keep=False)
    if clashes.any():  # two settings the table does not show (d_model, data, ...) would share a cell
        log.warning(
            "%d configurations share a table cell with another (they differ in settings the table does "
            "not show); each cell keeps the one with most folds",
            int(clashes.sum()),
        )
        summary = summary.sort_values("folds", ascending=False, kind="stable").drop_duplicates(DESCRIBE)
    order = study_order()
    ranked = summary.sort_values(
        DESCRIBE,
        kind="stable",
        key=lambda col: col if col.name == "layers" else col.map(lambda v: (order.get(v, len(order)), str(v))),
    )
    return ranked[CSV_COLUMNS].reset_index(drop=True)


def missing_cells(summary: pd.DataFrame, planned_folds: Optional[int] = None) -> tuple[list[str], int]:
    """Cells of the grid the records span (each encoder / LN row seen x every layer count x every
    tokenizer seen) with no record, and configurations short of `planned_folds` (the runs' cv.folds;
    without it, the most folds any configuration has): one line per table row and fold count, and
    how many configurations that is."""
    rows = list(dict.fromkeys(zip(summary.encoder, summary.ln)))
    present = set(zip(summary.tokenizer, summary.encoder, summary.ln, summary.layers))
    absent = [
        (t, e, ln, n, "no record")
        for t in summary.tokenizer.unique()
        for e, ln in rows
        for n in sorted(summary.layers.unique())
        if (t, e, ln, n) not in present
    ]
    most = max(planned_folds or 0, summary["folds"].max())
    short = [
        (r.tokenizer, r.encoder, r.ln, r.layers, f"{r.folds} of {most} folds")
        for r in summary[summary["folds"] < most].itertuples()
    ]
    grouped: dict[tuple, list] = {}
    for t, e, ln, n, what in absent + short:
        grouped.setdefault((t, e, ln, what), []).append(n)
    lines = [
        f"{t} / {e} / {ln} / {', '.join(map(str, layers))} layers: {what}"
        for (t, e, ln, what), layers in grouped.items()
    ]
    return lines, len(absent) + len(short)


def run_config(directory: Path) -> Optional[dict]:
    """The data and CV settings of the runs below `directory` (their config.yaml), if they agree."""
    configs = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(directory.rglob("config.yaml"))]
    configs = [c for c in configs if isinstance(c, dict) and "data" in c and "cv" in c]
    settings = {
        json.dumps(
            [c["data"].get(k) for k in ("path", "limit", "validation_path")]
            + [c["cv"]["folds"], c["cv"]["seed"], c.get("seed")]
        )
        for c in configs
    }
    if len(settings) != 1:
        if len(settings) > 1:
            log.warning("the runs use different data or folds: no baseline row")
        return None
    return configs[0]


def recipe_line(config: dict, folds: pd.DataFrame) -> str:
    """The scale the records were made at (from their config.yaml), in one line."""
    data, cv, trainer = config["data"], config["cv"], config.get("trainer", {})
    titles = f"{data['limit']:,} stratified titles" if data.get("limit") else "every title"
    return (
        f"Recipe: {titles} of {Path(str(data.get('path') or 'the KLUE YNAT train split')).name}, "
        f"{cv['folds']} folds (seed {cv['seed']}), up to {trainer.get('max_epochs')} epochs with early stopping "
        f"after {trainer.get('early_stopping_patience')} without gain, precision "
        f"{', '.join(sorted(set(folds['precision'].astype(str))))}; validation titles: "
        f"{Path(str(data['validation_path'])).name if data.get('validation_path') else 'none'}."
    )


def selection_line(folds: pd.DataFrame) -> str:
    """How each fold's CV F1 was chosen, from the records (older ones lack the field: the scored fold)."""
    from klue_tc.records import SELECTED_ON_INNER_SPLIT

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


def baseline_scores(config: dict, directory: Path) -> Optional[dict]:
    """The baseline's mean over the folds the runs used: {f1, f1_std, validation_f1, folds}."""
    from klue_tc.baseline import score_on_folds

    try:
        rows = pd.DataFrame(score_on_folds(config, directory / "baseline.json"))
    except KlueTcError as err:
        log.warning("no baseline row: %s", err)
        return None
    validation = rows["validation_f1"].mean() if "validation_f1" in rows else float("nan")
    chosen_c = [f"{c:g}" for c in rows["C"]] if "C" in rows else []
    return {
        "f1": rows["f1"].mean(),
        "f1_std": rows["f1"].std(ddof=1),
        "validation_f1": validation,
        "folds": len(rows),
        "C": chosen_c,
    }


def f1_tables(summary: pd.DataFrame, metric: str = "f1") -> dict[str, pd.DataFrame]:
    """Per tokenizer: rows encoder / LN, columns the layer counts, cells 'mean ± std (n)'; the best
    in bold, * within noise of it (CV only)."""
    from klue_tc.plots import row_labels

    mean, std = ("f1_mean", "f1_std") if metric == "f1" else ("validation_f1", "validation_f1_std")
    best = summary[mean].max()

    def cell(row) -> str:
        if pd.isna(row[mean]):
            return "–"
        spread = f" ± {row[std]:.4f}" if pd.notna(row[std]) else ""  # a sample std needs two folds
        text = f"{row[mean]:.4f}{spread} (n={row['folds']})"
        if row[mean] == best:
            return f"**{text}**"
        return f"{text} *" if metric == "f1" and row["within_noise_of_best"] == "yes" else text

    cells = summary.assign(row=row_labels(summary), cell=summary.apply(cell, axis=1))
    tables = {}
    for tokenizer, part in cells.groupby("tokenizer", sort=False):
        table = part.pivot(index="row", columns="layers", values="cell")
        table = table.reindex(index=part["row"].drop_duplicates(), columns=sorted(part["layers"].unique()))
        table.index.name, table.columns.name = "encoder / LN", "layers"
        tables[tokenizer] = table.fillna("–")
    return tables


def markdown_table(frame: pd.DataFrame, header: list[str]) -> list[str]:
    rows = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    return rows + [
        "| " + " | ".join(map(str, [index, *values])) + " |" for index, values in zip(frame.index, frame.values)
    ]


def effects_table(effects: pd.DataFrame) -> list[str]:
    from klue_tc.effects import NO_INTERVAL

    def interval(row) -> str:
        if pd.isna(row.low):
            return f"{row.difference:+.4f} ({NO_INTERVAL})"
        return f"{row.difference:+.4f} ({row.low:+.4f}..{row.high:+.4f})"

    frame = effects.assign(
        text=effects.apply(interval, axis=1),
        what=effects.apply(lambda r: f"{r.factor}: {r.level} − {r.reference}", axis=1),
    )
    table = frame.pivot_table(index="what", columns="metric", values="text", aggfunc="first", sort=False)
    columns = [m for m in METRICS if m in table.columns]
    return markdown_table(table[columns], ["paired difference", *(METRICS[m] for m in columns)])


def to_markdown(
    directory: Path,
    summary: pd.DataFrame,
    folds: pd.DataFrame,
    effects: pd.DataFrame,
    verdicts: Mapping[str, list],
    baseline: Optional[dict],
    config: Optional[dict],
    missing: list[str],
) -> str:
    codes = sorted(set(folds["code"]))
    lines = [
        f"# F1 comparison: {directory.name}",
        "",
        f"{len(summary)} configurations, {len(folds)} (configuration, fold) records; "
        f"records made by code {', '.join(codes)}.",
        "",
    ]
    if config is not None:
        lines += [recipe_line(config, folds), ""]
    lines += [selection_line(folds), ""]
    if len(codes) > 1:
        lines += [f"**Warning: this table mixes records of {len(codes)} code versions** (results.reuse=any).", ""]
    lines += ["## Verdicts", "", "Judged from the records (claims.md has the evidence):", ""]
    for metric, claims in verdicts.items():
        lines += [f"- {METRICS[metric]}: " + "; ".join(f"({c.id}) {c.verdict}" for c in claims if "." not in c.id)]
    for metric in [m for m in METRICS if summary[m if m != "f1" else "f1_mean"].notna().any()]:
        lines += [
            "",
            f"## {METRICS[metric]}: mean ± sample std over folds (n folds)",
            "",
            "**bold**: the best configuration"
            + ("; *: within noise of it (paired t over folds, 95 %)" if metric == "f1" else " (each fold model alone)"),
            "",
        ]
        if baseline is not None and pd.notna(baseline.get(metric)):
            spread = f" ± {baseline['f1_std']:.4f}" if metric == "f1" else ""
            lines += [
                f"The bar to clear, {BASELINE} on the same folds: **{baseline[metric]:.4f}**{spread} "
                f"({baseline['folds']} folds"
                + (f"; C chosen on each inner split: {', '.join(baseline['C'])}" if baseline.get("C") else "")
                + ").",
                "",
            ]
        for tokenizer, table in f1_tables(summary, metric).items():
            lines += [
                f"### tokenizer: {tokenizer}",
                "",
                *markdown_table(table, ["encoder / LN", *(f"{n} layers" for n in table.columns)]),
                "",
            ]
    if not effects.empty:
        lines += [
            "## Marginal effects",
            "",
            f"Each level against the reference, paired over cells that differ only "
            f"in that factor and over folds; 95 % interval: {effects['method'].iloc[0]} (effects.csv).",
            "",
            *effects_table(effects),
            "",
        ]
    improving = summary[summary["still_improving"] > 0]
    lines += [
        "## Cost and convergence",
        "",
        f"{len(improving)} of {len(summary)} configurations were still improving at their last epoch in at "
        f"least one fold ({int(folds['still_improving'].sum())} of {len(folds)} folds). Training time in all: "
        f"{folds['seconds'].sum() / 3600:.1f} hours of job time (each fold from data preparation to its last "
        f"checkpoint; jobs run side by side share the wall clock).",
        "",
        *device_lines(folds),
        *markdown_table(
            summary.assign(row=summary[["tokenizer", "encoder", "ln"]].agg(" / ".join, axis=1))
            .pivot_table(index="row", columns="layers", values="seconds_per_fold", sort=False)
            .round(0)
            .astype("Int64"),
            ["seconds per fold", *sorted(summary["layers"].unique())],
        ),
        "",
        "Titles per second (training steps) are in report.csv.",
        "",
    ]
    if missing:
        lines += ["## Missing", "", *[f"- {m}" for m in missing], ""]
    lines += [
        "Plots: f1_by_layers.png, grid_heatmap.png, effects.png"
        + (", validation_by_layers.png, grid_heatmap_validation.png" if summary["validation_f1"].notna().any() else ""),
        "",
    ]
    return "\n".join(lines)


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


def write_report(
    directory: str | Path,
    log_to_wandb: bool = False,
    wandb_cfg: Optional[Mapping[str, Any]] = None,
    group: Optional[str] = None,
    baseline: bool = True,
) -> pd.DataFrame:
    """Write the report's files into `directory`; return the per-configuration rows."""
    from klue_tc.claims import claims_markdown, judge_claims
    from klue_tc.effects import marginal_effects
    from klue_tc.plots import plot_effects, plot_f1_by_layers, plot_grid_heatmap

    directory = Path(directory)
    folds = fold_frame(directory)
    summary = summarise_configs(folds)
    config = run_config(directory)
    reference = baseline_scores(config, directory) if baseline and config is not None else None
    missing, missing_count = missing_cells(summary, config["cv"]["folds"] if config is not None else None)
    metrics = [m for m in METRICS if folds[m].notna().any()]
    effects = pd.concat([marginal_effects(folds, m) for m in metrics], ignore_index=True)
    verdicts = {m: judge_claims(folds, m) for m in metrics}
    effects.to_csv(directory / "effects.csv", index=False)
    (directory / "claims.md").write_text(claims_markdown(verdicts), encoding="utf-8")
    (directory / "report.md").write_text(
        to_markdown(directory, summary, folds, effects, verdicts, reference, config, missing), encoding="utf-8"
    )
    summary.to_csv(directory / "report.csv", index=False)
    plots = [
        plot_f1_by_layers(summary, directory / "f1_by_layers.png", baseline=reference["f1"] if reference else None),
        plot_grid_heatmap(summary, directory / "grid_heatmap.png"),
    ]
    if "validation_f1" in metrics:
        plots += [
            plot_f1_by_layers(
                summary,
                directory / "validation_by_layers.png",
                "validation_f1",
                "validation_f1_std",
                reference["validation_f1"] if reference else None,
                "validation macro-F1 (mean ± std of the fold models)",
            ),
            plot_grid_heatmap(summary, directory / "grid_heatmap_validation.png", "validation_f1"),
        ]
    if not effects.empty:
        plots.append(plot_effects(effects, directory / "effects.png"))
    print_tables(f1_tables(summary, "f1"))
    if reference is not None:
        print(
            f"{BASELINE} on the same folds: CV macro-F1 {reference['f1']:.4f}"
            + (f", validation {reference['validation_f1']:.4f}" if pd.notna(reference["validation_f1"]) else "")
        )
    if missing:
        log.warning("%d cells missing or short of folds (report.md: Missing)", missing_count)
    if len(set(folds["code"])) > 1:
        log.warning("the table mixes records of %d code versions (report.md names them)", len(set(folds["code"])))
    if log_to_wandb:
        log_report_run(summary, effects, verdicts, plots, directory, wandb_cfg, group)
    return summary


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


def log_report_run(
    summary: pd.DataFrame,
    effects: pd.DataFrame,
    verdicts: Mapping[str, list],
    plots: list[Path],
    directory: Path,
    wandb_cfg: Optional[Mapping[str, Any]],
    group: Optional[str],
) -> None:
    """One W&B run holding the table (each configuration's aggregate once, a row), the effects, the
    verdicts and the plots; a failure is one warning, never fatal: the files are the report."""
    from klue_tc.config import WandbConfig
    from klue_tc.loggers import finish_wandb_run, open_wandb_run

    cfg = WandbConfig(**{k: v for k, v in dict(wandb_cfg or {}).items() if k in WandbConfig.__dataclass_fields__})
    run = open_wandb_run(cfg, directory, f"report-{group or directory.name}", group, "report")
    if run is None:
        return
    try:
        import wandb

        claims = [[metric, c.id, c.statement, c.verdict, c.evidence] for metric, cs in verdicts.items() for c in cs]
        run.log(
            {
                TABLE_KEY: wandb.Table(dataframe=for_wandb(summary)),
                "effects": wandb.Table(dataframe=for_wandb(effects)),
                "claims": wandb.Table(columns=["metric", "id", "statement", "verdict", "evidence"], data=claims),
                **{p.stem: wandb.Image(str(p)) for p in plots},
            }
        )
    except Exception as err:
        log.warning(
            "report not logged to W&B (%s: %s)", type(err).__name__, str(err).splitlines()[0] if str(err) else ""
        )
    finish_wandb_run(run)


def for_wandb(frame: pd.DataFrame) -> pd.DataFrame:
    """W&B tables type each column by its first row: text columns as text, numbers as floats."""
    numeric = pd.api.types.is_numeric_dtype
    return frame.astype(
        {c: float if numeric(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) else str for c in frame.columns}
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m klue_tc.report", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="a sweep or run directory (searched for metrics.json)")
    parser.add_argument("--wandb", action="store_true", help="also log the report as one W&B run")
    parser.add_argument("--project", default="klue_tc", help="W&B project (default: klue_tc)")
    parser.add_argument("--mode", default="offline", choices=["offline", "online"], help="W&B mode (default: offline)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the TF-IDF + SVM reference row")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        write_report(
            args.directory,
            log_to_wandb=args.wandb,
            wandb_cfg={"project": args.project, "mode": args.mode},
            group=args.directory.resolve().name,
            baseline=not args.no_baseline,
        )
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    print(f"report: {args.directory / 'report.md'} (report.csv, effects.csv, claims.md and the plots beside it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
