"""The F1 comparison table of a sweep (or any folder of runs), with its noise and the study's verdicts.

python -m klue_tc.report outputs/sweeps/study [--wandb]
python -m klue_tc.report docs/study              # the committed study, from its records alone
python -m klue_tc.report DIR --migrate-sizes     # once: older records' model sizes written into them
python -m klue_tc.report DIR --against docs/study-pretrain/results   # cells trained again, against the records
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional

from klue_tc.core.config import WandbConfig
from klue_tc.core.errors import USER_ERROR_EXIT, KlueTcError

# The files a report writes beside report.md, where it has something to say in them.
REPORT_FILES = ("report.csv", "effects.csv", "interactions.csv", "claims.md")


def main(argv: Optional[list[str]] = None) -> int:
    defaults = WandbConfig()
    parser = argparse.ArgumentParser(
        prog="python -m klue_tc.report",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("directory", type=Path, help="a sweep or run directory (searched for metrics.json)")
    parser.add_argument("--wandb", action="store_true", help="also log the report as one W&B run")
    parser.add_argument("--project", default=defaults.project, help=f"W&B project (default: {defaults.project})")
    parser.add_argument(
        "--mode", default=defaults.mode, choices=["offline", "online"], help=f"W&B mode (default: {defaults.mode})"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the TF-IDF + SVM reference row")
    parser.add_argument(
        "--beside",
        type=Path,
        help="another study's records (say docs/study/results): claims.md shows its verdicts beside these",
    )
    parser.add_argument(
        "--migrate-sizes",
        action="store_true",
        help="write into the records below DIR that lack their model size the size built again from their "
        "config.yaml (once, so that the report builds no model), then stop",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="a reference store (say docs/study-pretrain/results): write DIR/recheck.md, each cell of DIR "
        "against the same configuration there, then stop (exit 1 where one differs)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    if args.migrate_sizes:
        return migrate_sizes(args.directory)
    if args.against is not None:
        return recheck_against(args.directory, args.against)
    from klue_tc.report.loading import unfinished_line
    from klue_tc.report.write import write_report

    if unfinished := unfinished_line(args.directory):  # a sweep writing there meanwhile
        print(unfinished, flush=True)
    try:
        write_report(
            args.directory,
            log_to_wandb=args.wandb,
            wandb_cfg=WandbConfig(project=args.project, mode=args.mode),
            group=args.directory.resolve().name,
            baseline=not args.no_baseline,
            beside=args.beside,
        )
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    from klue_tc.report.settings import declared_note

    written = [name for name in REPORT_FILES if (args.directory / name).is_file()]
    note = declared_note(args.directory)
    print(
        f"report: {args.directory / 'report.md'} ({', '.join(written)} and the plots beside it)"
        + (f"; note: {note}" if note else "")
    )
    return 0


def recheck_against(directory: Path, reference: Path) -> int:
    from klue_tc.report.loading import fold_records
    from klue_tc.report.recheck import recheck, recheck_markdown

    rerun, committed = fold_records(directory), fold_records(reference)
    if not rerun or not committed:
        empty = directory if not rerun else reference
        print(f"error: {empty}: no finished fold record below it", file=sys.stderr)
        return USER_ERROR_EXIT
    agreements, unmatched = recheck(rerun, committed)
    text = recheck_markdown(agreements, unmatched, directory, reference)
    (directory / "recheck.md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0 if agreements and all(a.agrees for a in agreements) else 1


def migrate_sizes(directory: Path) -> int:
    from klue_tc.report.sizes import grouped
    from klue_tc.report.sizes import migrate_sizes as migrate

    try:
        written, problems = migrate(directory)
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    print(f"model sizes: written into {written} record{'s' if written != 1 else ''} below {directory}")
    for problem in grouped(problems):
        print(f"not measured: {problem}", file=sys.stderr)
    return 0
