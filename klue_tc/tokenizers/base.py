"""The tokenizer interface, the framing every tokenizer shares, and encoded titles as flat arrays."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from klue_tc.core.checksums import checked_json, require_checksum, sha256_of, with_checksum
from klue_tc.core.config import TokenizerConfig, keyed_settings
from klue_tc.core.files import atomic_write_text
from klue_tc.core.registry import TOKENIZERS
from klue_tc.tokenizers.normalisation import normalise_title

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
META_FILE = "tokenizer.json"


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


class Tokenizer(ABC):
    kind: str
    specials: SpecialIds
    max_length: int

    @classmethod
    @abstractmethod
    def fit(cls, cfg: TokenizerConfig, train_texts: Sequence[str]) -> Tokenizer:
        """The tokenizer for a fold, from its training titles (or a published model)."""

    @classmethod
    @abstractmethod
    def load(cls, directory: Path, meta: dict) -> Tokenizer: ...

    @classmethod
    def fit_settings(cls, cfg: TokenizerConfig, train_fingerprint: str) -> dict:
        """What the fitted tokenizer depends on: the cache key. By default every keyed setting
        and the training titles."""
        return {**keyed_settings(cfg), "data": train_fingerprint}

    @classmethod
    def content_identity(cls, cfg: TokenizerConfig) -> Optional[str]:
        """A hash of files the tokenizer reads that its settings do not name (a published model)."""
        return None

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def _piece_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each title's pieces, without framing."""

    @abstractmethod
    def _save_model(self, directory: Path) -> dict: ...

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self._frame(self._piece_ids(normalised(texts)))

    def encode_sampled(self, texts: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
        """`encode` with a sampled segmentation per title (subword regularization, Kudo 2018)."""
        raise NotImplementedError(f"{self.kind} has one segmentation per title; sampling needs SentencePiece")

    def _frame(self, pieces: list[list[int]]) -> list[list[int]]:
        body = self.max_length - 2
        cls, sep = self.specials.cls, self.specials.sep
        return [[cls, *ids[:body], sep] for ids in pieces]

    def save(self, directory: str | Path) -> Path:
        """The model's files, then META_FILE naming them with their checksums (and its own), which
        loading checks: a cached or stored tokenizer is read by every later run."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = self._save_model(directory)
        meta = {"kind": self.kind, "max_length": self.max_length, **files}
        meta["files_sha256"] = {name: sha256_of(directory / name) for name in files.values()}
        atomic_write_text(directory / META_FILE, json.dumps(with_checksum(meta), ensure_ascii=False, indent=1))
        return directory


def normalised(texts: Sequence[str]) -> list[str]:
    """Titles in the one Unicode form training read them in, whoever passes them (predict, evaluate)."""
    return [normalise_title(text) for text in texts]


def fit_tokenizer(cfg: TokenizerConfig, train_texts: Sequence[str]) -> Tokenizer:
    return TOKENIZERS[cfg.name].build.fit(cfg, normalised(train_texts))


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """The saved tokenizer; a DamagedFileError naming the file that does not match its checksum
    (tokenizers saved by older code have none)."""
    directory = Path(directory)
    meta = checked_json(directory / META_FILE)
    for name, expected in meta.get("files_sha256", {}).items():
        require_checksum(directory / name, expected, META_FILE)
    return TOKENIZERS[meta["kind"]].build.load(directory, meta)


@dataclass(frozen=True)
class EncodedTitles:
    """All titles' ids in one flat array: batches are cut from it without per-title objects."""

    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, len n + 1

    @classmethod
    def from_lists(cls, sequences: list[list[int]]) -> EncodedTitles:
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, indices: np.ndarray) -> EncodedTitles:
        """The titles at `indices`, as a new flat array (vectorised: no per-title Python)."""
        lengths = self.lengths[indices]
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shift = np.repeat(self.offsets[indices] - offsets[:-1], lengths)
        return EncodedTitles(self.ids[np.arange(offsets[-1]) + shift], offsets)
