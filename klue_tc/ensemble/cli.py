"""python -m klue_tc.ensemble: the ensemble of a sweep's records, its report and its artefact."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Optional, Sequence

from klue_tc.core.config import EVAL_BATCH_SIZE, WandbConfig
from klue_tc.core.errors import USER_ERROR_EXIT, KlueTcError
from klue_tc.ensemble.selection import LOG_LOSS, MAX_ROUNDS, METRICS, PATIENCE

ARTEFACT_DIR = "ensemble-model"  # the artefact's default place, in the directory reported on


def parser() -> argparse.ArgumentParser:
    defaults = WandbConfig()
    parse = argparse.ArgumentParser(
        prog="python -m klue_tc.ensemble",
        description="Fold and cross-design ensembles of a sweep's records with the linear baselines as members, "
        "chosen on out-of-fold predictions only; ensemble.md, ensemble.csv and a servable folder.",
    )
    parse.add_argument("directory", type=Path, help="a sweep directory or results store (its records)")
    parse.add_argument(
        "--validation",
        type=Path,
        help="a labelled file to score instead of the runs' validation titles (every member's fold models score it)",
    )
    parse.add_argument(
        "--metric",
        choices=METRICS,
        default=LOG_LOSS,
        help=f"what the selection maximises out of fold (default {LOG_LOSS})",
    )
    parse.add_argument(
        "--rounds", type=int, default=MAX_ROUNDS, help=f"selection rounds at most (default {MAX_ROUNDS})"
    )
    parse.add_argument(
        "--patience", type=int, default=PATIENCE, help=f"rounds without a gain before it stops (default {PATIENCE})"
    )
    parse.add_argument("--no-baselines", action="store_true", help="leave the linear baselines out of the members")
    parse.add_argument(
        "--no-class-offsets",
        action="store_true",
        help="predict by the weighted mean alone, without the per-class offsets chosen out of fold",
    )
    parse.add_argument(
        "--artefact", type=Path, help=f"where to write the servable ensemble (default DIRECTORY/{ARTEFACT_DIR})"
    )
    parse.add_argument("--no-artefact", action="store_true", help="write the report only")
    parse.add_argument(
        "--no-soft-labels", action="store_true", help="write no soft-labels.npz (the teacher's file for distillation)"
    )
    parse.add_argument(
        "--student",
        type=Path,
        help="the run directory of a student distilled from these soft labels: scored beside the ensemble",
    )
    parse.add_argument(
        "--blind",
        type=Path,
        help="a table of titles without labels (id and title columns, e.g. blind.tsv): once all is chosen, the "
        "linear baselines' fold ensembles (with and without their class offsets) and the ensemble predict them "
        "into DIRECTORY/blind/<model>.csv; a report that already holds this ensemble is left as it is",
    )
    parse.add_argument("--batch-size", type=int, default=EVAL_BATCH_SIZE)
    parse.add_argument("--wandb", action="store_true", help="also log the tables as one W&B run")
    parse.add_argument("--project", default=defaults.project, help=f"W&B project (default: {defaults.project})")
    parse.add_argument("--mode", default=defaults.mode, choices=["offline", "online"])
    return parse


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.rounds < 1 or args.patience < 1 or args.batch_size < 1:
        parser().error("--rounds, --patience and --batch-size must be positive")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    from klue_tc.data.identified import read_identified_file
    from klue_tc.ensemble.artefact import ArtefactError, write_artefact
    from klue_tc.ensemble.blind import BLIND_DIR, write_blind
    from klue_tc.ensemble.distillation import student_score, write_soft_labels
    from klue_tc.ensemble.report import log_to_wandb, report_files, report_holds, write_files
    from klue_tc.ensemble.stage import build_ensemble

    command = shlex.join(["python", "-m", "klue_tc.ensemble", *(sys.argv[1:] if argv is None else argv)])
    from klue_tc.ensemble.sources import named_stores
    from klue_tc.report.loading import unfinished_line

    if unfinished := unfinished_line(args.directory, *named_stores(args.directory)):  # a sweep writing there
        print(unfinished, flush=True)
    try:
        if args.validation is not None and not args.validation.is_file():
            raise KlueTcError(f"{args.validation}: file not found")
        blind = read_identified_file(args.blind) if args.blind is not None else None  # read now: fail early
        ensemble = build_ensemble(
            args.directory,
            args.validation,
            args.rounds,
            args.patience,
            args.metric,
            not args.no_baselines,
            args.batch_size,
            not args.no_class_offsets,
            blind,
        )
        soft_labels, why_not = (None, None) if args.no_soft_labels else write_soft_labels(ensemble)
        if why_not:
            ensemble.notes.append(why_not)
        if args.student is not None:
            ensemble.student = student_score(ensemble, args.student)
        kept = blind is not None and report_holds(ensemble)  # only the blind predictions are new
        files = report_files(args.directory) if kept else write_files(ensemble, command)
        blind_files = write_blind(ensemble.blind, args.directory / BLIND_DIR) if ensemble.blind else []
        artefact = None
        if not args.no_artefact:
            try:
                artefact = write_artefact(ensemble, args.artefact or args.directory / ARTEFACT_DIR)
            except ArtefactError as err:
                if args.artefact is not None:
                    raise
                logging.warning("no artefact: %s", err)
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    if args.wandb:
        log_to_wandb(ensemble, WandbConfig(project=args.project, mode=args.mode), args.directory.resolve().name)
    print("\n".join(closing_lines(ensemble, files, artefact, soft_labels, kept, blind_files)))
    return 0


def closing_lines(
    ensemble,
    files: list[Path],
    artefact: Optional[Path],
    soft_labels: Optional[Path],
    kept: bool = False,
    blind_files: Sequence[Path] = (),
) -> list[str]:
    """What the stage prints as it ends, in lines a terminal shows whole: its notes (wrapped), one
    summary line, one line per chosen member and per comparison, then where its files are.
    ensemble.md holds all of it and more."""
    blind_notes = ensemble.blind.notes if ensemble.blind else []
    lines = [*wrapped_notes([*ensemble.notes, *blind_notes]), summary_line(ensemble)]
    lines += [f"  member {member.name}: weight {weight:.2f}" for member, weight in ensemble.chosen]
    scored = ensemble.validation
    if scored is not None:
        for d in scored.differences:
            lines.append(f"  ensemble minus {d.versus}: {d.difference:+.4f} ({d.low:+.4f}..{d.high:+.4f})")
    student = ensemble.student
    if student is not None:
        d = student.versus
        lines.append(
            f"  distilled student {student.f1:.4f} ({student.low:.4f}..{student.high:.4f}), "
            f"ensemble minus it {d.difference:+.4f} ({d.low:+.4f}..{d.high:+.4f})"
        )
    if kept:
        lines.append(f"report: {files[0]} already holds this ensemble: left as it is (run without --blind to rewrite)")
    else:
        lines.append(f"report: {files[0]} ({', '.join(f.name for f in files[1:])} beside it)")
    if blind_files:
        names = ", ".join(f.stem for f in blind_files)
        lines.append(f"blind predictions in {blind_files[0].parent}: {names} (.csv)")
    if artefact:
        lines.append(f"serve it: python -m klue_tc.predict {artefact} TITLE")
    if soft_labels is not None:
        lines.append(f"soft labels: {soft_labels}")
        lines.append(f"distil a student: distill.teacher={soft_labels} (docs/ensembles.md)")
    return lines


def wrapped_notes(notes: list[str], width: int = 100) -> list[str]:
    """Each note as `note: ...` lines of about `width` characters (a path is never broken)."""
    wrap = textwrap.TextWrapper(
        width, initial_indent="note: ", subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )
    return [line for note in notes for line in wrap.wrap(note)]


def summary_line(ensemble) -> str:
    """How many members were chosen and what the ensemble scores; each member and comparison
    follows on a line of its own."""
    chosen = ensemble.chosen
    line = (
        f"ensemble of {len(chosen)} member{'s' if len(chosen) != 1 else ''} chosen out of fold: "
        f"OOF macro-F1 {ensemble.oof_f1:.4f}"
    )
    scored = ensemble.validation
    if scored is not None:
        line += f"; validation macro-F1 {scored.f1:.4f} ({scored.low:.4f}..{scored.high:.4f})"
    return line
