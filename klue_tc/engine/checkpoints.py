"""A fold's checkpoints: the resumable training state while it trains, the slim best weights after.
klue_tc reads each as tensors and plain values only (torch.load's weights_only), so none runs code."""

from __future__ import annotations

import io
import logging
import pickle
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from klue_tc.core import interrupts
from klue_tc.core.checksums import require_sidecar_checksum, sidecar, write_with_sidecar
from klue_tc.core.errors import DamagedFileError
from klue_tc.core.files import atomic_write_bytes
from klue_tc.core.pickles import refusal

log = logging.getLogger(__name__)

RESUME_CHECKPOINT_EVERY_S = 60.0  # the least time between two writes of a fold's resumable state


def save_weights_only(source: Path, target: Path) -> None:
    """Write to `target` what loading the model needs from the checkpoint `source` (the EMA's full
    checkpoints also hold the optimiser state and the un-averaged weights: 4x the size, over
    hundreds of jobs)."""
    require_sidecar_checksum(source)
    full = torch.load(source, map_location="cpu", weights_only=True)
    slim = {
        k: full[k]
        for k in ("state_dict", "hyper_parameters", "pytorch-lightning_version", "epoch", "global_step")
        if k in full
    }
    save_atomically(slim, target)


def load_weights_only(path: Path, map_location: Any = "cpu", folder: Optional[Path] = None) -> dict:
    """The checkpoint at `path` as tensors and plain values only; one that holds other objects
    (whose loading could run code) is a PickleRefused naming it and the conversion command for
    `folder`, and is not loaded."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights only" not in str(err).lower():  # a damaged file, not a refused object
            raise
        raise refusal(Path(path), folder, "a torch file holding objects beyond tensors and plain values") from None


def save_atomically(checkpoint: dict, path: Path, checksum: bool = False) -> None:
    """Serialised in memory first, so that its size is known and a full disk is an OSError (not
    torch's RuntimeError), then written beside `path` and renamed over it: a later run never
    reads a checkpoint cut short. With `checksum`, its SHA-256 beside it (a later run resumes from
    it only where it matches: torch reads a changed byte without a word)."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    data = buffer.getbuffer().tobytes()
    if checksum:
        write_with_sidecar(Path(path), data, suffix=".ckpt.tmp")
    else:
        atomic_write_bytes(Path(path), data, suffix=".ckpt.tmp")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writes (the resumable state, the best weights) made atomic: Lightning's
    own truncates the file then writes it, so a full disk leaves half a checkpoint in its place.
    Each gets its checksum beside it, checked when Lightning loads it again."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError(f"storage_options are not supported by {type(self).__name__}")
        save_atomically(checkpoint, Path(path), checksum=True)

    def load_checkpoint(self, path, *args, **kwargs) -> dict[str, Any]:
        require_sidecar_checksum(Path(path))
        return super().load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path) -> None:
        super().remove_checkpoint(path)
        sidecar(Path(path)).unlink(missing_ok=True)


def resume_point(fold: int, state_dir: Path, resume: bool) -> Optional[Path]:
    """The latest checkpoint of this fold's interrupted training (a finished epoch's, or the step's
    where a signal stopped it), if it left a readable one and resuming is on; otherwise the fold
    starts from a clean state folder."""
    last = state_dir / "last.ckpt"
    if resume and last.is_file():
        try:  # a file cut short by a kill lacks the zip directory at its end, so this load fails;
            # mmap maps the tensors rather than reading them (the file is 50 MB with the EMA)
            for checkpoint in sorted(state_dir.glob("*.ckpt")):  # the best so far is resumed with it
                require_sidecar_checksum(checkpoint)
            saved = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
            position = saved.get("FoldDataModule", {})
            if bool(saved.get("callbacks", {}).get("RandomState", {}).get("mid_epoch", False)):
                log.info(
                    "fold %d: resuming epoch %d after its step %d, from %s",
                    fold,
                    saved["epoch"] + 1,
                    position.get("batches_done", 0),
                    last,
                )
            else:
                log.info("fold %d: resuming after epoch %d, from %s", fold, saved["epoch"] + 1, last)
            return last
        except DamagedFileError as err:
            log.warning("fold %d: %s; training the fold from the start", fold, err)
        except Exception as err:  # killed while it was written
            log.warning(
                "fold %d: %s is unreadable (%s); training the fold from the start", fold, last, type(err).__name__
            )
    shutil.rmtree(state_dir, ignore_errors=True)
    return None


class ResumeCheckpoint(ModelCheckpoint):
    """The fold's full training state (`last.ckpt`: weights, optimiser, schedule, EMA, early
    stopping, the best so far, random generators, the batches done in the epoch under way),
    written when an epoch has ended, after its validation, so that a resumed fold starts the next
    epoch. At most once per `min_interval_s`: the write takes about 0.2 s (50 MB with the EMA),
    nothing beside a CPU epoch of minutes but several per cent of a GPU epoch of seconds.

    A stop signal (klue_tc/core/interrupts.py) writes it at the next step boundary instead, and stops
    the fold there with `JobInterrupted`; the resumed fold goes on from the next batch."""

    def __init__(self, dirpath: Path, min_interval_s: float, fold: int = 0):
        super().__init__(
            dirpath=str(dirpath), filename="last", save_on_train_epoch_end=True, enable_version_counter=False
        )
        self.min_interval_s, self.fold = min_interval_s, fold
        self._last_write = time.monotonic()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        # Lightning's fit puts its own SIGTERM handler first, which ends the fit with exit status 0.
        interrupts.install()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args, **kwargs) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        # The epoch's last batch: its validation comes first, then the epoch-end write below.
        if interrupts.requested() is not None and done < trainer.num_training_batches:
            self._stop(trainer, f"step {done} of {trainer.num_training_batches}")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the fit's last epoch (or early stopping's) the fold is done: it is recorded, then the job stops.
        last_epoch = trainer.should_stop or trainer.current_epoch + 1 >= trainer.max_epochs
        if interrupts.requested() is not None and not last_epoch:
            self._stop(trainer, "its end")
        # Rank 0's clock decides for every rank of a multi-device fit: a save waits for all of them.
        if trainer.strategy.broadcast(time.monotonic() - self._last_write >= self.min_interval_s):
            super().on_train_epoch_end(trainer, pl_module)
            self._last_write = time.monotonic()

    def _stop(self, trainer: L.Trainer, step: str) -> None:
        path = Path(self.dirpath) / "last.ckpt"
        trainer.save_checkpoint(path)  # atomic, with its checksum: the trainer writes through AtomicCheckpointIO
        raise interrupts.JobInterrupted(
            interrupts.requested(),
            f"in fold {self.fold}, epoch {trainer.current_epoch + 1}, at {step}: its training state is saved in {path}",
        )
