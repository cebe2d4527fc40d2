"""What a job says while it works: what the whole job will cost on this machine, measured in its
first training steps; a line every 30 s within an epoch where no progress bar shows (off a terminal);
one line per epoch with the whole job's progress and ETA."""

from __future__ import annotations

import logging
import sys
import time
import warnings

import lightning as L
import torch
from lightning.pytorch.callbacks import RichProgressBar
from rich.file_proxy import FileProxy

log = logging.getLogger("klue_tc")

# Off a terminal (nohup, tee, a file), a line this often within an epoch, where a bar would move.
PROGRESS_EVERY_S = 30.0
# The cost is said once the rate has been measured over this long and this many steps after the
# first (allocator and cache warm-up), or at the first epoch's end, whichever comes first: a
# shorter measure read a rate off by several times on a loaded CPU.
COST_AFTER_S, COST_AFTER_STEPS = 20.0, 5


def quiet_libraries() -> None:
    """One line per message: Lightning's own handler printed each of its lines a second time beside
    Hydra's, and its start-up notices and tips (devices, litlogger) tell a sweep's user nothing."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        logger.handlers.clear()
        logger.propagate = True
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    # A fold stopped part-way through an epoch resumes at its next batch: FoldDataModule keeps the place.
    warnings.filterwarnings("ignore", message=".*ended before the epoch ended.*")
    # F1 and accuracy are torchmetrics values gathered from every rank; val/loss stays rank 0's part.
    warnings.filterwarnings("ignore", message=".*sync_dist=True.*")
    # Lightning's hint to launch with srun where SLURM is installed: sweeps use submitit instead.
    warnings.filterwarnings("ignore", message=".*The `srun` command is available.*")


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class JobProgress:
    """The job's clock across its folds: `fold k/N` counts the folds this job trains."""

    def __init__(self, folds_to_train: int, max_epochs: int, every_s: float = PROGRESS_EVERY_S):
        self.folds, self.max_epochs, self.every_s = folds_to_train, max_epochs, every_s
        self.started = time.monotonic()
        self.training_started: float | None = None  # the first fold's first epoch: pretraining is before it
        self.epochs_done, self.fold_number = 0, 0
        self.cost_said = False  # once per job: its first fold measures it

    def bar(self) -> EpochProgressBar:
        """The progress bar for a terminal (the trainer shows it only there, or with trainer.progress_bar=rich)."""
        return EpochProgressBar()

    def callback(self, fold: int) -> EpochLine:
        self.fold_number += 1
        return EpochLine(self, fold, self.fold_number)

    def callbacks(self, fold: int) -> list[L.Callback]:
        """The next fold's lines: per epoch, and the cost and within-epoch lines from its steps."""
        line = self.callback(fold)
        return [line, StepLine(self, fold, line.number)]

    def training_began(self) -> None:
        if self.training_started is None:
            self.training_started = time.monotonic()

    def eta(self, epochs_left_this_fold: int) -> float:
        """Remaining time if every epoch takes the mean so far (timed from the first epoch's start, not
        the job's: a pretraining before it is no epoch's cost) and every later fold runs all its
        epochs (early stopping makes it an upper bound)."""
        began = self.started if self.training_started is None else self.training_started
        per_epoch = (time.monotonic() - began) / max(1, self.epochs_done)
        return per_epoch * (epochs_left_this_fold + (self.folds - self.fold_number) * self.max_epochs)


class EpochLine(L.Callback):
    def __init__(self, job: JobProgress, fold: int, number: int):
        self.job, self.fold, self.number = job, fold, number

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.job.training_began()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.job.epochs_done += 1
        epoch, metrics = trainer.current_epoch + 1, trainer.callback_metrics
        log.info(
            "fold %d/%d (fold %d) epoch %d/%d: val macro-F1 %.4f, accuracy %.4f; inner-split macro-F1 %.4f "
            "(chooses the epoch) | elapsed %s, ETA %s",
            self.number,
            self.job.folds,
            self.fold,
            epoch,
            trainer.max_epochs,
            float(metrics["val/f1"]),
            float(metrics["val/accuracy"]),
            float(metrics["inner/f1"]),
            duration(time.monotonic() - self.job.started),
            duration(self.job.eta(trainer.max_epochs - epoch)),
        )


def batch_titles(batch) -> int:
    """The titles in a training batch: klue_tc's dict of tensors, or any (inputs, labels) pair."""
    first = batch["input_ids"] if isinstance(batch, dict) else batch[0]
    return len(first)


class StepLine(L.Callback):
    """Measures the fold's training steps (titles/s, wall clock, data loading included) and says,
    once per job, what the whole job costs at that rate: each fold's full epochs and all the
    job's folds. Where no progress bar shows, a line every `job.every_s` seconds within an epoch:
    step/steps, titles/s, elapsed and the job's ETA."""

    def __init__(self, job: JobProgress, fold: int, number: int):
        self.job, self.fold, self.number = job, fold, number
        self.first_step_end: float | None = None
        self.steps_timed, self.titles_timed = 0, 0
        self.last_line = time.monotonic()
        self.show_lines = False
        self.epoch_steps, self.epoch_titles = 0, 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning keeps a progress bar callback only where klue_tc.training.fold.make_trainer shows one.
        self.show_lines = trainer.progress_bar_callback is None
        batches = trainer.num_training_batches
        self.epoch_steps = int(batches) if batches != float("inf") else 0
        try:  # an epoch cut short (trainer.limit_train_batches) is told by its steps alone
            loader = trainer.train_dataloader
            self.epoch_titles = len(loader.dataset) if self.epoch_steps >= len(loader) else 0
        except (AttributeError, TypeError):
            self.epoch_titles = 0

    @property
    def seconds_per_step(self) -> float:
        return (time.monotonic() - self.first_step_end) / self.steps_timed if self.steps_timed else float("nan")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.monotonic()
        if self.first_step_end is None:  # the first step warms caches and allocators up: not timed
            self.first_step_end = now
            return
        self.steps_timed += 1
        self.titles_timed += batch_titles(batch) * trainer.world_size
        measured = now - self.first_step_end
        if not self.job.cost_said and self.steps_timed >= COST_AFTER_STEPS and measured >= COST_AFTER_S:
            self.say_cost(trainer)
        if self.show_lines and now - self.last_line >= self.job.every_s:
            self.last_line = now
            # counted as Lightning does: a resumed epoch's earlier steps too
            done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
            log.info(
                "fold %d/%d (fold %d) epoch %d/%d step %d/%d: %.0f titles/s | elapsed %s, ETA %s",
                self.number,
                self.job.folds,
                self.fold,
                trainer.current_epoch + 1,
                trainer.max_epochs,
                done,
                self.epoch_steps,
                self.titles_timed / measured,
                duration(now - self.job.started),
                duration(self.steps_left(trainer, done) * self.seconds_per_step),
            )

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.job.cost_said and self.steps_timed:  # an epoch shorter than the measuring time
            self.say_cost(trainer)

    def steps_left(self, trainer: L.Trainer, done_this_epoch: int) -> int:
        """Training steps left in the job: this epoch's, this fold's later epochs and every later fold's."""
        later_epochs = trainer.max_epochs - trainer.current_epoch - 1
        later_folds = self.job.folds - self.number
        per_fold = self.job.max_epochs * self.epoch_steps
        return self.epoch_steps - done_this_epoch + later_epochs * self.epoch_steps + later_folds * per_fold

    def say_cost(self, trainer: L.Trainer) -> None:
        self.job.cost_said = True
        per_step = self.seconds_per_step
        fold_seconds = per_step * trainer.max_epochs * self.epoch_steps
        threads = f", {torch.get_num_threads()} threads" if trainer.strategy.root_device.type == "cpu" else ""
        log.info(
            "cost on this machine (%s%s): %.0f titles/s over the first %d training steps; a fold's %d epochs "
            "of %s take about %s, the job's %s about %s (each epoch's scoring adds a little; "
            "early stopping can end a fold sooner)",
            trainer.strategy.root_device.type,
            threads,
            self.titles_timed / max(time.monotonic() - self.first_step_end, 1e-9),
            self.steps_timed + 1,
            trainer.max_epochs,
            f"{self.epoch_titles:,} titles" if self.epoch_titles else f"{self.epoch_steps} steps",
            duration(fold_seconds),
            f"{self.job.folds} fold{'s' if self.job.folds != 1 else ''}",
            duration(fold_seconds * self.job.folds),
        )


class PretrainLine:
    """The pretraining's own line: step k/N, the objective's loss, elapsed and ETA (so its first
    line, once the rate is measured, says what the whole pretraining costs), every `every_s`
    seconds and at the last step (reading the loss waits for the device: not every step)."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S, loss_name: str = "MLM loss"):
        self.every_s, self.started, self.last = every_s, time.monotonic(), float("-inf")
        self.loss_name = loss_name
        self.first_step: int | None = None

    def __call__(self, step: int, total: int, loss) -> None:
        now = time.monotonic()
        if self.first_step is None:
            # Timed from the end of the first step (a resumed run's from its own first): the first
            # line comes once COST_AFTER_S have measured the rate.
            self.first_step, self.started = step, now
            self.last = now - self.every_s + COST_AFTER_S
        if now - self.last < self.every_s and step != total:
            return
        self.last = now
        elapsed = now - self.started
        rate = (step - self.first_step) / max(elapsed, 1e-9)
        log.info(
            "pretraining step %d/%d: %s %.3f | elapsed %s, ETA %s",
            step,
            total,
            self.loss_name,
            float(loss),
            duration(elapsed),
            duration((total - step) / rate if rate > 0 else 0.0),
        )


class EpochProgressBar(RichProgressBar):
    """Lightning's rich bar counting epochs from 1 as the epoch lines do (`Epoch 1/2`), with the log
    lines printed above it: rich's live display redirects sys.stdout and sys.stderr while it shows, but
    the log handlers hold the streams from before, so their lines were drawn over by the bar."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rerouted: list[tuple[logging.StreamHandler, object]] = []

    def _get_train_description(self, current_epoch: int) -> str:
        description = f"Epoch {current_epoch + 1}"
        if self.trainer.max_epochs is not None and self.trainer.max_epochs > 0:
            description += f"/{self.trainer.max_epochs}"
        # As Lightning pads it: the same width as the validation bar's description, so it does not flicker.
        return f"{description:{len(self.validation_description)}}"

    def _init_progress(self, trainer: L.Trainer) -> None:
        super()._init_progress(trainer)
        self._reroute_log_handlers()

    def _stop_progress(self) -> None:
        self._restore_log_handlers()
        super()._stop_progress()

    def _reroute_log_handlers(self) -> None:
        if self._rerouted:
            return
        proxies = {id(s.rich_proxied_file): s for s in (sys.stdout, sys.stderr) if isinstance(s, FileProxy)}
        for logger in (logging.getLogger(), log):
            for handler in logger.handlers:
                stream = getattr(handler, "stream", None)
                if isinstance(handler, logging.StreamHandler) and id(stream) in proxies:
                    self._rerouted.append((handler, stream))
                    handler.setStream(proxies[id(stream)])

    def _restore_log_handlers(self) -> None:
        for handler, stream in self._rerouted:
            handler.setStream(stream)
        self._rerouted = []
