"""One job's facts, resolved once before its first step (klue_tc/jobs/job_setup.py) and handed down as
one object: where its records go and under which key, what it trains on and at which precision,
which code makes the numbers, its W&B group and the clock its time to first step is measured on."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from klue_tc.core.config import RunConfig
from klue_tc.store.records import CodeVersion, Describe

if TYPE_CHECKING:  # types only: the store is no part of the code fingerprint
    from klue_tc.core.hardware import Device
    from klue_tc.data.corpus import PretrainSources
    from klue_tc.data.soft_labels import TeacherTargets
    from klue_tc.data.titles import LabelledTitles
    from klue_tc.store.results import ResultsStore


@dataclass
class JobInputs:
    train: LabelledTitles  # after data.limit's subsample
    validation: Optional[LabelledTitles]
    tokenizer_identity: Optional[str]  # the content hash of a published tokenizer model, if one is read
    teacher: Optional[TeacherTargets] = None  # distillation: the soft labels of the training titles


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
    """Everything one job needs besides a fold's own data, the same for each of its folds."""

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
