"""The wide path's inputs (klue_tc/models/wide.py): each title's binarised character n-grams as
feature ids, carried in its batch beside its token ids.

A fold's n-gram vocabulary is NB-SVM's, fitted on the titles it trains on (klue_tc/training/wide.py);
`NgramFeatures` holds it with what starts the wide path. Batches are cut by the same samplers as the
token batches (klue_tc/data/batches.py), so a title's n-grams always travel with its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch
from scipy import sparse
from torch.utils.data import DataLoader, Dataset

from klue_tc.data.batches import EncodedSplit, FoldDataModule, PaddedBatches

NGRAM_IDS, NGRAM_OFFSETS = "ngram_ids", "ngram_offsets"  # a batch's n-grams: nn.EmbeddingBag's input and offsets


@dataclass(frozen=True)
class NgramRows:
    """Each title's n-gram ids, one row a title (a CSR matrix's row pointers and column ids)."""

    indptr: np.ndarray  # int64, titles + 1
    indices: np.ndarray  # int64

    @classmethod
    def of(cls, matrix: Any) -> NgramRows:
        """The rows of a (titles, features) count matrix: a feature a title holds at all is one id."""
        matrix = sparse.csr_matrix(matrix)
        matrix.eliminate_zeros()
        matrix.sort_indices()
        return cls(matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64))

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def bags(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The titles `rows`' ids, one after another, and where each title's begin."""
        starts, ends = self.indptr[rows], self.indptr[np.asarray(rows) + 1]
        ids = np.concatenate([self.indices[s:e] for s, e in zip(starts, ends)]) if len(starts) else np.zeros(0)
        offsets = np.concatenate([[0], np.cumsum(ends - starts)[:-1]])
        return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(offsets.astype(np.int64))


@dataclass
class NgramFeatures:
    """A fold's n-grams: NB-SVM's vectorizer with the vocabulary of the titles it trains on, each
    class's naive-Bayes log-count ratio r over that vocabulary, and the fitted NB-SVM that starts the
    wide path (its interpolated SVM weights w' and intercepts: scores x . (w' * r) + b), and the
    temperature its scores start divided by in the path."""

    vectorizer: Any  # a CountVectorizer with its vocabulary fixed
    ratios: np.ndarray  # (classes, features)
    svm_coef: np.ndarray  # (classes, features)
    intercept: np.ndarray  # (classes,)
    setting: list  # NB-SVM's (C, beta)
    inner_f1: Optional[float] = None  # the NB-SVM's macro-F1 on the inner split that chose the setting
    temperature: float = 1.0  # the wide path starts with the scores x . (w' * r) + b divided by it

    @property
    def size(self) -> int:
        return self.ratios.shape[1]

    def rows(self, texts: Sequence[str]) -> NgramRows:
        return NgramRows.of(self.vectorizer.transform(list(texts)))

    def decision_function(self, texts: Sequence[str]) -> np.ndarray:
        """The starting NB-SVM's class scores (titles, classes), as NBSVM.decision_function gives them."""
        features = sparse.csr_matrix(self.vectorizer.transform(list(texts)), dtype=np.float64)
        features.data = (features.data > 0).astype(np.float64)
        return np.asarray(features @ (self.svm_coef * self.ratios).T) + self.intercept


class NgramBatches(Dataset):
    """A batch of padded token ids (PaddedBatches) with its titles' n-grams."""

    def __init__(self, batches: PaddedBatches, rows: NgramRows):
        if len(rows) != len(batches):
            raise ValueError(f"{len(rows)} titles' n-grams for {len(batches)} titles")
        self.batches, self.rows = batches, rows

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, indices) -> dict[str, torch.Tensor]:
        batch = self.batches[indices]
        batch[NGRAM_IDS], batch[NGRAM_OFFSETS] = self.rows.bags(np.asarray(indices))
        return batch


def with_ngrams(loader: DataLoader, rows: NgramRows) -> DataLoader:
    """`loader` (make_loader's) whose batches also hold their titles' n-grams: the same sampler, so
    the same batches in the same order, an interrupted epoch's rest included."""
    return DataLoader(
        NgramBatches(loader.dataset, rows),
        sampler=loader.sampler,
        batch_size=None,
        num_workers=loader.num_workers,
        persistent_workers=loader.persistent_workers,
        pin_memory=loader.pin_memory,
    )


@dataclass(frozen=True)
class FoldNgrams:
    """The n-grams of a fold's three splits, in the order of their titles."""

    train: NgramRows
    inner: NgramRows
    val: NgramRows


class WideFoldDataModule(FoldDataModule):
    """FoldDataModule whose batches also carry each title's n-grams."""

    def __init__(
        self,
        train: EncodedSplit,
        inner: EncodedSplit,
        val: EncodedSplit,
        cfg,
        pad_id: int,
        seed: int,
        ngrams: FoldNgrams,
    ):
        super().__init__(train, inner, val, cfg, pad_id, seed)
        self.ngrams = ngrams

    def train_dataloader(self) -> DataLoader:
        return with_ngrams(super().train_dataloader(), self.ngrams.train)

    def val_dataloader(self) -> list[DataLoader]:
        inner, val = super().val_dataloader()
        return [with_ngrams(inner, self.ngrams.inner), with_ngrams(val, self.ngrams.val)]
