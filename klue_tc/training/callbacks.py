"""Lightning callbacks: what the results need (throughput, best epoch, first step); weight EMA."""

from __future__ import annotations

import time

import lightning as L
import torch
from lightning.pytorch.callbacks import WeightAveraging


def _sync(trainer: L.Trainer) -> None:
    # CUDA kernels run asynchronously; a step is timed only once its work is done.
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize()


# The metric that chooses the epoch, the best checkpoint and when to stop: the inner split's.
SELECTION_METRIC = "inner/f1"
# A learning curve point's fields (records.EpochScores) and the logged metrics they come from.
CURVE_METRICS = {
    "inner_f1": "inner/f1",
    "inner_accuracy": "inner/accuracy",
    "inner_loss": "inner/loss",
    "f1": "val/f1",
    "accuracy": "val/accuracy",
    "loss": "val/loss",
}


class FoldMonitor(L.Callback):
    """Times training steps only (forward, backward, optimiser; no data loading, no validation),
    skipping the first `warmup_steps` steps (allocator, compile and cache warm-up); keeps the
    learning curve and the epoch the inner split chooses."""

    def __init__(self, job_start: float, fold_start: float, warmup_steps: int = 1):
        self.job_start, self.fold_start, self.warmup_steps = job_start, fold_start, warmup_steps
        self.earlier_seconds, self.sittings = 0.0, 1  # the fold's earlier sittings, where it resumed
        self.step_seconds, self.step_samples, self.steps_seen = 0.0, 0, 0
        self.time_to_first_step: float | None = None
        self.best_inner_f1, self.best_inner_accuracy, self.best_epoch = float("-inf"), 0.0, -1
        self.curve: list[dict] = []
        self._t0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.time_to_first_step is None:
            self.time_to_first_step = time.perf_counter() - self.job_start
        _sync(trainer)
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        _sync(trainer)
        elapsed = time.perf_counter() - self._t0
        self.steps_seen += 1
        if self.steps_seen > self.warmup_steps:
            self.step_seconds += elapsed
            self.step_samples += len(batch["input_ids"]) * trainer.world_size  # every rank's part of the batch

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        scores = {field: float(trainer.callback_metrics[metric]) for field, metric in CURVE_METRICS.items()}
        self.curve.append({"epoch": trainer.current_epoch + 1, **scores})
        # Strictly better, as ModelCheckpoint and EarlyStopping judge it: the first of equal epochs.
        if scores["inner_f1"] > self.best_inner_f1:
            self.best_inner_f1, self.best_epoch = scores["inner_f1"], trainer.current_epoch
            self.best_inner_accuracy = scores["inner_accuracy"]

    def state_dict(self) -> dict:
        # Saved in the fold's resumable checkpoint: the best epoch so far, the curve, the timed steps
        # and the fold's seconds so far. The warm-up skip and the time to first step belong to each
        # process: they start afresh.
        return {
            "best_inner_f1": self.best_inner_f1,
            "best_inner_accuracy": self.best_inner_accuracy,
            "best_epoch": self.best_epoch,
            "curve": self.curve,
            "step_seconds": self.step_seconds,
            "step_samples": self.step_samples,
            "earlier_seconds": self.fold_seconds,
            "sittings": self.sittings,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        # This process is one sitting more; the earlier ones' seconds count up to their last saved
        # state (work lost after it is not counted, and is counted where it is redone).
        self.sittings = state_dict.get("sittings", 1) + 1

    @property
    def fold_seconds(self) -> float:
        """The fold's wall seconds so far, over every sitting it ran in."""
        return self.earlier_seconds + time.perf_counter() - self.fold_start

    @property
    def samples_per_s(self) -> float:
        return self.step_samples / self.step_seconds if self.step_seconds else float("nan")


def ema_with_warmup(decay: float):
    """An AveragedModel update whose decay ramps up as (1 + n) / (10 + n) towards `decay`
    (TensorFlow's ExponentialMovingAverage with num_updates): early on, and in a 20-step smoke
    run, the average follows the model instead of holding on to its first steps."""

    @torch.no_grad()
    def update(averaged: list[torch.Tensor], current: list[torch.Tensor], n_averaged: torch.Tensor) -> None:
        if torch.is_floating_point(averaged[0]):
            # The decay stays a tensor on the model's device: int(n_averaged) would make the host
            # wait for the GPU after every step.
            step_decay = torch.clamp((1 + n_averaged) / (10 + n_averaged), max=decay)
            torch._foreach_lerp_(averaged, current, (1 - step_decay).to(averaged[0].dtype))
        else:
            torch._foreach_copy_(averaged, current)

    return update


class ExponentialMovingAverage(WeightAveraging):
    """Lightning's weight averaging as an EMA updated after every step: validation, the best
    checkpoint and the final model all use the averaged weights."""

    def __init__(self, decay: float):
        super().__init__(multi_avg_fn=ema_with_warmup(decay))


class LogEveryEpoch(L.Callback):
    """The logging interval capped at the epoch's steps, so that a run shorter than
    `trainer.log_every_n_steps` still logs its step metrics (train/loss) once an epoch."""

    def __init__(self, every_n_steps: int):
        self.every_n_steps = every_n_steps

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        steps = trainer.num_training_batches
        if self.every_n_steps > 0 and steps != float("inf"):
            trainer.log_every_n_steps = max(1, min(self.every_n_steps, int(steps)))
