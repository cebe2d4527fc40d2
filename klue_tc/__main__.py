"""`python -m klue_tc +experiment=trans_blstm`: one configuration, all folds (or a sweep with -m)."""

import logging
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from klue_tc.core import interrupts
from klue_tc.core.config import register_schemas
from klue_tc.core.errors import KlueTcError, exit_with
from klue_tc.core.files import disk_full_error, is_disk_full
from klue_tc.jobs import cli_errors
from klue_tc.jobs.distributed import is_other_rank

# Optuna's import sets up alembic's plugins, each announced at INFO: seven lines of no use to a search.
logging.getLogger("alembic").setLevel(logging.WARNING)

try:
    register_schemas()  # imports every variant: one that breaks the contract is one line here
except KlueTcError as err:
    exit_with(err)
cli_errors.install()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from klue_tc.jobs.run import run_job
    from klue_tc.jobs.sweep_objective import sweeper_value

    try:
        with interrupts.stop_on_signal():
            try:
                return sweeper_value(run_job(cfg))
            except OSError as err:  # a full disk met by a writer that is not klue_tc's (a logger's file)
                if is_disk_full(err):
                    raise disk_full_error(err.filename) from None
                raise
    except interrupts.JobInterrupted as stop:
        outcome = interrupts.settle(stop, cfg.slurm.max_requeues)
        if isinstance(outcome, cli_errors.KlueTcError):  # out of requeues: this job failed, a sweep goes on
            print(f"error: {outcome}", file=sys.stderr, flush=True)
            raise outcome from None
        print(outcome.line(), file=sys.stderr, flush=True)
        outcome.announced = True
        if HydraConfig.get().mode == RunMode.MULTIRUN and not interrupts.in_submitit():
            raise outcome from None  # to the parallel launcher, which reports the job as failed; else the end
        # A single run, or a SLURM job: no result for submitit, whose command waits for the requeued job.
        raise SystemExit(outcome.exit_code) from None
    except cli_errors.KlueTcError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # a failed job (or Optuna trial), not the end of the whole sweep
        # Bad input or config: one line and exit 2, without Hydra's "Error executing job" line.
        remove_rejected_run_dir()
        exit_with(err)


def remove_rejected_run_dir() -> None:
    """A start rejected before anything trained leaves no run folder behind. Hydra made it before
    the job began; only its own files and the job's config.yaml are in it then, else it stays."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if {p.name for p in run_dir.iterdir()} <= {".hydra", f"{hydra_cfg.job.name}.log", "config.yaml"}:
        shutil.rmtree(run_dir, ignore_errors=True)
        remove_empty_parents(run_dir.parent, below=Path.cwd())


def remove_empty_parents(folder: Path, below: Path) -> None:
    """Remove `folder` and its parents while they are empty (outputs/runs/<experiment>/ when the
    rejected run was the first of its experiment), stopping at `below`, which stays."""
    folder, below = folder.resolve(), below.resolve()
    while below in folder.parents:  # strictly below: `below` itself is never removed
        try:
            folder.rmdir()  # only an empty folder goes
        except OSError:
            return
        folder = folder.parent


if __name__ == "__main__":
    try:
        if is_other_rank():  # started by Lightning for a multi-device fit: no Hydra, no run of its own
            from klue_tc.jobs.run import run_other_rank

            sys.exit(run_other_rank())
        sys.argv[1:] = cli_errors.quote_non_ascii_values(sys.argv[1:])
        main()
    except interrupts.JobInterrupted as stop:  # a sweep stopped: by its job in this process, or its launcher
        if not stop.announced:
            print(stop.line(), file=sys.stderr, flush=True)
        raise SystemExit(stop.exit_code) from None
