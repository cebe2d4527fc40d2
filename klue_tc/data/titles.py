"""Read and validate labelled KLUE YNAT titles (local files or the Hugging Face hub); folds.

Every problem with an input file is reported as one `DataError` line naming the file and the
line (record, for a JSON list) or column. Titles are brought to one Unicode form (NFC) so that a
headline typed on any system gets the same tokens; rows with an empty title are dropped with one
line counting them, nothing else is dropped.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import importlib
import io
import json
import logging
import lzma
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from klue_tc.core.config import DataConfig
from klue_tc.core.errors import DataError, ResourceError
from klue_tc.tokenizers.normalisation import REMOVED_CATEGORIES, has_line_break, has_removed_characters, normalise_title

log = logging.getLogger(__name__)

# Hugging Face `klue/klue` `ynat` label order: the label set of KLUE YNAT data and of runs that name none.
LABEL_NAMES: tuple[str, ...] = ("IT과학", "경제", "사회", "생활문화", "세계", "스포츠", "정치")
NUM_CLASSES = len(LABEL_NAMES)
TEXT_COLUMNS = ("title", "text")
LABEL_COLUMNS = ("label", "topic_idx")
# Far beyond a headline (KLUE YNAT's longest is 44): a whole article pasted into the title cell.
# Cut there, under SentencePiece's 4,192-byte sentence limit, which would drop the title unsaid.
MAX_TITLE_CHARS = 1000


def has_letter_or_digit(text: str) -> bool:
    """False for a title of emoji, punctuation or symbols only: kept, but nothing in it names a topic."""
    return any(ch.isalnum() for ch in text)


_BOMS = (  # longest first: a UTF-32 LE mark begins with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode_text(raw: bytes, name: str) -> str:
    """A text file's bytes as text: UTF-8 (with or without a BOM), UTF-16/32 with a BOM, or the
    Korean Windows encoding (cp949, a superset of EUC-KR) when the bytes are clearly Korean in it,
    with one line saying so. Anything else is one `DataError` naming what was found and how to convert."""
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(codec)
            except UnicodeDecodeError as err:
                raise DataError(f"{name}: damaged {codec.upper()} text at byte {err.start}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        utf8_error = f"{name}: line {line}: undecodable bytes (the file must be UTF-8)"
    convert = f"convert it with: iconv -f {{}} -t utf-8 {name} > {Path(name).stem}.utf8{Path(name).suffix}"
    if b"\x00" in raw:  # text in UTF-8 or cp949 has no NUL; UTF-16's tabs and line ends do
        endian = "le" if raw[1::2].count(b"\x00") > raw[0::2].count(b"\x00") else "be"
        raise DataError(f"{name}: UTF-16{endian.upper()} without a BOM, not UTF-8; {convert.format(f'utf-16{endian}')}")
    try:
        text = raw.decode("cp949")
    except UnicodeDecodeError:
        raise DataError(f"{utf8_error}; if it is in a legacy encoding, {convert.format('ENCODING')}") from None
    non_ascii = [ch for ch in text if ord(ch) > 127]
    hangul = sum("\uac00" <= ch <= "\ud7a3" for ch in non_ascii)
    if hangul < 0.9 * len(non_ascii):  # decodable by chance (Latin-1, Shift-JIS): not Korean text
        raise DataError(f"{utf8_error}; if it is in a legacy encoding, {convert.format('ENCODING')}")
    log.warning("%s: not UTF-8; read as cp949 (EUC-KR, Korean Windows), whose Hangul it holds", name)
    return text


@dataclass(frozen=True)
class LabelledTitles:
    texts: list[str]
    labels: np.ndarray  # int64 class ids, in label_names order
    source: str
    label_names: tuple[str, ...] = LABEL_NAMES

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def subset(self, indices: np.ndarray) -> LabelledTitles:
        return LabelledTitles([self.texts[i] for i in indices], self.labels[indices], self.source, self.label_names)

    def fingerprint(self) -> str:
        """Content hash: caches are keyed on what the titles are, not where they came from."""
        digest = hashlib.sha1()
        for text in self.texts:
            digest.update(text.encode("utf-8"))
            digest.update(b"\n")
        digest.update(self.labels.astype(np.int64).tobytes())
        if (
            self.label_names != LABEL_NAMES
        ):  # YNAT's fingerprints (and the results keys built on them) stay as they were
            digest.update(json.dumps(self.label_names, ensure_ascii=False).encode("utf-8"))
        return digest.hexdigest()[:16]

    def class_counts(self) -> dict[str, int]:
        counts = np.bincount(self.labels, minlength=self.num_classes)
        return {name: int(count) for name, count in zip(self.label_names, counts)}


def read_labelled_file(
    path: str | Path,
    title_column: str | None = None,
    label_column: str | None = None,
    label_names: Sequence[str] | None = None,
) -> LabelledTitles:
    """KLUE json, jsonl, csv or tsv (or any of them xz-compressed) with a title and a label column
    (ids or names); a UTF-8 BOM and Windows line ends are fine. The label set is `label_names`
    when given, else read from the file (`infer_label_names`)."""
    path, text, path_for_type = _decoded_file(path)
    frame, locations = _parse(path_for_type, text, str(path))
    return from_frame(
        frame,
        source=str(path),
        locations=locations,
        title_column=title_column,
        label_column=label_column,
        label_names=label_names,
    )


def read_unlabelled_file(path: str | Path) -> list[str]:
    """Unlabelled titles, one a line (plain text, or xz-compressed), with the labelled files'
    checks; blank lines are skipped."""
    path, text, _ = _decoded_file(path)  # a file of blank lines only is reported as empty there
    numbered = [(number, normalise_title(line)) for number, line in enumerate(_lines(text), start=1)]
    numbered = [(number, title) for number, title in numbered if title]
    titles = _cut_long_titles(
        pd.Series([title for _, title in numbered], dtype=object), str(path), lambda i: f"line {numbered[i][0]}"
    )
    return titles.tolist()


def _lines(text: str) -> list[str]:
    """The file's lines as csv counts them (\\n, \\r\\n or \\r ends one; str.splitlines would also
    break at a U+2028 or U+0085 inside a title)."""
    return [line.rstrip("\r\n") for line in io.StringIO(text, newline="").readlines()]


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
    text = decode_text(raw, str(path))
    return path, text, path_for_type


def _parse(typed_path: Path, text: str, name: str) -> tuple[pd.DataFrame, list[str]]:
    """The file's records, and where each one is in the file (for error messages)."""
    suffix, path = typed_path.suffix.lower(), name
    if suffix == ".jsonl":
        records, locations = [], []
        for number, line in enumerate(_lines(text), start=1):
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
        text, sep = _separator(text, "," if suffix == ".csv" else "\t")
        return _parse_delimited(path, text, sep)
    raise DataError(f"{path}: unknown file type {suffix!r}; use .json, .jsonl, .csv or .tsv")


def _separator(text: str, usual: str) -> tuple[str, str]:
    """The file's field separator: Excel's `sep=;` first line names it (the line is then read as a
    blank one, so that lines keep their numbers); a header without the usual separator but with a
    semicolon or a tab (a spreadsheet in a comma-decimal locale, a TSV named .csv) uses that."""
    first, newline, rest = text.partition("\n")
    named = re.fullmatch(r"sep=(.)\r?", first)
    if named:
        return newline + rest, named.group(1)
    if usual not in first:
        for other in (";", "\t", ","):
            if other in first:
                return text, other
    return text, usual


def _parse_delimited(path: Path, text: str, sep: str) -> tuple[pd.DataFrame, list[str]]:
    """CSV/TSV with a header, read as RFC 4180 says and spreadsheets write it: a quoted field may
    hold the separator, doubled quotes and line breaks (the shared train.tsv quotes its one title
    that ends in a tab). Strict, so that a stray quote is an error naming its line instead of a title
    with its quotes silently removed (pandas' reader does that), or rows swallowed into one title."""
    if "\x00" in text:  # no text holds one; csv refuses the whole file over it
        first = text[: text.index("\x00")].count("\n") + 1
        log.warning("%s: %d NUL character(s) removed, first on line %d", path, text.count("\x00"), first)
        text = text.replace("\x00", "")
    lines = io.StringIO(text, newline="").readlines()  # as csv counts them: \n, \r\n or \r ends one
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))  # a pasted article is cut later, not refused
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True)
    separator = "tab" if sep == "\t" else "comma"
    header: list[str] | None = None
    rows, locations = [], []
    end = 0
    try:
        for row in reader:
            start, end = end + 1, reader.line_num
            if not row:  # a blank line
                continue
            if header is None:
                header = row
                continue
            if end > start:
                _check_spanning_record(path, lines, start, end, sep, len(header))
            if len(row) != len(header):
                raise DataError(_width_error(path, lines, row, header, start, end, separator))
            rows.append(row)
            locations.append(f"line {start}")
    except csv.Error as err:
        raise DataError(_quoting_error(path, lines, str(err), end + 1, reader.line_num, separator)) from None
    if header is None:
        raise DataError(f"{path}: file is empty")
    return pd.DataFrame(rows, columns=header, dtype=str), locations


def _check_spanning_record(path: Path, lines: list[str], start: int, end: int, sep: str, width: int) -> None:
    """A quoted field over lines start..end: a title with line breaks, unless a line inside it reads
    as a whole row (as wide as the header), which is a stray quote swallowing the rows up to the next one."""
    inside = range(start + 1, end)  # the lines wholly within the quoted field
    swallowed = [n for n in inside if len(lines[n - 1].rstrip("\r\n").split(sep)) == width]
    if swallowed:
        taken = f"line {start + 1} is" if end - start == 2 else f"lines {start + 1}-{end - 1} are"
        raise DataError(
            f'{path}: line {start}: a quote (") opened here closes on line {end}, so {taken} read as part of '
            'one title; a quote inside a title must be doubled and the title quoted ("a ""b"" c")'
        )


def _width_error(
    path: Path, lines: list[str], row: list[str], header: list[str], start: int, end: int, separator: str
) -> str:
    where = f"line {start}" if end == start else f"lines {start}-{end} (a quoted field over several lines)"
    if len(row) > len(header):
        hint = f"a title that holds a {separator} must be quoted"
    elif lines[end - 1].endswith("\r") and not lines[end - 1].endswith("\r\n") and not lines[0].endswith("\r"):
        hint = "a carriage return (\\r) inside the title ends its line early: remove it, or quote the title"
    else:
        hint = f"the fields must be separated by a {separator}"
    return f"{path}: {where}: {len(row)} field(s), expected {len(header)} ({', '.join(header)}); {hint}"


def _quoting_error(path: Path, lines: list[str], reason: str, start: int, at: int, separator: str) -> str:
    """The one line for csv's complaint about the record that begins on line `start`, found on line `at`."""
    quote_rule = 'a quote inside a title must be doubled and the title quoted ("a ""b"" c")'
    if "unexpected end of data" in reason:
        opened = next((n for n in range(start, len(lines) + 1) if '"' in lines[n - 1]), start)
        return f'{path}: line {opened}: a quote (") opened here is never closed (the file ends inside it); {quote_rule}'
    if "expected after" in reason:
        if at > start:
            return (
                f'{path}: line {start}: a quote (") opened here runs to line {at}, where text follows its closing '
                f"quote; {quote_rule}"
            )
        return (
            f'{path}: line {at}: bad quoting: text follows a closing quote (") where a {separator} or the end of '
            f"the line should be; {quote_rule}"
        )
    return f"{path}: line {at}: bad quoting ({reason.replace(chr(9), 'tab')}); {quote_rule}"


def from_frame(
    frame: pd.DataFrame,
    source: str,
    locations: list[str] | None = None,
    title_column: str | None = None,
    label_column: str | None = None,
    label_names: Sequence[str] | None = None,
) -> LabelledTitles:
    """Titles and label ids from a frame; `locations` names each row in error messages (default
    "row N"); the columns are the given ones, else the first of TEXT_COLUMNS and LABEL_COLUMNS;
    the label set is `label_names`, else the one the column holds (`infer_label_names`)."""
    if frame.empty:
        raise DataError(f"{source}: no data rows")
    frame = frame.rename(columns=lambda c: normalise_title(str(c)))  # "label " or a BOM in a hand-made header
    where = (lambda row: locations[row]) if locations else (lambda row: f"row {row + 1}")
    text_col = _pick_column(
        frame, (normalise_title(title_column),) if title_column else TEXT_COLUMNS, source, "title", "data.title_column"
    )
    label_col = _pick_column(
        frame, (normalise_title(label_column),) if label_column else LABEL_COLUMNS, source, "label", "data.label_column"
    )
    raw = frame[text_col].map(lambda v: "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    _say_what_normalising_changes(raw, source, where)
    texts = raw.map(normalise_title)
    empty = np.flatnonzero(texts.eq("").to_numpy())
    kept = np.flatnonzero(texts.ne("").to_numpy())  # row positions in the file of the rows kept
    if not len(kept):
        raise DataError(f"{source}: every title is empty (column {text_col!r})")
    if len(empty):  # nothing to classify or to learn from: the row goes, and the user hears how many
        log.warning(
            "%s: %d row(s) with an empty title (column %r) dropped, first at %s",
            source,
            len(empty),
            text_col,
            where(empty[0]),
        )
        frame, texts = frame.iloc[kept], texts.iloc[kept]
    texts = _cut_long_titles(texts, source, lambda row: where(kept[row]))
    symbols_only = [i for i, t in enumerate(texts) if not has_letter_or_digit(t)]
    if symbols_only:
        log.warning(
            "%s: %d title(s) hold no letter or digit (only emoji, punctuation or symbols), kept; first at %s",
            source,
            len(symbols_only),
            where(kept[symbols_only[0]]),
        )
    names = tuple(label_names) if label_names else infer_label_names(frame[label_col])
    name_to_id = {name: i for i, name in enumerate(names)}
    labels = frame[label_col].map(lambda value: _label_id(value, name_to_id))
    unknown = np.flatnonzero(labels.isna().to_numpy())
    if len(unknown):
        row = unknown[0]
        value = frame[label_col].iloc[row]
        value = value.item() if isinstance(value, np.generic) else value  # 9, not np.int64(9)
        raise DataError(
            f"{source}: {where(kept[row])}: unknown label {value!r} in column {label_col!r};"
            f" expected an id 0-{len(names) - 1} or one of {', '.join(names)}"
            + ("" if label_names else " (data.labels=[...] names a label set of your own)")
        )
    return LabelledTitles(texts.tolist(), labels.to_numpy(dtype=np.int64), source, names)


def _say_what_normalising_changes(raw: pd.Series, source: str, where) -> None:
    """One line each for the titles whose line breaks become spaces and those that lose control or
    invisible characters; nothing for the usual file (every title printable)."""
    unusual = [i for i, text in enumerate(raw) if not text.isprintable()]
    if not unusual:
        return
    breaks = [i for i in unusual if has_line_break(raw.iloc[i])]
    if breaks:
        log.warning(
            "%s: %d title(s) hold line breaks, kept on one line (each break made a space); first at %s",
            source,
            len(breaks),
            where(breaks[0]),
        )
    removed = [i for i in unusual if has_removed_characters(raw.iloc[i])]
    if removed:
        text = raw.iloc[removed[0]].strip()
        found = next(ch for ch in text if unicodedata.category(ch) in REMOVED_CATEGORIES and ch not in "\r\n")
        log.warning(
            "%s: %d title(s) hold tabs, control or invisible characters (U+%04X first), tabs made spaces and "
            "the rest removed; first at %s",
            source,
            len(removed),
            ord(found),
            where(removed[0]),
        )


def _cut_long_titles(texts: pd.Series, source: str, where) -> pd.Series:
    """Titles beyond MAX_TITLE_CHARS cut to it, said in one line."""
    long = np.flatnonzero(texts.str.len().to_numpy() > MAX_TITLE_CHARS)
    if not len(long):
        return texts
    log.warning(
        "%s: %d title(s) longer than %d characters (the longest %d) cut to their first %d; first at %s",
        source,
        len(long),
        MAX_TITLE_CHARS,
        int(texts.str.len().max()),
        MAX_TITLE_CHARS,
        where(long[0]),
    )
    return texts.map(lambda text: text[:MAX_TITLE_CHARS].rstrip())


def _pick_column(frame: pd.DataFrame, candidates: tuple[str, ...], source: str, what: str, override: str) -> str:
    for name in candidates:
        if name in frame.columns:
            return name
    raise DataError(
        f"{source}: no {what} column (expected {' or '.join(candidates)}; found {', '.join(map(str, frame.columns))}); "
        f"name yours with {override}="
    )


def _as_id(value) -> int | None:
    """An int id (an int, or a string of digits), else None."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    text = normalise_title(str(value))
    return int(text) if text.isascii() and text.isdigit() else None


def infer_label_names(column: pd.Series) -> tuple[str, ...]:
    """The label set a column holds: names alone, sorted, whatever they are, unless they hold all
    seven of YNAT's (YNAT data); ids alone that are every id 0..N-1 (and not YNAT's 0-6), named by
    their digits; anything else YNAT's seven, which then names the labels outside it (a typo in a
    YNAT file is an error, not an eighth class)."""
    # Missing and empty labels are left to the per-row check, which names their line.
    values = [v for v in column.unique() if v is not None and not (isinstance(v, float) and np.isnan(v))]
    values = [v for v in values if normalise_title(str(v))]
    ids = {_as_id(v) for v in values}
    names = {normalise_title(str(v)) for v in values if _as_id(v) is None}
    if names and ids == {None} and not set(LABEL_NAMES) <= names:
        return tuple(sorted(names))
    if not names and ids and ids == set(range(max(ids) + 1)) and len(ids) != NUM_CLASSES:
        return tuple(str(i) for i in range(max(ids) + 1))
    return LABEL_NAMES


def _label_id(value, name_to_id: dict[str, int]) -> float:
    """Class id for a label name (typed in any Unicode form), or for an id in range; NaN when unknown."""
    text = normalise_title(str(value))
    if text in name_to_id:
        return float(name_to_id[text])
    number = _as_id(value)
    if number is not None and 0 <= number < len(name_to_id):
        return float(number)
    return np.nan


def load_hub_split(repo: str, config: str, split: str, label_names: Sequence[str] = LABEL_NAMES) -> LabelledTitles:
    """KLUE YNAT from the hub's parquet files, cached by huggingface_hub (ids in YNAT's order)."""
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
    return from_frame(frame, source=f"hf://datasets/{repo}/{config}/{split}", label_names=label_names)


BUNDLED_TRAIN = Path(__file__).parents[1] / "resources" / "ynat-v1.1-train.tsv.xz"
BUNDLED_TRAIN_SHA256 = "6230d4cfaf127306b21be363e4220c930f4e0a1bc657ae14361bdd596226873d"  # of the .tsv inside


_said_once: set[str] = set()


def _warn_once(message: str, *args) -> None:
    """A warning a process gives once: a sweep's jobs in one process meet the same offline hub."""
    text = message % args
    if text not in _said_once:
        _said_once.add(text)
        log.warning(text)


def training_titles(cfg: DataConfig, announce_fallback: bool = True) -> LabelledTitles:
    """`data.path`, else KLUE YNAT train from the hub, else (offline, nothing cached) the copy
    bundled with klue_tc, with one line saying so (unless `announce_fallback` is false)."""
    if cfg.path:
        return read_labelled_file(cfg.path, cfg.title_column, cfg.label_column, cfg.labels)
    try:
        return load_hub_split(cfg.hub_repo, cfg.hub_config, "train", cfg.labels or LABEL_NAMES)
    except ResourceError as err:
        (_warn_once if announce_fallback else log.debug)(
            "%s; using the KLUE YNAT v1.1 train split bundled with klue_tc (%s, CC BY-SA 4.0)",
            str(err).split(";")[0],
            BUNDLED_TRAIN.name,
        )
        return read_labelled_file(BUNDLED_TRAIN, label_names=cfg.labels or LABEL_NAMES)


def validation_titles(cfg: DataConfig, label_names: Sequence[str] = LABEL_NAMES) -> LabelledTitles | None:
    """`data.validation_path`, its labels read as the training titles' `label_names`; with neither
    it nor `data.path` set, the hub's validation split (which has no bundled copy: offline, pass
    data.validation_path= to score one)."""
    if cfg.validation_path:
        return read_labelled_file(cfg.validation_path, cfg.title_column, cfg.label_column, label_names)
    if cfg.path is None:
        try:
            return load_hub_split(cfg.hub_repo, cfg.hub_config, "validation", label_names)
        except ResourceError as err:
            _warn_once(
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


def inner_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit positions, inner positions) into a training fold's `labels`: of every class `fraction` of
    its titles (rounded, at least one, never all) held out so that the epoch is chosen on titles no
    score is reported on. scikit-learn's stratified split may leave a small class out of it."""
    rng = np.random.default_rng(seed)
    inner = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < 2:
            raise DataError(
                f"cv.inner_fraction={fraction}: class {LABEL_NAMES[label] if label < len(LABEL_NAMES) else label} "
                f"has {len(members)} title in a training fold, and the inner split needs one besides it"
            )
        take = min(max(1, round(fraction * len(members))), len(members) - 1)
        inner.append(rng.choice(members, take, replace=False))
    held = np.sort(np.concatenate(inner))
    return np.setdiff1d(np.arange(len(labels)), held), held


def load_splitters() -> None:
    """Import scikit-learn's splitters now (they are slow to import) rather than at the first split, so that a
    caller timing its imports apart from its work can count this one with them."""
    importlib.import_module("sklearn.model_selection")


def stratified_folds(
    labels: np.ndarray, folds: int, seed: int, groups: np.ndarray | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, validation indices) per fold; a fixed seed gives one assignment everywhere.
    With `groups`, the titles of a group are kept in one fold (scikit-learn's StratifiedGroupKFold)."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold  # here: a bad override fails first

    splitter = (StratifiedKFold if groups is None else StratifiedGroupKFold)(
        n_splits=folds, shuffle=True, random_state=seed
    )
    try:
        return [(np.sort(tr), np.sort(va)) for tr, va in splitter.split(np.zeros(len(labels)), labels, groups)]
    except ValueError as err:  # more folds than titles, or than the titles of every class
        raise DataError(f"cv.folds={folds}: too many folds for {len(labels)} titles ({err})") from None


def duplicate_groups(texts: Sequence[str]) -> np.ndarray | None:
    """One group id per distinct title, so that a title's copies never sit on both sides of a fold;
    None where every title is distinct (KLUE YNAT): its folds stay the plain stratified ones that
    every stored record was made on."""
    ids: dict[str, int] = {}
    groups = np.fromiter((ids.setdefault(text, len(ids)) for text in texts), dtype=np.int64, count=len(texts))
    return groups if len(ids) < len(texts) else None


def title_folds(data: LabelledTitles, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The job's folds: stratified, each title's copies in one fold."""
    return stratified_folds(data.labels, folds, seed, duplicate_groups(data.texts))
