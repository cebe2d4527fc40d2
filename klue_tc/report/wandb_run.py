"""The report as one W&B run: the table (each configuration's aggregate once, a row), the effects,
the verdicts and the plots."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd
from omegaconf import OmegaConf

from klue_tc.core.config import WandbConfig
from klue_tc.report.claims import Claim

log = logging.getLogger(__name__)

TABLE_KEY = "f1_table"  # the W&B key of the report run's table


def wandb_settings(given: Optional[Any] = None) -> WandbConfig:
    """The W&B settings typed by their schema: the defaults are WandbConfig's, `given` (a
    WandbConfig, a mapping or the sweep's DictConfig node) overrides them."""
    if isinstance(given, WandbConfig):
        return given
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(WandbConfig), given or {}))


def log_report_run(
    summary: pd.DataFrame,
    effects: pd.DataFrame,
    verdicts: Mapping[str, list[Claim]],
    plots: list[Path],
    directory: Path,
    settings: WandbConfig,
    group: Optional[str],
) -> None:
    """One W&B run holding the report; a failure is one warning, never fatal: the files are the report."""
    from klue_tc.jobs.loggers import finish_wandb_run, open_wandb_run

    run = open_wandb_run(
        settings, directory, f"report-{group or directory.name}", group, "report", replaces_earlier=True
    )
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
