"""What a job says while it works: one line per epoch with the whole job's progress and ETA."""

from __future__ import annotations

import logging
import sys
import time
import warnings

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from rich.file_proxy import FileProxy

log = logging.getLogger("klue_tc")


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

    def __init__(self, folds_to_train: int, max_epochs: int):
        self.folds, self.max_epochs = folds_to_train, max_epochs
        self.started = time.monotonic()
        self.epochs_done, self.fold_number = 0, 0

    def bar(self) -> EpochProgressBar:
        """The progress bar for a terminal (the trainer shows it only there, or with trainer.progress_bar=rich)."""
        return EpochProgressBar()

    def callback(self, fold: int) -> EpochLine:
        self.fold_number += 1
        return EpochLine(self, fold, self.fold_number)

    def eta(self, epochs_left_this_fold: int) -> float:
        """Remaining time if every epoch takes the mean so far and every later fold runs all its
        epochs (early stopping makes it an upper bound)."""
        per_epoch = (time.monotonic() - self.started) / max(1, self.epochs_done)
        return per_epoch * (epochs_left_this_fold + (self.folds - self.fold_number) * self.max_epochs)


class EpochLine(L.Callback):
    def __init__(self, job: JobProgress, fold: int, number: int):
        self.job, self.fold, self.number = job, fold, number

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


class PretrainLine:
    """The pretraining's own line: step k/N, the objective's loss, elapsed and ETA, every
    `every_s` seconds and at the last step (reading the loss waits for the device: not every step)."""

    def __init__(self, every_s: float = 30.0, loss_name: str = "MLM loss"):
        self.every_s, self.started, self.last = every_s, time.monotonic(), float("-inf")
        self.loss_name = loss_name
        self.first_step: int | None = None

    def __call__(self, step: int, total: int, loss) -> None:
        now = time.monotonic()
        if self.first_step is None:  # a resumed run's rate counts the steps it takes itself
            self.first_step, self.started = step - 1, now
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
