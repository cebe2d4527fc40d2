"""A teacher's soft labels: its class probabilities for each training title, keyed by the title's
normalised text, so that a job on the same titles (all of them, a subsample, another order) finds
each of its titles' targets. The ensemble stage writes them (each title's out-of-fold ensemble
probabilities: no title's target comes from a model that trained on it); `distill.teacher` names
the file. Kept as .npz (no pickles) with its SHA-256 beside it (klue_tc/core/checksums.py)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from klue_tc.core.checksums import require_sidecar_checksum, sha256_of, write_with_sidecar
from klue_tc.core.errors import ConfigError, DamagedFileError
from klue_tc.tokenizers.normalisation import normalise_title

SOFT_LABELS_FILE = "soft-labels.npz"  # the ensemble stage's, beside ensemble.md


@dataclass(frozen=True)
class SoftLabels:
    texts: list[str]  # the titles, normalised
    probs: np.ndarray  # (titles, classes) float32, rows summing to 1
    label_names: tuple[str, ...]  # the classes, in the columns' order

    def save(self, path: Path) -> Path:
        buffer = io.BytesIO()
        np.savez_compressed(
            buffer,
            texts=np.array(self.texts, dtype=str),
            probs=self.probs.astype(np.float32),
            label_names=np.array(self.label_names, dtype=str),
        )
        write_with_sidecar(Path(path), buffer.getvalue())
        return Path(path)

    @classmethod
    def read(cls, path: str | Path) -> SoftLabels:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"distill.teacher: {path}: file not found (the ensemble stage writes {SOFT_LABELS_FILE})")
        require_sidecar_checksum(path)
        try:
            with np.load(path, allow_pickle=False) as stored:
                texts, probs, names = stored["texts"], stored["probs"], stored["label_names"]
        except (OSError, ValueError, KeyError) as err:
            raise DamagedFileError(f"{path}: not a soft-label file ({type(err).__name__}: {err})") from None
        if probs.ndim != 2 or len(probs) != len(texts) or probs.shape[1] != len(names):
            raise DamagedFileError(f"{path}: its probabilities do not match its titles and classes")
        return cls([str(t) for t in texts], probs.astype(np.float32), tuple(str(n) for n in names))

    def for_titles(self, texts: Sequence[str], label_names: Sequence[str], source: str) -> np.ndarray:
        """(titles, classes): each title's soft label, found by its normalised text (a text the
        teacher saw more than once gets the mean of its rows)."""
        if tuple(label_names) != self.label_names:
            raise ConfigError(
                f"distill.teacher: {source}: its classes ({', '.join(self.label_names)}) are not the "
                f"training titles' ({', '.join(label_names)})"
            )
        sums: dict[str, np.ndarray] = {}
        counts: dict[str, int] = {}
        for text, row in zip(self.texts, self.probs):
            key = normalise_title(text)
            sums[key] = sums.get(key, 0.0) + row
            counts[key] = counts.get(key, 0) + 1
        keys = [normalise_title(text) for text in texts]
        missing = [text for text, key in zip(texts, keys) if key not in sums]
        if missing:
            raise ConfigError(
                f"distill.teacher: {source} has no soft label for {len(missing)} of the {len(texts)} training "
                f"titles (the first: {missing[0]!r}): the teacher was made from other titles"
            )
        return np.stack([sums[key] / counts[key] for key in keys]).astype(np.float32)


@dataclass(frozen=True)
class TeacherTargets:
    """A job's soft labels: one row per training title, and the file's SHA-256 (in the results key)."""

    probs: np.ndarray
    digest: str


def teacher_targets(path: str | Path, texts: Sequence[str], label_names: Sequence[str]) -> TeacherTargets:
    path = Path(path).expanduser()
    return TeacherTargets(SoftLabels.read(path).for_titles(texts, label_names, str(path)), sha256_of(path))
