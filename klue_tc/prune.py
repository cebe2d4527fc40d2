"""Keep a results store small: remove the checkpoints (and the tokenizers and pretrained encoders only
they need) of configurations no sweep file's grid holds any more, and W&B offline runs older than N
days, saying what that frees; records are never removed.

python -m klue_tc.prune outputs/sweeps/paper/results --dry-run      # what it would remove and free
python -m klue_tc.prune outputs/sweeps/paper/results --wandb-older-than 30
python -m klue_tc.prune STORE data.limit=3000    # the settings its sweep ran with beside the axes (ARGS)

A configuration counts as in a grid where one of the grid's configurations has its settings
(klue_tc/jobs/sweep_grids.py), each sweep file in --sweeps composed with the sweep command's settings:
those given after STORE, else those its sweep folder's multirun.yaml keeps. A configuration of a
single run (no sweep file) and one whose config.yaml this code cannot read are kept. A store whose
records are committed (docs/*/results) is pruned only with --committed.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path
from typing import Optional

from klue_tc.core.errors import USER_ERROR_EXIT, KlueTcError
from klue_tc.core.files import human_size
from klue_tc.jobs.sweep_grids import StoredConfiguration, stored_configurations, sweep_command_settings, sweep_files
from klue_tc.jobs.sweeps import SWEEPS_DIR
from klue_tc.store.disk import Places, measure
from klue_tc.store.prune import (
    Plan,
    carry_out,
    freed_by,
    model_folders,
    old_wandb_runs,
    pretrained_only_for,
    removed_line,
    run_folder_copies,
)

STORE_KINDS = ("records", "checkpoints", "pretrained", "wandb")


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog="python -m klue_tc.prune", description=__doc__.splitlines()[0])
    parse.add_argument("store", type=Path, help="a results store (<sweep dir>/results, outputs/results, results.dir)")
    parse.add_argument(
        "overrides",
        nargs="*",
        help="the settings its sweep ran with beside the axes, as ARGS gave them "
        "(default: those its sweep folder's multirun.yaml keeps)",
    )
    parse.add_argument("--sweeps", type=Path, default=SWEEPS_DIR, help="the sweep files' folder (default: sweeps/)")
    parse.add_argument(
        "--runs",
        type=Path,
        help="the run folders holding the jobs' copies and W&B runs (default: the sweep folder the store is in)",
    )
    parse.add_argument("--wandb-older-than", type=float, metavar="DAYS", help="also remove W&B offline runs this old")
    parse.add_argument("--dry-run", action="store_true", help="say what would be removed and freed; remove nothing")
    parse.add_argument(
        "--committed", action="store_true", help="prune a store whose records are in git (docs/*/results)"
    )
    return parse


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_intermixed_args(argv)  # the settings before or after the flags, as ARGS gives them
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        return prune(args)
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT


def prune(args: argparse.Namespace) -> int:
    store: Path = args.store
    if not store.is_dir():
        raise KlueTcError(f"{store}: no such results store")
    if is_committed(store) and not (args.committed or args.dry_run):
        raise KlueTcError(f"{store}: its records are committed (in git); --committed prunes it, --dry-run looks")
    runs = args.runs if args.runs is not None else default_runs(store)
    print(f"{store}: {human_size((use := measure(Places(store, runs=runs))).total)} ({use.split(named=STORE_KINDS)})")
    if runs is None:
        print("run folders: none looked in (--runs DIR names them): the jobs' links to a checkpoint keep its bytes")

    pruned = configurations_in_no_grid(store, args.overrides, args.sweeps)
    plan = Plan()
    keys = {c.key for c in pruned}
    model_folders(store, keys, plan)
    run_folder_copies(runs, store, keys, plan)
    pretrained_only_for(store, keys, plan)
    if args.wandb_older_than is not None:
        old_wandb_runs(runs, args.wandb_older_than, plan)
        print(f"W&B offline runs older than {args.wandb_older_than:g} days: {plan.wandb_runs}")
    if plan.busy:
        print(f"left alone, a job holds them: {', '.join(plan.busy)}")
    records = len(list(store.glob("*/fold*.json")))
    print(f"{removed_line(freed_by(plan), args.dry_run)}; records kept: {records} fold{'s' if records != 1 else ''}")
    if args.dry_run:
        print("dry run: nothing removed (the same command without --dry-run removes it)")
        return 0
    carry_out(plan)
    return 0


def configurations_in_no_grid(store: Path, overrides: list[str], sweeps_dir: Path) -> list[StoredConfiguration]:
    """The store's configurations made by a sweep file that no sweep file's grid holds, each said in
    one line; the sweep files a configuration names are composed first, the others only while one
    is unmatched."""
    from klue_tc.jobs.sweep_grids import sweep_grid

    configurations = stored_configurations(store)
    unreadable = [c for c in configurations if c.settings is None]
    single = [c for c in configurations if c.settings is not None and c.sweep is None]
    unmatched = {c.key: c for c in configurations if c.settings is not None and c.sweep is not None}
    source = "given"
    if not overrides:
        overrides, saved = sweep_command_settings(store)
        source = f"from {saved}" if saved is not None else "none"
    files = sweep_files(sweeps_dir)
    named = {c.sweep for c in unmatched.values()}
    checked = 0
    for file in sorted(files, key=lambda f: f.stem not in named):  # theirs first
        if not unmatched:
            break
        keys = sweep_grid(file, overrides)
        unmatched = {k: c for k, c in unmatched.items() if c.settings not in keys}
        checked += 1
    settings = " ".join(overrides) if overrides else "none"
    print(
        f"grids: {checked} of the {len(files)} sweep files in {sweeps_dir} composed (settings beside the axes: "
        f"{settings}, {source}); {len(unmatched)} of the store's {len(configurations)} configurations in none"
    )
    for c in unmatched.values():
        print(f"  {c.key}: {c.describe} (sweep {c.sweep})")
    if single or unreadable:
        print(
            f"kept: {len(single)} of single runs (no sweep file), "
            f"{len(unreadable)} whose config.yaml is not readable here"
        )
    return list(unmatched.values())


def default_runs(store: Path) -> Optional[Path]:
    """A sweep's store lies in its sweep folder (with Hydra's multirun.yaml), beside its job folders;
    single runs' outputs/results beside outputs/runs."""
    parent = store.absolute().parent
    if (parent / "multirun.yaml").is_file():
        return parent
    if (parent / "runs").is_dir():
        return parent / "runs"
    return None


def is_committed(store: Path) -> bool:
    """Whether git tracks any file in `store` (a study's committed records)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(store), "ls-files", "--", "."], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
