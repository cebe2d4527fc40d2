"""Read and validate labelled KLUE YNAT titles (local files or the Hugging Face hub); folds.

Every problem with an input file is reported as one `DataError` line naming the file and the
line (record, for a JSON list) or column; nothing is silently dropped or altered.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import io
import json
import logging
import lzma
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from klue_tc.config import DataConfig
from klue_tc.errors import DataError, ResourceError

log = logging.getLogger(__name__)

# Hugging Face `klue/klue` `ynat` label order.
LABEL_NAMES: tuple[str, ...] = ("IT과학", "경제", "사회", "생활문화", "세계", "스포츠", "정치")
NUM_CLASSES = len(LABEL_NAMES)
TEXT_COLUMNS = ("title", "text")
LABEL_COLUMNS = ("label", "topic_idx")


@dataclass(frozen=True)
class LabelledTitles:
    texts: list[str]
    labels: np.ndarray  # int64 class ids, LABEL_NAMES order
    source: str

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: np.ndarray) -> LabelledTitles:
        return LabelledTitles([self.texts[i] for i in indices], self.labels[indices], self.source)

    def fingerprint(self) -> str:
        """Content hash: caches are keyed on what the titles are, not where they came from."""
        digest = hashlib.sha1()
        for text in self.texts:
            digest.update(text.encode("utf-8"))
            digest.update(b"\n")
        digest.update(self.labels.astype(np.int64).tobytes())
        return digest.hexdigest()[:16]

    def class_counts(self) -> dict[str, int]:
        counts = np.bincount(self.labels, minlength=NUM_CLASSES)
        return {name: int(count) for name, count in zip(LABEL_NAMES, counts)}


def read_labelled_file(
    path: str | Path, title_column: str | None = None, label_column: str | None = None
) -> LabelledTitles:
    """KLUE json, jsonl, csv or tsv (or any of them xz-compressed) with a title and a label column
    (id 0-6 or Korean name); a UTF-8 BOM and Windows line ends are fine."""
    path, text, path_for_type = _decoded_file(path)
    frame, locations = _parse(path_for_type, text, str(path))
    return from_frame(
        frame, source=str(path), locations=locations, title_column=title_column, label_column=label_column
    )


def read_unlabelled_file(path: str | Path) -> list[str]:
    """Unlabelled titles, one a line (plain text, or xz-compressed), with the labelled files'
    checks; blank lines are skipped."""
    _, text, _ = _decoded_file(path)  # a file of blank lines only is reported as empty there
    return [line.strip() for line in text.splitlines() if line.strip()]


def _decoded_file(path: str | Path) -> tuple[Path, str, Path]:
    """The file's text, decompressed and decoded, and the path its type is read from."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise DataError(f"{path}: is a directory; pass the file inside it (e.g. {path}/train.tsv)")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    raw = path.read_bytes()
    if path.suffix == ".xz":
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as err:
            raise DataError(f"{path}: damaged xz file ({err})") from None
        path_for_type = path.with_suffix("")
    else:
        path_for_type = path
    if not raw.strip():
        raise DataError(f"{path}: file is empty")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: undecodable bytes (the file must be UTF-8)") from None
    return path, text, path_for_type


def _parse(typed_path: Path, text: str, name: str) -> tuple[pd.DataFrame, list[str]]:
    """The file's records, and where each one is in the file (for error messages)."""
    suffix, path = typed_path.suffix.lower(), name
    if suffix == ".jsonl":
        records, locations = [], []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DataError(f"{path}: line {number}: invalid JSON ({err.msg})") from None
                locations.append(f"line {number}")
        return pd.DataFrame.from_records(records), locations
    if suffix == ".json":
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: line {err.lineno}: invalid JSON ({err.msg})") from None
        if isinstance(payload, dict):  # {"data": [...]} wrappers
            payload = next((v for v in payload.values() if isinstance(v, list)), None)
        if not isinstance(payload, list):
            raise DataError(f"{path}: expected a JSON list of records (KLUE layout)")
        return pd.DataFrame.from_records(payload), [f"record {i}" for i in range(1, len(payload) + 1)]
    if suffix in (".csv", ".tsv", ".txt"):
        return _parse_delimited(path, text, "," if suffix == ".csv" else "\t")
    raise DataError(f"{path}: unknown file type {suffix!r}; use .json, .jsonl, .csv or .tsv")


def _parse_delimited(path: Path, text: str, sep: str) -> tuple[pd.DataFrame, list[str]]:
    """CSV/TSV with a header and quoting as Python's csv module writes it (the shared train.tsv
    quotes its one title that ends in a tab). Strict, so that a stray quote is an error naming
    its line instead of a title with its quotes silently removed (pandas' reader does that)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True)
    try:
        records = list(reader)
    except csv.Error:
        records = None
    # The usual file: every record on one line (blank lines are empty records) and all as wide as
    # the header. Anything else is read again, line by line, to name the line at fault.
    if records is None or reader.line_num != len(records) or any(len(r) != len(records[0]) for r in records if r):
        _raise_first_problem(path, text, sep)
    header = records[0]
    rows = [r for r in records[1:] if r]
    locations = [f"line {number}" for number, r in enumerate(records[1:], start=2) if r]
    return pd.DataFrame(rows, columns=header, dtype=str), locations


def _raise_first_problem(path: Path, text: str, sep: str) -> None:
    """The error for the first record of a delimited file that is not one line of the header's width."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True)
    separator_name = "tab" if sep == "\t" else "comma"
    last_line = 0
    try:
        header = next(reader)
        last_line = reader.line_num
        for row in reader:
            first_line, last_line = last_line + 1, reader.line_num
            if not row:  # a blank line
                continue
            if last_line != first_line:  # titles are one line: a newline inside one means an unclosed quote
                raise DataError(
                    f'{path}: line {first_line}: a quote (") opened here closes on line {last_line}; '
                    "a title with a quote in it must be quoted, its quotes doubled"
                )
            if len(row) != len(header):
                hint = (
                    f"a title that holds a {separator_name} must be quoted"
                    if len(row) > len(header)
                    else f"the fields must be separated by a {separator_name}"
                )
                raise DataError(
                    f"{path}: line {last_line}: {len(row)} field(s), expected {len(header)} "
                    f"({', '.join(header)}); {hint}"
                )
    except csv.Error as err:
        reason = str(err).replace("\t", "tab")  # "'\t' expected after '\"'" printed a raw tab
        raise DataError(
            f'{path}: line {last_line + 1}: bad quoting ({reason}); a title with a quote (") in it '
            "must be quoted, its quotes doubled"
        ) from None
    raise AssertionError(f"{path}: no problem found on the second reading")  # unreachable: a bug if seen


def from_frame(
    frame: pd.DataFrame,
    source: str,
    locations: list[str] | None = None,
    title_column: str | None = None,
    label_column: str | None = None,
) -> LabelledTitles:
    """Titles and label ids from a frame; `locations` names each row in error messages (default
    "row N"); the columns are the given ones, else the first of TEXT_COLUMNS and LABEL_COLUMNS."""
    if frame.empty:
        raise DataError(f"{source}: no data rows")
    frame = frame.rename(columns=lambda c: str(c).strip())  # "label " in a hand-made header
    where = (lambda row: locations[row]) if locations else (lambda row: f"row {row + 1}")
    text_col = _pick_column(
        frame, (title_column,) if title_column else TEXT_COLUMNS, source, "title", "data.title_column"
    )
    label_col = _pick_column(
        frame, (label_column,) if label_column else LABEL_COLUMNS, source, "label", "data.label_column"
    )
    texts = frame[text_col].map(lambda v: "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    empty = np.flatnonzero(texts.str.strip().eq("").to_numpy())
    if len(empty):
        raise DataError(f"{source}: {where(empty[0])}: empty title (column {text_col!r})")
    labels = frame[label_col].map(_label_id)
    unknown = np.flatnonzero(labels.isna().to_numpy())
    if len(unknown):
        row = unknown[0]
        value = frame[label_col].iloc[row]
        value = value.item() if isinstance(value, np.generic) else value  # 9, not np.int64(9)
        raise DataError(
            f"{source}: {where(row)}: unknown label {value!r} in column {label_col!r};"
            f" expected an id 0-{NUM_CLASSES - 1} or one of {', '.join(LABEL_NAMES)}"
        )
    return LabelledTitles(texts.str.strip().tolist(), labels.to_numpy(dtype=np.int64), source)


def _pick_column(frame: pd.DataFrame, candidates: tuple[str, ...], source: str, what: str, override: str) -> str:
    for name in candidates:
        if name in frame.columns:
            return name
    raise DataError(
        f"{source}: no {what} column (expected {' or '.join(candidates)}; found {', '.join(map(str, frame.columns))}); "
        f"name yours with {override}="
    )


_NAME_TO_ID = {name: i for i, name in enumerate(LABEL_NAMES)}


def _label_id(value) -> float:
    """Class id for an id (int or digit string) or a Korean label name; NaN when unknown."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return float(value) if 0 <= value < NUM_CLASSES else np.nan
    text = str(value).strip()
    if text in _NAME_TO_ID:
        return float(_NAME_TO_ID[text])
    if text.isdigit() and int(text) < NUM_CLASSES:
        return float(text)
    return np.nan


def load_hub_split(repo: str, config: str, split: str) -> LabelledTitles:
    """KLUE YNAT from the hub's parquet files, cached by huggingface_hub."""
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(repo_id=repo, repo_type="dataset", allow_patterns=[f"{config}/{split}-*"])
    except Exception as err:  # offline, DNS, auth: all end the same way for the user
        raise ResourceError(
            f"could not get {repo} ({config}/{split}) from the Hugging Face hub and no cached copy exists "
            f"({type(err).__name__}); to run offline pass data.path=/path/to/train.tsv "
            f"(and data.validation_path= for a validation file)"
        ) from None
    files = sorted(Path(local, config).glob(f"{split}-*.parquet"))
    if not files:
        raise ResourceError(f"{repo}: no {config}/{split} parquet files on the hub; pass data.path= instead")
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return from_frame(frame, source=f"hf://datasets/{repo}/{config}/{split}")


BUNDLED_TRAIN = Path(__file__).parent / "resources" / "ynat-v1.1-train.tsv.xz"
BUNDLED_TRAIN_SHA256 = "6230d4cfaf127306b21be363e4220c930f4e0a1bc657ae14361bdd596226873d"  # of the .tsv inside


def training_titles(cfg: DataConfig) -> LabelledTitles:
    """`data.path`, else KLUE YNAT train from the hub, else (offline, nothing cached) the copy
    bundled with klue_tc, with one line saying so."""
    if cfg.path:
        return read_labelled_file(cfg.path, cfg.title_column, cfg.label_column)
    try:
        return load_hub_split(cfg.hub_repo, cfg.hub_config, "train")
    except ResourceError as err:
        log.warning(
            "%s; using the KLUE YNAT v1.1 train split bundled with klue_tc (%s, CC BY-SA 4.0)",
            str(err).split(";")[0],
            BUNDLED_TRAIN.name,
        )
        return read_labelled_file(BUNDLED_TRAIN)


def validation_titles(cfg: DataConfig) -> LabelledTitles | None:
    """`data.validation_path`; with neither it nor `data.path` set, the hub's validation split
    (which has no bundled copy: offline, pass data.validation_path= to score one)."""
    if cfg.validation_path:
        return read_labelled_file(cfg.validation_path, cfg.title_column, cfg.label_column)
    if cfg.path is None:
        try:
            return load_hub_split(cfg.hub_repo, cfg.hub_config, "validation")
        except ResourceError as err:
            log.warning(
                "%s; no validation set is scored (pass data.validation_path= to score one)", str(err).split(";")[0]
            )
    return None


def stratified_subsample(data: LabelledTitles, limit: int | None, seed: int) -> LabelledTitles:
    if limit is None or limit >= len(data):
        return data
    from sklearn.model_selection import train_test_split  # here: scikit-learn is slow to import

    try:
        indices, _ = train_test_split(np.arange(len(data)), train_size=limit, stratify=data.labels, random_state=seed)
    except ValueError as err:  # fewer titles than classes, or a class with a single title
        raise DataError(f"{data.source}: data.limit={limit}: no stratified subsample of that size ({err})") from None
    return data.subset(np.sort(indices))


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept indices, held-out indices): a stratified `fraction` held out, in scikit-learn's order."""
    from sklearn.model_selection import train_test_split  # here: a bad override fails before this import

    return train_test_split(np.arange(len(labels)), test_size=fraction, stratify=labels, random_state=seed)


def load_splitters() -> None:
    """Import scikit-learn's splitters now (they are slow to import) rather than at the first split, so that a
    caller timing its imports apart from its work can count this one with them."""
    importlib.import_module("sklearn.model_selection")


def stratified_folds(labels: np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, validation indices) per fold; a fixed seed gives one assignment everywhere."""
    from sklearn.model_selection import StratifiedKFold  # here: a bad override fails before this import

    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    try:
        return [(np.sort(tr), np.sort(va)) for tr, va in splitter.split(np.zeros(len(labels)), labels)]
    except ValueError as err:  # more folds than titles, or than the titles of every class
        raise DataError(f"cv.folds={folds}: too many folds for {len(labels)} titles ({err})") from None
