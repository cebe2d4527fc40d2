"""A table of titles to predict, each named by its id (blind.tsv: `id`, `title`): read with the
training files' own parsing and normalisation, but outside the code that makes a model's numbers."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from klue_tc.core.errors import DataError
from klue_tc.data.titles import (
    TEXT_COLUMNS,
    _cut_long_titles,
    _decoded_file,
    _parse,
    _say_what_normalising_changes,
    _separator,
)
from klue_tc.tokenizers.normalisation import normalise_title

ID_COLUMN = "id"
TABLE_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl")


@dataclass(frozen=True)
class IdentifiedTitles:
    """Titles each named by the id its file gives it, in the file's order (blind.tsv: `id`, `title`)."""

    ids: list[str]
    texts: list[str]
    source: str

    def __len__(self) -> int:
        return len(self.texts)


def is_identified_table(path: str | Path) -> bool:
    """Whether `path` is a table (csv, tsv, json, jsonl; xz-compressed too) whose header names an
    `id` column: its titles are predicted by id. Any other file is one title a line."""
    path = Path(path).expanduser()
    typed = path.with_suffix("") if path.suffix == ".xz" else path
    if typed.suffix.lower() not in TABLE_SUFFIXES or not path.is_file():
        return False
    try:
        _, text, typed = _decoded_file(path)
        if typed.suffix.lower() in (".csv", ".tsv"):  # its header alone: the rows are checked as they are read
            text, sep = _separator(text, "," if typed.suffix.lower() == ".csv" else "\t")
            columns = next((row for row in csv.reader(io.StringIO(text, newline=""), delimiter=sep) if row), [])
        else:
            columns = list(_parse(typed, text, str(path))[0].columns)
    except (DataError, csv.Error):
        return False
    return ID_COLUMN in {normalise_title(str(c)) for c in columns}


def read_identified_file(path: str | Path) -> IdentifiedTitles:
    """A table of titles with an `id` column and a title column (csv, tsv, json or jsonl), every row
    kept in its order: each id must get a prediction, so an empty title or an id given twice is an
    error naming its row."""
    path, text, path_for_type = _decoded_file(path)
    frame, locations = _parse(path_for_type, text, str(path))
    source = str(path)
    if frame.empty:
        raise DataError(f"{source}: no data rows")
    frame = frame.rename(columns=lambda c: normalise_title(str(c)))
    where = (lambda row: locations[row]) if locations else (lambda row: f"row {row + 1}")
    wanted = {"id": (ID_COLUMN,), "title": TEXT_COLUMNS}
    found = {what: next((c for c in names if c in frame.columns), None) for what, names in wanted.items()}
    for what, column in found.items():
        if column is None:
            raise DataError(
                f"{source}: no {what} column (expected {' or '.join(wanted[what])}; "
                f"found {', '.join(map(str, frame.columns))})"
            )
    id_col, text_col = found["id"], found["title"]
    ids = frame[id_col].map(lambda v: "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip())
    no_id = np.flatnonzero(ids.eq("").to_numpy())
    if len(no_id):
        raise DataError(f"{source}: {where(no_id[0])}: empty id ({len(no_id)} row(s) have none)")
    repeated = np.flatnonzero(ids.duplicated().to_numpy())
    if len(repeated):
        row = repeated[0]
        raise DataError(f"{source}: {where(row)}: id {ids.iloc[row]!r} given twice ({len(repeated)} repeat(s))")
    raw = frame[text_col].map(lambda v: "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    _say_what_normalising_changes(raw, source, where)
    texts = raw.map(normalise_title)
    empty = np.flatnonzero(texts.eq("").to_numpy())
    if len(empty):
        row = empty[0]
        raise DataError(
            f"{source}: {where(row)}: id {ids.iloc[row]!r} has an empty title ({len(empty)} row(s) do): "
            "an empty title cannot be classified"
        )
    texts = _cut_long_titles(texts.reset_index(drop=True), source, where)
    return IdentifiedTitles(ids.tolist(), texts.tolist(), source)
