"""The F1 comparison table of a sweep (or any folder of runs): report.md, report.csv, a plot, W&B.

    python -m klue_tc.report outputs/multiruns/2024-05-01_12-00-00 [--wandb]

Every `metrics.json` below the folder is read. In a sweep each job holds one (configuration,
fold), so fold records are merged by `config_hash` (a fold seen twice counts once) before the
mean ± sample std of the folds' macro-F1 is taken per configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd

from klue_tc.errors import USER_ERROR_EXIT, KlueTcError

log = logging.getLogger(__name__)

DESCRIBE = ["tokenizer", "encoder", "ln", "head", "layers"]
CSV_COLUMNS = [*DESCRIBE, "f1_mean", "f1_std", "folds", "accuracy_mean", "train_samples_per_s"]
WANDB_COLUMNS = ["encoder", "ln", "layers", "tokenizer", "f1_mean", "f1_std", "folds"]
# Rows and panels follow the study's order; anything else sorts after, alphabetically.
ORDER = {
    name: i
    for i, name in enumerate(
        [
            "sentencepiece",
            "mecab",
            "kobert",
            "transformer",
            "trans_blstm",
            "trans_blstm_parallel",
            "cnn",
            "post",
            "pre",
            "cls",
            "blstm",
            "mean",
        ]
    )
}
TABLE_KEY, PLOT_KEY = "f1_table", "f1_by_layers"


class NoResultsError(KlueTcError):
    """The folder holds no finished run to report on."""


def fold_frame(directory: str | Path) -> pd.DataFrame:
    """One row per (configuration, fold), from every metrics.json below `directory`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NoResultsError(f"{directory}: no such directory")
    rows = []
    for path in sorted(directory.rglob("metrics.json")):
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
            config = {key: metrics[key] for key in [*DESCRIBE, "config_hash"]}
            rows += [
                {
                    **config,
                    "fold": r["fold"],
                    "f1": r["f1"],
                    "accuracy": r.get("accuracy"),
                    "train_samples_per_s": r.get("train_samples_per_s"),
                }
                for r in metrics["folds"]
            ]
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("%s skipped: not a klue_tc metrics file (%s: %s)", path, type(err).__name__, err)
    if not rows:
        raise NoResultsError(f"{directory}: no metrics.json found (nothing finished to report on)")
    frame = pd.DataFrame(rows).astype({"f1": float, "accuracy": float, "train_samples_per_s": float})
    frame = frame.dropna(subset=["f1"]).drop_duplicates(["config_hash", "fold"], keep="first")
    if frame.empty:
        raise NoResultsError(f"{directory}: no fold in any metrics.json has an F1 score")
    return frame


def summarise_configs(folds: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: fold macro-F1 mean ± sample std (0 for one fold)."""
    summary = (
        folds.groupby(["config_hash", *DESCRIBE], sort=False)
        .agg(
            f1_mean=("f1", "mean"),
            f1_std=("f1", "std"),
            folds=("fold", "nunique"),
            accuracy_mean=("accuracy", "mean"),
            train_samples_per_s=("train_samples_per_s", "mean"),
        )
        .reset_index()
    )
    summary["f1_std"] = summary["f1_std"].fillna(0.0)
    # Two configurations that differ only in keys the table does not show (d_model, data, ...)
    # would share a cell; keep the better-covered one rather than pool unrelated folds.
    clashes = summary.duplicated(DESCRIBE, keep=False)
    if clashes.any():
        log.warning(
            "%d configurations share a table cell with another (they differ in settings the table "
            "does not show); each cell keeps the one with most folds",
            int(clashes.sum()),
        )
        summary = summary.sort_values("folds", ascending=False, kind="stable").drop_duplicates(DESCRIBE)
    return _ordered(summary)[CSV_COLUMNS].reset_index(drop=True)


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    def rank(column: pd.Series) -> pd.Series:
        if column.name == "layers":
            return column
        return column.map(lambda v: (ORDER.get(v, len(ORDER)), str(v)))

    return frame.sort_values(DESCRIBE, key=rank, kind="stable")


def row_labels(summary: pd.DataFrame) -> pd.Series:
    """'encoder / ln', plus '/ head' when the report holds more than one head."""
    parts = ["encoder", "ln", "head"] if summary["head"].nunique() > 1 else ["encoder", "ln"]
    return summary[parts].astype(str).agg(" / ".join, axis=1)


def f1_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per tokenizer: rows encoder / LN, columns the layer counts present, cells 'mean ± std (n=folds)'."""
    cells = summary.assign(
        row=row_labels(summary),
        cell=[f"{m:.4f} ± {s:.4f} (n={n})" for m, s, n in zip(summary.f1_mean, summary.f1_std, summary.folds)],
    )
    tables = {}
    for tokenizer, part in cells.groupby("tokenizer", sort=False):
        table = part.pivot(index="row", columns="layers", values="cell")
        table = table.reindex(index=part["row"].drop_duplicates(), columns=sorted(part["layers"].unique()))
        table.index.name, table.columns.name = "encoder / LN", "layers"
        tables[tokenizer] = table.fillna("–")
    return tables


def to_markdown(tables: Mapping[str, pd.DataFrame]) -> str:
    lines = ["# F1 comparison: CV macro-F1, mean ± sample std over folds (n = folds)", ""]
    for tokenizer, table in tables.items():
        header = [table.index.name, *[f"{layers} layers" for layers in table.columns]]
        lines += [f"## tokenizer: {tokenizer}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join([str(row), *values]) + " |" for row, values in zip(table.index, table.values)]
        lines.append("")
    return "\n".join(lines)


def plot_f1_by_layers(summary: pd.DataFrame, path: Path) -> Path:
    from matplotlib.figure import Figure  # the object API renders with Agg, no pyplot or display

    tokenizers = list(dict.fromkeys(summary["tokenizer"]))
    fig = Figure(figsize=(5 * len(tokenizers), 4), layout="constrained")
    axes = fig.subplots(1, len(tokenizers), sharey=True, squeeze=False)[0]
    labelled = summary.assign(row=row_labels(summary))
    colours = {row: f"C{i % 10}" for i, row in enumerate(dict.fromkeys(labelled["row"]))}  # same line, same colour
    for ax, tokenizer in zip(axes, tokenizers):
        for row, line in labelled[labelled.tokenizer == tokenizer].groupby("row", sort=False):
            line = line.sort_values("layers")
            ax.errorbar(
                line.layers, line.f1_mean, yerr=line.f1_std, marker="o", capsize=3, label=row, color=colours[row]
            )
        ax.set(title=f"tokenizer: {tokenizer}", xlabel="layers")
        ax.set_xticks(sorted(summary["layers"].unique()))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    axes[0].set_ylabel("CV macro-F1 (mean ± std)")
    fig.savefig(path, dpi=120)
    return path


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
            out.add_row(str(row), *values)
        console.print(out)


def log_to_wandb_run(
    summary: pd.DataFrame, plot: Path, directory: Path, wandb_cfg: Optional[Mapping[str, Any]], group: Optional[str]
) -> None:
    """One aggregate W&B run holding the table and the plot; a failure is one warning, never fatal."""
    cfg = dict(wandb_cfg or {})
    try:
        import wandb

        mode = cfg.get("mode") or "offline"
        if mode == "online" and not os.environ.get("WANDB_API_KEY") and "api.wandb.ai" not in _netrc():
            log.warning("W&B online mode asked for but no API key is set; logging the report offline")
            mode = "offline"
        columns = WANDB_COLUMNS if summary["head"].nunique() == 1 else [*WANDB_COLUMNS[:2], "head", *WANDB_COLUMNS[2:]]
        run = wandb.init(
            project=cfg.get("project") or "klue_tc",
            entity=cfg.get("entity"),
            mode=mode,
            dir=str(directory),
            group=group,
            job_type="report",
            name=f"report-{group or directory.name}",
            reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True),
        )
        try:
            run.log({TABLE_KEY: wandb.Table(dataframe=summary[columns]), PLOT_KEY: wandb.Image(str(plot))})
        finally:
            run.finish()
    except Exception as err:  # the files on disk are the report; W&B is a copy
        first_line = str(err).splitlines()[0] if str(err) else ""
        log.warning("report not logged to W&B (%s: %s)", type(err).__name__, first_line)


def _netrc() -> str:
    path = Path("~/.netrc").expanduser()
    return path.read_text(errors="replace") if path.is_file() else ""


def write_report(
    directory: str | Path,
    log_to_wandb: bool = False,
    wandb_cfg: Optional[Mapping[str, Any]] = None,
    group: Optional[str] = None,
) -> pd.DataFrame:
    """Write report.md, report.csv and f1_by_layers.png into `directory`; return the per-configuration rows."""
    directory = Path(directory)
    summary = summarise_configs(fold_frame(directory))
    tables = f1_tables(summary)
    (directory / "report.md").write_text(to_markdown(tables), encoding="utf-8")
    summary.to_csv(directory / "report.csv", index=False)
    plot = plot_f1_by_layers(summary, directory / "f1_by_layers.png")
    print_tables(tables)
    if log_to_wandb:
        log_to_wandb_run(summary, plot, directory, wandb_cfg, group)
    return summary


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m klue_tc.report", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="a sweep or run directory (searched for metrics.json)")
    parser.add_argument("--wandb", action="store_true", help="also log the table and plot as one W&B run")
    parser.add_argument("--project", default="klue_tc", help="W&B project (default: klue_tc)")
    parser.add_argument("--mode", default="offline", choices=["offline", "online"], help="W&B mode (default: offline)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        write_report(
            args.directory,
            log_to_wandb=args.wandb,
            wandb_cfg={"project": args.project, "mode": args.mode},
            group=args.directory.resolve().name,
        )
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    print(f"wrote {args.directory / 'report.md'}, report.csv and f1_by_layers.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
