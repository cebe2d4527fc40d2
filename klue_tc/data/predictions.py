"""Predictions by id, as a CSV: `id,label,<one probability column per class>`, one row per title in
its file's order, `label` the class name, the probability columns named by the classes in the
model's label order. `python -m klue_tc.predict RUN --file titles.tsv` writes it for a table with an
`id` column, and the ensemble stage's `--blind FILE` for each model it predicts blind titles with
(docs/ensembles.md)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Sequence, TextIO

import numpy as np
import pandas as pd

from klue_tc.core.files import atomic_write_text

ID, LABEL = "id", "label"
# Written to 8 decimals: a row's written probabilities sum to 1 within 4e-8 (7 classes).
DECIMALS = 8


def written_probabilities(probs: np.ndarray) -> np.ndarray:
    """Each row normalised (float64) and rounded as it is written; its label is its arg-max."""
    probs = np.asarray(probs, dtype=np.float64)
    return np.round(probs / probs.sum(axis=1, keepdims=True), DECIMALS)


def write_predictions(out: TextIO, ids: Sequence[str], probs: np.ndarray, label_names: Sequence[str]) -> None:
    """The CSV into `out`: a header, then one row per id, its label the column of largest probability."""
    if len(ids) != len(probs) or probs.shape[1] != len(label_names):
        raise ValueError(f"{len(ids)} ids, {probs.shape} probabilities, {len(label_names)} class names")
    probs = written_probabilities(probs)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([ID, LABEL, *label_names])
    for name, row in zip(ids, probs):
        writer.writerow([name, label_names[int(row.argmax())], *(f"{p:.{DECIMALS}f}" for p in row)])


def save_predictions(path: Path, ids: Sequence[str], probs: np.ndarray, label_names: Sequence[str]) -> Path:
    """The CSV as a file (written whole or not at all)."""
    out = io.StringIO()
    write_predictions(out, ids, probs, label_names)
    atomic_write_text(Path(path), out.getvalue())
    return Path(path)


def read_predictions(path: Path) -> pd.DataFrame:
    """A predictions CSV, its ids kept as text."""
    return pd.read_csv(path, dtype={ID: str, LABEL: str}, keep_default_na=False)
