"""The stall rule of masked-LM pretraining (pretrain.stall): a pretraining still on the token-frequency
plateau (klue_tc/pretraining/frequency_plateau.py) at a set share of its step budget starts again from its
start at a lower learning rate.

The rule is fixed in the config before the job runs and reads nothing but the corpus (its token
frequencies) and the loss. Its check only reads the loss: a pretraining it does not restart takes the
same steps with the same random draws as with the rule off, so its weights are the same. A restart
seeds everything again from `seed`, so it is exactly the pretraining at the lower rate with the
rule off (the same initial weights, batches and masks). Each check is written to a small file beside
the resumable state as it happens, so a job killed after a restart resumes the restarted attempt,
and ends in the pretrained encoder's meta (and so in every fold record that starts from it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar

import torch

from klue_tc.core.config import RunConfig, StallConfig
from klue_tc.core.files import atomic_write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StallCheck:
    """One attempt's check: the loss at the check step against the plateau, and what the rule did."""

    attempt: int  # 0: the pretraining as configured; k: its k-th restart
    lr: float  # the attempt's learning rate
    step: int
    loss: float  # the mean of the last steps' losses (up to LOSS_WINDOW)
    plateau: float  # the entropy of the corpus's token frequencies, nats
    margin: float
    restarted: bool  # the rule restarted the pretraining here
    seconds: float  # the attempt's pretraining time up to the check

    @property
    def on_plateau(self) -> bool:
        return self.loss > self.plateau - self.margin

    def describe(self) -> str:
        return (
            f"step {self.step}, lr {self.lr:g}: masked-LM loss {self.loss:.2f}, plateau {self.plateau:.2f} "
            f"(margin {self.margin:g})"
        )


class Stalled(Exception):
    """Raised from the pretraining loop at the check step of an attempt the rule restarts."""

    def __init__(self, check: StallCheck):
        super().__init__(check.describe())
        self.check = check


def check_step(rule: StallConfig, total: int) -> int:
    """The step after which the loss is checked: `check_at` of the budget, at least the first."""
    return min(total, max(1, round(rule.check_at * total)))


def attempt_lr(run: RunConfig, attempt: int) -> float:
    return run.pretrain.lr * run.pretrain.stall.lr_factor**attempt


def at_lr(run: RunConfig, lr: float) -> RunConfig:
    """`run` with another pretraining learning rate (the rest, the seed included, as it was)."""
    return dataclasses.replace(run, pretrain=dataclasses.replace(run.pretrain, lr=lr))


class StallWatch:
    """An attempt's check, called by the pretraining loop after every step (it acts at one)."""

    def __init__(self, run: RunConfig, plateau: float, total: int, attempt: int, record: Callable[[StallCheck], None]):
        self.rule, self.plateau, self.attempt, self.record = run.pretrain.stall, plateau, attempt, record
        self.step, self.lr = check_step(self.rule, total), attempt_lr(run, attempt)

    def __call__(self, step: int, recent: Sequence[torch.Tensor], seconds: Callable[[], float]) -> None:
        if step != self.step or not recent:
            return
        loss = float(torch.stack(list(recent)).float().mean())  # a read: no random draw, no state changed
        restarts = self.attempt < self.rule.max_restarts
        check = StallCheck(self.attempt, self.lr, step, loss, self.plateau, self.rule.margin, False, seconds())
        check = dataclasses.replace(check, restarted=check.on_plateau and restarts)
        self.record(check)
        if check.restarted:
            raise Stalled(check)


class StallChecks:
    """The checks of one pretraining so far, kept in a file beside its resumable state."""

    def __init__(self, path: Path):
        self.path = path
        stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
        self.checks = [StallCheck(**check) for check in stored]

    @property
    def restarts(self) -> int:
        return sum(check.restarted for check in self.checks)

    def record(self, check: StallCheck) -> None:
        """Kept at once: an attempt resumed from before its check checks again, and replaces it."""
        self.checks = [c for c in self.checks if c.attempt != check.attempt] + [check]
        atomic_write_json(self.path, [asdict(c) for c in self.checks])

    def summary(self, run: RunConfig) -> dict:
        """What the encoder's meta says of the rule: its settings, every check, the rate it ended at."""
        return {
            "rule": asdict(run.pretrain.stall),
            "checks": [asdict(c) for c in self.checks],
            "restarts": self.restarts,
            "lr": attempt_lr(run, self.restarts),
        }


Outcome = TypeVar("Outcome")
Attempt = Callable[[RunConfig, Path, Optional[StallWatch], Callable], Outcome]


def with_restarts(
    run: RunConfig, plateau: Optional[float], total: int, state_path: Path, on_step, attempt: Attempt
) -> tuple[Outcome, Optional[dict], float]:
    """`attempt(run at the attempt's rate, its state path, its watch, its step hook)` until one is
    not restarted; returns its outcome, the rule's summary (None where there is nothing to check:
    no plateau, as for ELECTRA) and the seconds the restarted attempts took before their checks."""
    if plateau is None:
        return attempt(run, state_path, None, on_step), None, 0.0
    checks = StallChecks(state_path.with_name(f"{state_path.stem}.stall.json"))  # while it runs
    while True:
        number = checks.restarts
        steps_before = sum(c.step for c in checks.checks if c.restarted)
        watch = StallWatch(run, plateau, total, number, checks.record)
        try:
            outcome = attempt(
                at_lr(run, watch.lr), attempt_state(state_path, number), watch, shifted(on_step, steps_before)
            )
        except Stalled as stalled:
            attempt_state(state_path, number).unlink(missing_ok=True)
            log.warning(
                "pretraining stalled on the token-frequency plateau at %s: restarted from its start at lr %g "
                "(pretrain.stall, restart %d of at most %d)",
                stalled.check.describe(),
                attempt_lr(run, number + 1),
                number + 1,
                run.pretrain.stall.max_restarts,
            )
            continue
        summary = checks.summary(run)
        checks.path.unlink(missing_ok=True)
        return outcome, summary, sum(c.seconds for c in checks.checks if c.restarted)


def attempt_state(state_path: Path, attempt: int) -> Path:
    """The first attempt's state where it always was; each restart's beside it."""
    return (
        state_path if attempt == 0 else state_path.with_name(f"{state_path.stem}.restart{attempt}{state_path.suffix}")
    )


def shifted(on_step, steps_before: int):
    """The progress hook counting on from the restarted attempts' steps (W&B's steps only grow)."""
    if on_step is None or not steps_before:
        return on_step
    return lambda step, total, loss, batch: on_step(steps_before + step, steps_before + total, loss, batch)
