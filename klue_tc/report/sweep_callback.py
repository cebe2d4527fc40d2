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
        from klue_tc.report.loading import FinalModelsOnlyError, unfinished_line
        from klue_tc.report.wandb_run import wandb_settings
        from klue_tc.report.write import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        to_wandb, settings = config.logger.name == "wandb", None
        if to_wandb:
            from klue_tc.jobs.loggers import log_sweep_aggregates

            settings = wandb_settings(config.logger.wandb)  # the sweep's logger.wandb node, typed by its schema
            log_sweep_aggregates(sweep_dir, settings)
        if unfinished := unfinished_line(sweep_dir):  # another sweep's jobs in the same store, or failed ones
            print(unfinished, flush=True)
        try:
            write_report(sweep_dir, log_to_wandb=to_wandb, wandb_cfg=settings, group=config.sweep or config.experiment)
        except FinalModelsOnlyError as err:  # a sweep of final models (sweeps/distill.yaml) has no table to write
            print(f"no comparison table: {err}", flush=True)
            return
        except Exception as err:  # the jobs' results are safe on disk; the report can be rerun
            log.warning("sweep report failed (%s); rerun: python -m klue_tc.report %s", err, sweep_dir)
            return
        if to_wandb:
            from klue_tc.jobs.loggers import offline_runs_line

            if line := offline_runs_line(sweep_dir):
                print(line, flush=True)
        from klue_tc.report.settings import declared_note

        note = declared_note(sweep_dir)  # what the sweep file says its runs are for (sweeps/smoke.yaml)
        # the sweep's last line: where its answer is
        print(f"report: {sweep_dir / 'report.md'}" + (f"; note: {note}" if note else ""), flush=True)
