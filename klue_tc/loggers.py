"""Experiment logging: one helper opens every W&B run (a fold's, a configuration's aggregate, the
sweep report's), offline by default, falling back to local files with one warning."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

from klue_tc.config import LoggerConfig, LoggerKind, WandbConfig
from klue_tc.redaction import redact, redact_text

log = logging.getLogger(__name__)


def _has_api_key() -> bool:
    netrc = Path("~/.netrc").expanduser()
    return bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace")
    )


def open_wandb_run(
    cfg: WandbConfig, save_dir: Path, name: str, group: Optional[str], job_type: str, config: Optional[dict] = None
):
    """A started W&B run, or None with one warning when W&B cannot start (local files are the record)."""
    mode = cfg.mode
    if mode == "online" and not _has_api_key():
        log.warning("W&B online mode asked for but no API key is set; logging offline")
        mode = "offline"
    try:
        import wandb

        save_dir.mkdir(parents=True, exist_ok=True)
        # W&B's metadata file records the command line, where a shell may have expanded a token.
        argv_has_secret = redact_text(" ".join(sys.argv)) != " ".join(sys.argv)
        # No console capture or system stats: jobs stay fast and their stdout stays readable.
        return wandb.init(
            project=redact(cfg.project),
            entity=redact(cfg.entity),
            name=redact(name),
            group=redact(group),
            job_type=job_type,
            dir=str(save_dir),
            mode=mode,
            config=redact(config),
            reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True, x_disable_meta=argv_has_secret),
        )
    except Exception as err:
        log.warning(
            "W&B could not start (%s: %s); continuing with local files",
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
        )
        return None


def finish_wandb_run(run, exit_code: int = 0) -> None:
    """Finish the run (a non-zero `exit_code` marks it failed); an offline one says how to upload it."""
    if run is None:
        return
    offline = run.settings.mode == "offline" if hasattr(run.settings, "mode") else False
    directory = getattr(run.settings, "sync_dir", None)
    run.finish(exit_code=exit_code)
    if offline and directory:
        log.info("W&B run saved offline; upload it with: wandb sync %s", directory)


def make_logger(cfg: LoggerConfig, save_dir: Path, name: str, group: str, job_type: str, config: dict):
    """The Lightning logger of one fold's training: W&B, CSV, or none."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    if cfg.name == LoggerKind.none:
        return None
    if cfg.name == LoggerKind.wandb:
        run = open_wandb_run(cfg.wandb, save_dir, name, group, job_type, config)
        if run is not None:
            run.define_metric("val/f1", summary="max")
            run.define_metric("val/accuracy", summary="max")
            run.define_metric("inner/f1", summary="max")  # what chooses the epoch; the record has val's there
            # The run is started here and handed to Lightning: a failure shows now, not mid-training.
            return WandbLogger(experiment=run, save_dir=str(save_dir))
    return CSVLogger(save_dir=str(save_dir), name="csv", version=job_type)


def finish_logger(logger: Any, exit_code: int = 0) -> None:
    from lightning.pytorch.loggers import WandbLogger

    if isinstance(logger, WandbLogger):
        finish_wandb_run(logger.experiment, exit_code)


def config_group(group: Optional[str], sweep: Optional[str], experiment: str, key: str) -> str:
    """The W&B group of one configuration: its folds' runs and its aggregate run. In a sweep the
    sweep's name comes first, so that its configurations' groups sort together."""
    return group or (f"{sweep}-{experiment}-{key}" if sweep else f"{experiment}-{key}")
