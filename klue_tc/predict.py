"""Topic of new headlines from a finished run: the average of its fold models' probabilities; or
from an ensemble's folder (python -m klue_tc.ensemble): its members' weighted average.

python -m klue_tc.predict outputs/runs/trans_blstm/2024-05-01_12-00-00 "삼성전자, 새 반도체 공장 착공"
python -m klue_tc.predict RUN_DIR --file titles.txt --json
python -m klue_tc.predict outputs/sweeps/ensemble/ensemble-model "삼성전자, 새 반도체 공장 착공"
python -m klue_tc.predict RUN_DIR --file titles.txt > predictions.csv   # CSV where stdout is no terminal
python -m klue_tc.predict RUN_DIR --file blind.tsv > blind.csv   # a table with an id column: id,label,<classes>
python -m klue_tc.predict --convert FOLDER   # an older folder's pickled models, once, as arrays and JSON

Nothing a folder holds is run: checkpoints are read as tensors and plain values, linear models as
arrays and JSON. A folder holding a pickle (.pkl, .pickle, .joblib, or a checkpoint that needs more
than tensors) is refused in one line; --convert rewrites it once, loading its pickles: only for a
folder you trust.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from klue_tc.core.config import EVAL_BATCH_SIZE
from klue_tc.core.errors import USER_ERROR_EXIT, KlueTcError, ResourceError
from klue_tc.data.identified import IdentifiedTitles, is_identified_table, read_identified_file
from klue_tc.data.titles import LABEL_NAMES, decode_text, has_letter_or_digit
from klue_tc.store.records import FoldResult, RunResult
from klue_tc.tokenizers.normalisation import normalise_title

log = logging.getLogger(__name__)


class PredictError(KlueTcError):
    """The run directory or the titles cannot be used for prediction."""


def fold_records(run_dir: str | Path, available_only: bool = False) -> list[FoldResult]:
    """The run's fold records, each with its checkpoint and tokenizer on disk. A fold without them
    is an error naming it, unless `available_only` asks to ensemble the folds that are there."""
    return _run_and_folds(run_dir, available_only)[1]


def _run_and_folds(run_dir: str | Path, available_only: bool = False) -> tuple[RunResult, list[FoldResult]]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PredictError(f"{run_dir}: no such run directory")
    metrics_path = run_dir / "metrics.json"
    if not metrics_path.is_file():
        raise PredictError(not_a_run_directory(run_dir))
    try:
        result = RunResult.load(metrics_path)
        folds = result.folds
    except (ValueError, KeyError, TypeError) as err:
        raise PredictError(f"{metrics_path}: unreadable metrics file ({type(err).__name__}: {err})") from None
    present = [r for r in folds if r.checkpoint and Path(r.checkpoint).is_file() and Path(r.tokenizer_dir).is_dir()]
    if not present:
        raise ResourceError(
            f"{run_dir}: no fold checkpoint on disk ({len(folds)} fold{'s' if len(folds) != 1 else ''} in metrics.json)"
        )
    if len(present) < len(folds):
        missing = sorted(r.fold for r in folds if r not in present)
        if not available_only:
            raise ResourceError(
                f"{run_dir}: {'folds' if len(missing) > 1 else 'fold'} {', '.join(map(str, missing))} "
                f"{'have' if len(missing) > 1 else 'has'} no checkpoint or tokenizer on "
                f"disk; pass --available-folds to ensemble the other {len(present)}"
            )
        log.warning("folds %s have no checkpoint or tokenizer on disk; ensembling the other %d", missing, len(present))
    return result, present


def not_a_run_directory(folder: Path) -> str:
    """Why `folder`, which holds no metrics.json, is not one run, naming the run directories it
    holds. A Hydra sweep's folder holds multirun.yaml and one job folder per configuration (and
    fold), however deep the sweep file nests them; a folder such as outputs/runs/<experiment> holds
    one timestamped run directory per run of the same job (conf/config.yaml's hydra.run.dir)."""
    # As deep as a sweep file's job folders lie (<tokenizer>/<design>/fold<k>), no deeper: a folder
    # passed by mistake may be a large one.
    runs = sorted(p.parent for depth in range(1, 4) for p in folder.glob("*/" * depth + "metrics.json"))
    if (folder / "multirun.yaml").is_file():  # a sweep: its jobs are different configurations, not one model
        jobs = f"{len(runs)} job{'s' if len(runs) != 1 else ''}"
        example = f", e.g. {runs[0]}" if runs else " (none has finished yet)"
        return f"{folder} is a sweep directory ({jobs}); pass one job's run directory{example}"
    if len(runs) == 1:
        return f"{folder} is not a run directory; pass the one it holds: {runs[0]}"
    if runs:  # timestamped names: the last is the latest
        return f"{folder} holds {len(runs)} run directories; pass one, e.g. {runs[-1]}"
    return f"{folder}: no metrics.json (not a finished klue_tc run directory)"


def predict_titles(
    run_dir: str | Path, titles: Sequence[str], batch_size: int = EVAL_BATCH_SIZE, available_only: bool = False
) -> list[tuple[str, float]]:
    """(label name, ensemble probability) for each title, in order (each normalised as training's were)."""
    probs, names = predict_probs(run_dir, titles, batch_size, available_only)
    best = probs.argmax(axis=1)
    return [(names[k], float(p[k])) for k, p in zip(best, probs)]


def predict_probs(
    run_dir: str | Path, titles: Sequence[str], batch_size: int = EVAL_BATCH_SIZE, available_only: bool = False
):
    """(probabilities (titles, classes), the classes' names in the model's label order) for the titles."""
    import numpy as np

    titles = [normalise_title(t) for t in titles]
    empty = [i for i, t in enumerate(titles) if not t]
    if empty:
        raise PredictError(
            f"title {empty[0] + 1} is empty ({len(empty)} of {len(titles)} are): an empty title cannot be classified"
        )
    if not titles:
        return np.zeros((0, 0), dtype=np.float32), []
    symbols_only = [i + 1 for i, t in enumerate(titles) if not has_letter_or_digit(t)]
    if symbols_only:
        log.warning(
            "%d title(s) hold no letter or digit (only emoji, punctuation or symbols; title %d first): "
            "their label is little more than the most common class",
            len(symbols_only),
            symbols_only[0],
        )
    from klue_tc.ensemble.artefact import artefact_probs, is_artefact

    if is_artefact(run_dir):  # an ensemble's folder (python -m klue_tc.ensemble)
        probs, names = artefact_probs(run_dir, titles, batch_size)
        named_in = "ensemble.json"
    else:
        named_in = "metrics.json"
        result, records = _run_and_folds(run_dir, available_only)
        probs = run_probs(Path(run_dir), records, titles, batch_size)
        names = result.label_names or LABEL_NAMES  # runs from before label sets were saved are YNAT's
    if probs.shape[1] != len(names):
        raise PredictError(
            f"{run_dir}: the models predict {probs.shape[1]} classes but {named_in} names {len(names)} labels"
        )
    return probs, list(names)


def run_probs(run_dir: Path, records: Sequence[FoldResult], titles: Sequence[str], batch_size: int):
    """The run's fold models' mean probabilities, each checkpoint checked against its record's
    checksum and read as tensors and plain values only; a run directory holding a pickle is
    refused before any model is read."""
    import numpy as np

    from klue_tc.core.checksums import require_checksum
    from klue_tc.core.pickles import refuse_pickles
    from klue_tc.ensemble.serving import neural_fold_probs  # torch/lightning only once the inputs are good

    refuse_pickles(run_dir)
    probs = []
    for record in records:
        require_checksum(Path(record.checkpoint), record.checkpoint_sha256, "the fold's record")
        probs.append(
            neural_fold_probs(Path(record.checkpoint), Path(record.tokenizer_dir), titles, batch_size, folder=run_dir)
        )
    return np.mean(probs, axis=0)


def read_titles(path: Path) -> list[str]:
    if str(path) == "-":  # the usual spelling of standard input
        titles = [title for title in map(normalise_title, sys.stdin.read().splitlines()) if title]
        if not titles:
            raise PredictError("standard input is empty (one headline a line expected)")
        return titles
    if not path.is_file():
        raise PredictError(f"{path}: file not found")
    lines = decode_text(path.read_bytes(), str(path)).splitlines()
    titles = [title for title in map(normalise_title, lines) if title]  # blank lines separate, nothing more
    if not titles:
        raise PredictError(f"{path}: the file is empty (one headline a line expected)")
    return titles


def argument_title(argument: str, number: int) -> str:
    """A command-line title as text: a terminal in the Korean Windows encoding hands Python bytes
    it cannot read as UTF-8 (kept as surrogates), which are read as cp949 when they are that."""
    try:
        argument.encode("utf-8")
        return argument
    except UnicodeEncodeError:
        raw = argument.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("cp949")
    except UnicodeDecodeError:
        raise PredictError(
            f"title {number} is not UTF-8 text; set your terminal to UTF-8 or pass the titles in a file with --file"
        ) from None


def print_table(titles: Sequence[str], predictions: Sequence[tuple[str, float]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fold-ensemble prediction")
    table.add_column("title", overflow="fold")
    table.add_column("label")
    table.add_column("probability", justify="right")
    for title, (label, prob) in zip(titles, predictions):
        table.add_row(title, label, f"{prob:.4f}")
    Console().print(table)


def print_id_table(titles: IdentifiedTitles, probs, names: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fold-ensemble prediction")
    for column in ("id", "title", "label"):
        table.add_column(column, overflow="fold")
    table.add_column("probability", justify="right")
    for name, title, row in zip(titles.ids, titles.texts, probs):
        table.add_row(name, title, names[int(row.argmax())], f"{row.max():.4f}")
    Console().print(table)


def write_id_rows(titles: IdentifiedTitles, probs, names: Sequence[str], form: str) -> None:
    """One row per id: CSV (id,label,<a probability column per class>, klue_tc/data/predictions.py) or
    one JSON object a line (id, label, probabilities by class)."""
    from klue_tc.data.predictions import write_predictions, written_probabilities

    if form != "json":
        write_predictions(sys.stdout, titles.ids, probs, names)
        return
    for name, row in zip(titles.ids, written_probabilities(probs)):
        line = {"id": name, "label": names[int(row.argmax())], "probabilities": dict(zip(names, map(float, row)))}
        print(json.dumps(line, ensure_ascii=False))


def write_rows(titles: Sequence[str], predictions: Sequence[tuple[str, float]], form: str) -> None:
    """One row per title: CSV (title,label,probability, with a header) or one JSON object a line."""
    if form == "json":
        for title, (label, prob) in zip(titles, predictions):
            print(json.dumps({"title": title, "label": label, "probability": prob}, ensure_ascii=False))
        return
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["title", "label", "probability"])
    writer.writerows((title, label, f"{prob:.4f}") for title, (label, prob) in zip(titles, predictions))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m klue_tc.predict", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_dir", type=Path, help="a run directory holding metrics.json and fold checkpoints, or an ensemble's folder"
    )
    parser.add_argument("titles", nargs="*", help="headlines to classify")
    parser.add_argument(
        "--file",
        type=Path,
        help="text file (UTF-8; UTF-16 with a BOM and cp949 are read too), one headline a line (blank lines "
        "skipped); - reads standard input. A csv, tsv, json or jsonl table with an id column (and a title "
        "column) is predicted by id: id,label and a probability column per class",
    )
    parser.add_argument("--batch-size", type=int, default=EVAL_BATCH_SIZE)
    parser.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        help="table (the default on a terminal), csv (the default elsewhere: `> file.csv`), json (one object a line)",
    )
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="the same as --format json")
    parser.add_argument(
        "--available-folds",
        action="store_true",
        help="ensemble the folds whose checkpoints are on disk when some are missing",
    )
    parser.add_argument(
        "--convert",
        action="store_true",
        help="rewrite the folder's pickled models (an older version's) as arrays and JSON, once, and remove "
        "the pickles; it loads them, so only for a folder you trust",
    )
    args = parser.parse_intermixed_args(argv)  # titles after an option too: `RUN --json "title"`
    if args.batch_size < 1:
        parser.error("--batch-size must be positive")
    if args.convert and (args.titles or args.file):
        parser.error("--convert takes a folder only, no titles")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    if args.convert:
        return convert(args.run_dir)
    if args.file is not None and is_identified_table(args.file):
        if args.titles:
            parser.error(f"{args.file} names its titles by id: pass no titles beside it")
        return predict_by_id(args)
    try:
        titles = [argument_title(t, i) for i, t in enumerate(args.titles, 1)]
        titles = [normalise_title(t) for t in titles] + (read_titles(args.file) if args.file else [])
        if not titles:
            raise PredictError("no titles given (pass them as arguments or with --file)")
        predictions = predict_titles(args.run_dir, titles, args.batch_size, args.available_folds)
    except (KlueTcError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    form = args.format or ("table" if sys.stdout.isatty() else "csv")
    if form == "table":
        print_table(titles, predictions)
    else:
        write_rows(titles, predictions, form)
    return 0


def predict_by_id(args: argparse.Namespace) -> int:
    """A table of titles with an id column: one row per id, in the file's order, with every class's probability."""
    try:
        titles = read_identified_file(args.file)
        probs, names = predict_probs(args.run_dir, titles.texts, args.batch_size, args.available_folds)
    except (KlueTcError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    form = args.format or ("table" if sys.stdout.isatty() else "csv")
    if form == "table":
        print_id_table(titles, probs, names)
    else:
        write_id_rows(titles, probs, names, form)
    return 0


def convert(folder: Path) -> int:
    from klue_tc.ensemble.convert import convert_folder

    try:
        lines = convert_folder(folder)
    except (KlueTcError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
