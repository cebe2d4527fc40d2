"""Hydra callback of the hyper-parameter search (conf/hparams_search/optuna.yaml): a line per trial as
it ends, the table of every trial when the study ends (printed, and trials.csv in the sweep folder),
and only the best trial's checkpoints kept: the others' are removed, their records and scores stay."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import yaml
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from klue_tc.store.records import RunResult

log = logging.getLogger(__name__)

TRIALS_FILE = "trials.csv"


def searched(config: DictConfig) -> list[str]:
    """The parameters the study searches (hydra.sweeper.params), by name."""
    return [str(name) for name in (config.hydra.sweeper.get("params") or {})]


def trial_params(overrides, names: list[str]) -> dict[str, str]:
    """The searched parameters' values among a trial's overrides (`key=value` strings)."""
    pairs = (str(o).lstrip("+~").split("=", 1) for o in overrides or [] if "=" in str(o))
    return {key: value for key, value in pairs if key in names}


def trial_table(sweep_dir: Path, names: list[str]) -> pd.DataFrame:
    """One row per trial of the sweep folder (its jobs' metrics.json and .hydra/overrides.yaml),
    in trial order: its parameters, CV macro-F1, validation macro-F1 (the fold ensemble), job time."""
    rows = []
    for path in sorted(sweep_dir.glob("*/metrics.json"), key=lambda p: (not p.parent.name.isdigit(), p.parent.name)):
        try:
            run = RunResult.load(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        overrides_file = path.parent / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text(encoding="utf-8")) if overrides_file.is_file() else []
        f1 = run.f1
        rows.append(
            {
                "trial": int(path.parent.name) if path.parent.name.isdigit() else path.parent.name,
                **trial_params(overrides, names),
                "cv_f1_mean": run.score,
                "cv_f1_std": f1.std,
                "validation_f1": run.validation.ensemble.f1 if run.validation else float("nan"),
                "minutes": sum(r.train_seconds for r in run.folds) / 60,
                "config_hash": run.config_hash,
                "run_dir": str(path.parent),
            }
        )
    return pd.DataFrame(rows)


def best_trial(sweep_dir: Path, table: pd.DataFrame) -> Optional[str]:
    """The config_hash of the trial Optuna named best (optimization_results.yaml), else the
    highest CV macro-F1 of the table."""
    from klue_tc.report.loading import optuna_best

    if table.empty:
        return None
    best = optuna_best(sweep_dir)
    if best is not None and best.config_hash in set(table["config_hash"]):
        return best.config_hash
    scored = table.dropna(subset=["cv_f1_mean"])
    return None if scored.empty else scored.loc[scored["cv_f1_mean"].idxmax(), "config_hash"]


def remove_checkpoints(table: pd.DataFrame, keep: str) -> tuple[int, int]:
    """Remove the fold checkpoints of every trial but configuration `keep`: (files, bytes) removed.
    Their records, scores and tokenizers stay; predict on such a trial says its checkpoints are gone."""
    files, size = 0, 0
    for run_dir in table.loc[table["config_hash"] != keep, "run_dir"]:
        for checkpoint in Path(run_dir).glob("fold*/*.ckpt"):
            size += checkpoint.stat().st_size
            checkpoint.unlink()
            files += 1
    return files, size


def print_table(table: pd.DataFrame, names: list[str], keep: Optional[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Table(title=f"Optuna trials ({len(table)}); *: the best, whose checkpoints are kept")
    for column in ["trial", *names, "CV macro-F1", "validation", "minutes"]:
        out.add_column(column, justify="left" if column in names else "right")
    for row in table.itertuples(index=False):
        values = row._asdict()
        mark = " *" if row.config_hash == keep else ""
        out.add_row(
            f"{row.trial}{mark}",
            *[str(values.get(name, "")) for name in names],
            "failed" if math.isnan(row.cv_f1_mean) else f"{row.cv_f1_mean:.4f} ± {row.cv_f1_std:.4f}",
            "–" if math.isnan(row.validation_f1) else f"{row.validation_f1:.4f}",
            f"{row.minutes:.1f}",
        )
    Console().print(out)


class OptunaTrialsCallback(Callback):
    """A line per trial as it ends; when the study ends, the trials' table and the other trials'
    checkpoints removed (a 20-trial search kept a gigabyte of models no one would serve)."""

    def __init__(self, keep_best_checkpoints_only: bool = True):
        self.keep_best_only = keep_best_checkpoints_only
        self.best: Optional[tuple[float, Any]] = None  # (CV macro-F1, trial) of the trials this process ran

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        trial = config.hydra.job.get("num", "?")
        total = config.hydra.sweeper.get("n_trials", "?")
        params = " ".join(f"{k}={v}" for k, v in trial_params(job_return.overrides, searched(config)).items())
        if job_return.status != JobStatus.COMPLETED:
            print(f"trial {trial}/{total}: {params} -> failed", flush=True)
            return
        value = float(job_return.return_value)
        if math.isfinite(value) and (self.best is None or value > self.best[0]):
            self.best = (value, trial)
        best = f" (best so far {self.best[0]:.4f}, trial {self.best[1]})" if self.best else ""
        print(f"trial {trial}/{total}: {params} -> CV macro-F1 {value:.4f}{best}", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir, names = Path(config.hydra.sweep.dir), searched(config)
        table = trial_table(sweep_dir, names)
        if table.empty:
            return
        keep = best_trial(sweep_dir, table)
        table.drop(columns=["run_dir"]).to_csv(sweep_dir / TRIALS_FILE, index=False)
        print_table(table, names, keep)
        if self.keep_best_only and keep is not None:
            files, size = remove_checkpoints(table, keep)
            if files:
                kept = table.loc[table["config_hash"] == keep, "trial"].tolist()
                print(
                    f"kept the best trial's checkpoints (trial {', '.join(map(str, kept))}); removed {files} "
                    f"checkpoint(s) of the others ({size / 1e6:.0f} MB); {sweep_dir / TRIALS_FILE} lists every trial",
                    flush=True,
                )
