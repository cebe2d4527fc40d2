"""Experiment loggers: W&B (offline by default) with a clean fallback, CSV, or none."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger

from klue_tc.config import LoggerConfig, LoggerKind

log = logging.getLogger(__name__)


def make_logger(cfg: LoggerConfig, save_dir: Path, name: str, group: str, job_type: str,
                config: dict) -> Optional[Logger]:
    if cfg.name == LoggerKind.none:
        return None
    if cfg.name == LoggerKind.wandb:
        wandb_logger = start_wandb(cfg, save_dir, name, group, job_type, config)
        if wandb_logger is not None:
            return wandb_logger
    return CSVLogger(save_dir=str(save_dir), name="csv", version=job_type)


def start_wandb(cfg: LoggerConfig, save_dir: Path, name: str, group: str, job_type: str,
                config: dict) -> Optional[WandbLogger]:
    """A W&B run for one job, or None with one warning when W&B cannot start."""
    mode = cfg.wandb.mode
    if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _has_netrc_key()):
        log.warning("W&B online mode asked for but no API key is set; logging offline")
        mode = "offline"
    try:
        import wandb

        # The run is started here and handed to Lightning: a failure shows now, not mid-training, and
        # WandbLogger's own wandb.init passes anonymous=None, which this wandb warns about on every run.
        run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, name=name, group=group,
                         job_type=job_type, dir=str(save_dir), mode=mode, config=config, reinit="create_new",
                         settings=_wandb_settings())
        run.define_metric("val/f1", summary="max")
        run.define_metric("val/accuracy", summary="max")
        return WandbLogger(experiment=run, save_dir=str(save_dir))
    except Exception as err:  # W&B is a convenience; local results are the record
        log.warning("W&B could not start (%s: %s); continuing with local CSV logs", type(err).__name__,
                    str(err).splitlines()[0] if str(err) else "")
        return None


def _wandb_settings():
    import wandb

    # No console capture or system stats: jobs stay fast and their stdout stays readable.
    return wandb.Settings(console="off", x_disable_stats=True, silent=True)


def _has_netrc_key() -> bool:
    return Path("~/.netrc").expanduser().is_file() and "api.wandb.ai" in Path("~/.netrc").expanduser().read_text()


def finish_wandb(logger: Optional[Logger], summary: Optional[dict] = None) -> None:
    if not isinstance(logger, WandbLogger):
        return
    import wandb

    run = logger.experiment
    if summary:
        for key, value in summary.items():
            run.summary[key] = value
    run.finish()
    if wandb.run is run:
        wandb.finish()
