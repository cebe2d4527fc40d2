"""Resolving a job's context (klue_tc/training/job_context.py) once, before its first step: the results key,
the device and precision, the code version, the W&B group and where the records go."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from klue_tc.core.config import RunConfig
from klue_tc.data.corpus import PretrainSources
from klue_tc.data.titles import LabelledTitles
from klue_tc.jobs.loggers import config_group
from klue_tc.store.fingerprint import code_version
from klue_tc.store.records import Describe
from klue_tc.store.results import ResultsStore, config_hash
from klue_tc.training.job_context import FirstStepClock, JobContext, JobInputs


def resolve_job(
    run: RunConfig,
    config: dict,
    run_dir: Path,
    inputs: JobInputs,
    store: ResultsStore,
    clock: FirstStepClock,
    sources: Optional[PretrainSources] = None,
    key: Optional[str] = None,
) -> JobContext:
    """The job's context; `key` is given where it is already known (the other ranks of a
    multi-device fit are told rank 0's)."""
    from klue_tc.core.hardware import resolve_device  # torch loads with it: only once the inputs are checked

    device = resolve_device(run.trainer)
    key = key or results_key(run, inputs, device.precision, sources)
    return JobContext(
        run,
        config,
        run_dir,
        inputs,
        store,
        key,
        code_version(run),
        device,
        describe(run),
        wandb_group(run, key),
        clock,
        sources,
    )


def results_key(run: RunConfig, inputs: JobInputs, precision: str, sources: Optional[PretrainSources] = None) -> str:
    return config_hash(
        run,
        inputs.train.fingerprint(),
        precision,
        inputs.tokenizer_identity,
        sources.fingerprint() if sources is not None else None,
        inputs.teacher.digest if inputs.teacher is not None else None,
    )


def describe(run: RunConfig) -> Describe:
    return Describe(
        run.experiment,
        run.encoder.name,
        run.encoder.ln.value,
        run.encoder.layers,
        run.head.name,
        run.tokenizer.name,
        run.pretrain.objective,
        run.wide.name,
    )


def wandb_group(run: RunConfig, key: str) -> str:
    """One group per configuration (its folds and its aggregate), in a sweep as in a single run."""
    return config_group(run.logger.wandb.group, run.sweep, run.experiment, key)


def results_root(run: RunConfig) -> Path:
    if run.results.dir:
        return Path(run.results.dir).expanduser()
    hydra = HydraConfig.get()
    # A named sweep (a sweep file) keeps its records in its own, stable folder; an ad hoc `-m`
    # shares the single runs' store, since its timestamped folder is new at every re-run.
    if hydra.mode == RunMode.MULTIRUN and run.sweep:
        return Path(hydra.sweep.dir) / "results"
    return Path("outputs/results")


def standalone_job(
    run: RunConfig, train: LabelledTitles, run_dir: Path, store_root: Path, clock: Optional[FirstStepClock] = None
) -> JobContext:
    """A context for training folds outside `python -m klue_tc` (the benchmarks, tests): the given
    titles, no validation set, a results store of its own for the training state."""
    inputs = JobInputs(train, None, None)
    return resolve_job(run, {}, run_dir, inputs, ResultsStore(store_root), clock or FirstStepClock())
