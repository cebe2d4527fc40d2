"""torch's random generators kept in a resumable checkpoint, for fine-tuning and pretraining alike."""

from __future__ import annotations

import lightning as L
import torch


class RandomState(L.Callback):
    """torch's random generators in the fold's resumable checkpoint, restored on resume, so that a
    resumed fold draws the masks and dropout an uninterrupted one would have drawn. (Training
    draws nothing from numpy's or Python's global generators: the sampler has its own, seeded by
    epoch. Tensors only, so the checkpoint still loads with torch.load's weights_only.) A state
    saved part-way through an epoch is restored as its next batch starts: the uninterrupted fold
    drew nothing in between, while the resumed one draws a DataLoader seed as it starts."""

    def __init__(self):
        self._in_epoch = False
        self._pending: dict | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._in_epoch = True
        if self._pending is not None:
            self._restore(self._pending)
            self._pending = None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._in_epoch = False

    def state_dict(self) -> dict:
        return {
            "cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "mid_epoch": torch.tensor(self._in_epoch),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if bool(state_dict.get("mid_epoch", False)):
            self._pending = state_dict
        else:
            self._restore(state_dict)

    @staticmethod
    def _restore(state_dict: dict) -> None:
        torch.set_rng_state(state_dict["cpu"])
        if state_dict["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])
