"""Batches of pre-encoded titles: length buckets and per-batch padding.

Titles are short (mean ~18 KoBERT pieces, longest ~33 on YNAT), so padding each batch to its own
longest title, and grouping similar lengths into a batch, removes most of the padded work the
original notebook did. Buckets are re-drawn and shuffled every epoch, so training stays random.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from klue_tc.core.config import DataConfig
from klue_tc.tokenizers import EncodedTitles


class PaddedBatches(Dataset):
    """Indexed by a list of title indices (from a batch sampler); returns one padded batch."""

    def __init__(
        self,
        encoded: EncodedTitles,
        labels: Optional[np.ndarray],
        pad_id: int,
        pad_to: Optional[int] = None,
        pad_multiple: int = 1,
        soft_targets: Optional[np.ndarray] = None,
    ):
        self.ids, self.offsets, self.lengths = encoded.ids, encoded.offsets, encoded.lengths
        self.labels, self.pad_id, self.pad_to, self.pad_multiple = labels, pad_id, pad_to, pad_multiple
        self.soft_targets = soft_targets

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, indices) -> dict[str, torch.Tensor]:
        indices = np.asarray(indices)
        lengths = self.lengths[indices]
        width = self.pad_to or int(lengths.max())
        width += -width % self.pad_multiple
        positions = np.arange(width)
        real = positions < lengths[:, None]
        gather = np.minimum(self.offsets[indices][:, None] + positions, len(self.ids) - 1)
        input_ids = np.where(real, self.ids[gather], self.pad_id)
        batch = {
            "input_ids": torch.from_numpy(input_ids.astype(np.int64)),
            "index": torch.from_numpy(indices.astype(np.int64)),
        }
        if self.labels is not None:
            batch["labels"] = torch.from_numpy(self.labels[indices].astype(np.int64))
        if self.soft_targets is not None:
            batch["soft_targets"] = torch.from_numpy(self.soft_targets[indices].astype(np.float32))
        return batch


class BucketBatchSampler(Sampler[list[int]]):
    """Shuffle, sort by length within pools of `multiplier` batches, cut, shuffle the batches."""

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        bucketing: bool = True,
        multiplier: int = 50,
        shard: tuple[int, int] = (0, 1),
    ):
        self.lengths, self.batch_size, self.shuffle = lengths, batch_size, shuffle
        self.bucketing, self.pool = bucketing, batch_size * multiplier
        self.seed, self.epoch = seed, 0
        self.resume_epoch, self.resume_after = -1, 0  # an interrupted epoch goes on after this many batches
        self.rank, self.world = shard

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def _share(self, batch: list[int]) -> list[int]:
        """This rank's part of a batch when a fit runs on several devices: every rank draws the
        same batches and takes every world-th title, so the global batch, the steps per epoch and
        the schedule stay those of one device. A part left empty (a last batch smaller than the
        world) repeats the batch's last title in training, where every rank must take each step."""
        part = batch[self.rank :: self.world]
        return part or ([batch[-1]] if self.shuffle else [])

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this before every epoch, so a resumed fold shuffles its next epoch as an
        uninterrupted one would (counting iterations alone would start again at the first order)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        # A generator: the order is drawn at the first batch, after set_epoch (Lightning creates
        # the first epoch's iterator of a fit, and so of a resumed one, before it sets the epoch).
        rng = np.random.default_rng(self.seed + self.epoch)
        self.epoch += 1  # the next order without set_epoch, outside Lightning
        order = rng.permutation(len(self.lengths)) if self.shuffle else np.arange(len(self.lengths))
        if self.bucketing:
            if self.shuffle:
                pools = [order[i : i + self.pool] for i in range(0, len(order), self.pool)]
                order = np.concatenate([p[np.argsort(self.lengths[p], kind="stable")] for p in pools])
            else:  # evaluation: one global sort gives the least padding
                order = order[np.argsort(self.lengths[order], kind="stable")]
        batches = [order[i : i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]
        if self.shuffle and self.bucketing:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.epoch - 1 == self.resume_epoch:  # the same order, less the batches trained before the stop
            batches, self.resume_epoch = batches[self.resume_after :], -1
        if self.world > 1:
            # Validation's ranks may score different counts of batches: only training steps together.
            batches = [part for part in map(self._share, batches) if part]
        yield from batches


@dataclass
class EncodedSplit:
    encoded: EncodedTitles
    labels: Optional[np.ndarray]
    # Subword regularization: epoch -> that epoch's sampled encoding of the same titles.
    resample: Optional[Callable[[int], EncodedTitles]] = None
    # Distillation: the teacher's probabilities for these titles (titles, classes), by row.
    soft_targets: Optional[np.ndarray] = None


def make_loader(
    split: EncodedSplit,
    cfg: DataConfig,
    pad_id: int,
    train: bool,
    seed: int = 0,
    pad_to: Optional[int] = None,
    resume_at: tuple[int, int] = (-1, 0),
    shard: tuple[int, int] = (0, 1),
) -> DataLoader:
    sampler = BucketBatchSampler(
        split.encoded.lengths,
        cfg.batch_size if train else cfg.eval_batch_size,
        shuffle=train,
        seed=seed,
        bucketing=cfg.bucketing,
        multiplier=cfg.bucket_size_multiplier,
        shard=shard,
    )
    sampler.resume_epoch, sampler.resume_after = resume_at
    dataset = PaddedBatches(
        split.encoded, split.labels, pad_id, None if cfg.bucketing else pad_to, cfg.pad_multiple, split.soft_targets
    )
    return DataLoader(
        dataset,
        sampler=sampler,
        batch_size=None,
        num_workers=cfg.num_workers,
        persistent_workers=cfg.num_workers > 0,
        pin_memory=torch.cuda.is_available(),
    )


class FoldDataModule(L.LightningDataModule):
    """One fold's titles, already encoded by that fold's tokenizer: those it trains on, the inner
    split that chooses its epoch, and the held-out fold it is scored on."""

    def __init__(
        self, train: EncodedSplit, inner: EncodedSplit, val: EncodedSplit, cfg: DataConfig, pad_id: int, seed: int
    ):
        super().__init__()
        self.train, self.inner, self.val, self.cfg, self.pad_id, self.seed = train, inner, val, cfg, pad_id, seed
        # The notebook's path pads everything to the longest training title.
        self.pad_to = int(train.encoded.lengths.max())
        self.resume_at = (-1, 0)  # (epoch, batches done) of an epoch stopped part-way

    def state_dict(self) -> dict:
        """Saved in the fold's resumable checkpoint: how far the epoch under way has come."""
        if self.trainer is None:
            return {}
        done = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"epoch": self.trainer.current_epoch, "batches_done": done}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict:
            self.resume_at = (state_dict["epoch"], state_dict["batches_done"])

    @property
    def shard(self) -> tuple[int, int]:
        """(this rank, ranks): each rank of a multi-device fit loads its own part of every batch."""
        return (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        if self.train.resample is None:
            return make_loader(
                self.train,
                self.cfg,
                self.pad_id,
                train=True,
                seed=self.seed,
                pad_to=self.pad_to,
                resume_at=self.resume_at,
                shard=self.shard,
            )
        # The trainer asks for this loader every epoch (see make_trainer); each gets a fresh
        # sampled segmentation, and a fresh sampler whose shuffle Lightning sets by epoch.
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        split = EncodedSplit(self.train.resample(epoch), self.train.labels, soft_targets=self.train.soft_targets)
        return make_loader(
            split,
            self.cfg,
            self.pad_id,
            train=True,
            seed=self.seed,
            pad_to=int(split.encoded.lengths.max()),
            resume_at=self.resume_at,
            shard=self.shard,
        )

    def val_dataloader(self) -> list[DataLoader]:
        # In this order: TopicClassifierModule.validation_step names loader 0 inner/, loader 1 val/.
        splits = (self.inner, self.val)
        return [
            make_loader(split, self.cfg, self.pad_id, train=False, pad_to=self.pad_to, shard=self.shard)
            for split in splits
        ]
