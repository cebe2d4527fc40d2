"""Hydra callback: when a multirun ends, log each configuration's W&B aggregate and write the sweep's
report into its directory."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class SweepReportCallback(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from klue_tc.report.write import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        if config.logger.name == "wandb":
            from klue_tc.config import WandbConfig
            from klue_tc.loggers import log_sweep_aggregates

            fields = WandbConfig.__dataclass_fields__
            log_sweep_aggregates(
                sweep_dir, WandbConfig(**{k: v for k, v in config.logger.wandb.items() if k in fields})
            )
        try:
            write_report(
                sweep_dir,
                log_to_wandb=config.logger.name == "wandb",
                wandb_cfg=config.logger.wandb,  # typed by the schema: WandbConfig's keys
                group=config.sweep or config.experiment,
            )
        except Exception as err:  # the jobs' results are safe on disk; the report can be rerun
            log.warning("sweep report failed (%s); rerun: python -m klue_tc.report %s", err, sweep_dir)
            return
        print(f"report: {sweep_dir / 'report.md'}", flush=True)  # the sweep's last line: where its answer is
