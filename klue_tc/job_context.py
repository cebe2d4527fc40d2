"""One job's facts, resolved once before its first step and handed down as one object: where its
records go and under which key, what it trains on and at which precision, which code makes the
numbers, its W&B group and the clock its time to first step is measured on."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from klue_tc.config import RunConfig
from klue_tc.corpus import PretrainSources
from klue_tc.data import LabelledTitles
from klue_tc.preflight import JobInputs
from klue_tc.records import CodeVersion, Describe
from klue_tc.results import ResultsStore, config_hash

if TYPE_CHECKING:  # torch loads with the hardware module, only once the inputs have been checked
    from klue_tc.hardware import Device


@dataclass
class FirstStepClock:
    """Where a fold's time to its first step starts: the job's start for its first fold, the end
    of the previous fold for the next; the time to import torch and Lightning is not counted."""

    start: float = field(default_factory=time.perf_counter)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        paused_at = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - paused_at

    def restart(self) -> None:
        self.start = time.perf_counter()


@dataclass(frozen=True)
class JobContext:
    run: RunConfig
    config: dict  # the resolved config as written: config.yaml, the store's copy, W&B's
    run_dir: Path
    inputs: JobInputs
    store: ResultsStore
    key: str  # the results key: the configuration's hash
    code: CodeVersion
    device: Device
    describe: Describe
    wandb_group: str
    clock: FirstStepClock
    sources: Optional[PretrainSources] = None  # what the pretraining corpus reads, when pretraining

    @property
    def folds(self) -> list[int]:
        """The folds this job reports: `cv.fold` alone, or all."""
        return [self.run.cv.fold] if self.run.cv.fold is not None else list(range(self.run.cv.folds))

    def fold_dir(self, fold: int) -> Path:
        return self.run_dir / f"fold{fold}"

    def state_dir(self, fold: int) -> Path:
        """Where the fold's resumable training state waits while it trains."""
        return self.store.training_state_dir(self.key, fold)

    def run_name(self, fold: int) -> str:
        """The fold's W&B run name."""
        return f"{self.run.experiment}-{self.key}-fold{fold}"


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
    from klue_tc.fingerprint import code_version
    from klue_tc.hardware import resolve_device

    device = resolve_device(run.trainer)
    key = key or results_key(run, inputs, device.precision, sources)
    return JobContext(
        run,
        config,
        run_dir,
        inputs,
        store,
        key,
        code_version(),
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
    )


def wandb_group(run: RunConfig, key: str) -> str:
    """One group per configuration (its folds and its aggregate), in a sweep as in a single run."""
    from klue_tc.loggers import config_group

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


def pretrained_root(run: RunConfig) -> Path:
    """`pretrain.dir`, else `pretrained` beside the results store (so a sweep's jobs share it)."""
    return Path(run.pretrain.dir).expanduser() if run.pretrain.dir else results_root(run).parent / "pretrained"


def standalone_job(
    run: RunConfig, train: LabelledTitles, run_dir: Path, store_root: Path, clock: Optional[FirstStepClock] = None
) -> JobContext:
    """A context for training folds outside `python -m klue_tc` (the benchmarks, tests): the given
    titles, no validation set, a results store of its own for the training state."""
    inputs = JobInputs(train, None, None)
    return resolve_job(run, {}, run_dir, inputs, ResultsStore(store_root), clock or FirstStepClock())
