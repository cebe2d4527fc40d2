"""A fold's checkpoints: the resumable training state while it trains, the slim best weights after."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Optional

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from klue_tc.files import atomic_write

log = logging.getLogger(__name__)

RESUME_CHECKPOINT_EVERY_S = 60.0  # the least time between two writes of a fold's resumable state


def save_weights_only(source: Path, target: Path) -> None:
    """Write to `target` what loading the model needs from the checkpoint `source` (the EMA's full
    checkpoints also hold the optimiser state and the un-averaged weights: 4x the size, over
    hundreds of jobs)."""
    full = torch.load(source, map_location="cpu", weights_only=False)
    slim = {
        k: full[k]
        for k in ("state_dict", "hyper_parameters", "pytorch-lightning_version", "epoch", "global_step")
        if k in full
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda tmp: torch.save(slim, tmp))


def resume_point(fold: int, state_dir: Path, resume: bool) -> Optional[Path]:
    """The latest finished epoch's checkpoint of this fold's interrupted training, if it left a
    readable one and resuming is on; otherwise the fold starts from a clean state folder."""
    last = state_dir / "last.ckpt"
    if resume and last.is_file():
        try:  # a file cut short by a kill lacks the zip directory at its end, so this load fails;
            # mmap maps the tensors rather than reading them (the file is 50 MB with the EMA)
            epoch = torch.load(last, map_location="cpu", weights_only=False, mmap=True)["epoch"]
            log.info("fold %d: resuming after epoch %d, from %s", fold, epoch + 1, last)
            return last
        except Exception as err:  # killed while it was written
            log.warning(
                "fold %d: %s is unreadable (%s); training the fold from the start", fold, last, type(err).__name__
            )
    shutil.rmtree(state_dir, ignore_errors=True)
    return None


class ResumeCheckpoint(ModelCheckpoint):
    """The fold's full training state (`last.ckpt`: weights, optimiser, schedule, EMA, early
    stopping, the best so far), written when an epoch has ended, after its validation, so that a
    resumed fold starts the next epoch. At most once per `min_interval_s`: the write takes about
    0.2 s (50 MB with the EMA), nothing beside a CPU epoch of minutes but several per cent of a
    GPU epoch of seconds; a kill then loses at most that long plus the epoch under way."""

    def __init__(self, dirpath: Path, min_interval_s: float):
        super().__init__(
            dirpath=str(dirpath), filename="last", save_on_train_epoch_end=True, enable_version_counter=False
        )
        self.min_interval_s = min_interval_s
        self._last_write = time.monotonic()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Rank 0's clock decides for every rank of a multi-device fit: a save waits for all of them.
        if trainer.strategy.broadcast(time.monotonic() - self._last_write >= self.min_interval_s):
            super().on_train_epoch_end(trainer, pl_module)
            self._last_write = time.monotonic()
