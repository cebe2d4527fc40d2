"""Training throughput and macro-F1 against the original notebook's design; sweep overhead; GPU projection.

The command line (`python -m benchmarks`): arguments, checks, the run, the report; also the --worker entry.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.constants import DEFAULT_DATA, DEFAULT_KOBERT_MODEL, ENCODERS, RUNS
from benchmarks.reference import DEFAULT_REFERENCE
from benchmarks.render import print_rich, render
from benchmarks.runner import Bench
from benchmarks.worker import run_worker


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="labelled training file (default: %(default)s)")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="training titles (default: 5000; with --gpu every title left after the 10%% hold-out)",
    )
    p.add_argument("--epochs", type=int, default=1, help="epochs for every run (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=256, help="default: %(default)s")
    p.add_argument("--encoders", default=",".join(ENCODERS), help="comma-separated (default: %(default)s)")
    p.add_argument(
        "--reference",
        type=Path,
        default=DEFAULT_REFERENCE,
        help="seed_reference.py; skipped with a note when absent (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads in every run (default: the CPUs available)")
    p.add_argument("--out", type=Path, help="write the report: FILE.md (Markdown, plus FILE.json) or FILE.json")
    p.add_argument(
        "--gpu",
        action="store_true",
        help="measure on CUDA (bf16-mixed) and project sweeps/paper.yaml's wall time on one GPU",
    )
    p.add_argument(
        "--parallel",
        default="2,4,8",
        help="with --gpu: concurrent jobs on the one GPU to measure (default: %(default)s; 1 is phase 1)",
    )
    p.add_argument(
        "--phase-budget",
        type=float,
        default=240,
        help="with --gpu: seconds per phase; no run starts once they are spent (default: %(default)s)",
    )
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run (default: %(default)s)")
    p.add_argument("--work-dir", type=Path, help="keep runs, caches and logs here (default: a temporary directory)")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Hydra override for both klue_tc runs (repeatable), e.g. trainer.precision=bf16-mixed",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every run, alternating; each keeps its fastest round (default: %(default)s)",
    )
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time training steps on the wall clock (default; FoldMonitor's figure) or the process CPU "
        "clock (with --threads 1: robust on a shared, busy machine)",
    )
    p.add_argument(
        "--runs",
        default=",".join(RUNS),
        help="comma-separated runs to make without --gpu (default: %(default)s; the matrix-product peak always)",
    )
    p.add_argument(
        "--ensemble-members",
        help="the ensemble run's member designs, comma-separated names of sweeps/ensemble_member/*.yaml "
        "(default: sweeps/ensemble.yaml's); the KoBERT one reads $KLUE_TC_KOBERT_MODEL, else "
        f"{DEFAULT_KOBERT_MODEL} where it is",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    # SIGTERM ends the benchmark like Ctrl-C does: the run in progress is killed, not orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if args.worker:
        result = run_worker(json.loads(Path(args.worker).read_text()))
        Path(args.worker_out).write_text(json.dumps(result))
        return 0
    data = args.data.expanduser().resolve()
    if not data.is_file():
        fail(f"--data {data}: file not found (pass --data PATH to a labelled KLUE YNAT file)")
    encoders = [e.strip() for e in args.encoders.split(",") if e.strip()]
    unknown = [e for e in encoders if e not in ENCODERS]
    if unknown or not encoders:
        fail(f"--encoders: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ENCODERS)}")
    runs = tuple(r.strip() for r in args.runs.split(",") if r.strip())
    unknown = [r for r in runs if r not in RUNS]
    if unknown or not runs:
        fail(f"--runs: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(RUNS)}")
    ensemble_members = [m.strip() for m in (args.ensemble_members or "").split(",") if m.strip()]
    if ensemble_members:
        from benchmarks.ensemble import member_names

        unknown = [m for m in ensemble_members if m not in member_names()]
        if unknown:
            fail(f"--ensemble-members: unknown {', '.join(unknown)}; choose from {', '.join(member_names())}")
    if "ensemble" in runs and not os.environ.get("KLUE_TC_KOBERT_MODEL") and DEFAULT_KOBERT_MODEL.is_file():
        os.environ["KLUE_TC_KOBERT_MODEL"] = str(DEFAULT_KOBERT_MODEL)  # the workers inherit it: no hub
    if args.limit is None and not args.gpu:
        args.limit = 5000
    for name in ("limit", "epochs", "batch_size", "repeat"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be a positive integer")
    notes = []
    reference = args.reference.expanduser().resolve() if args.reference else None
    if reference is not None and not reference.is_file():
        notes.append(f"seed_reference not found at {reference}: its columns are empty")
        print(f"[bench] note: {notes[-1]}", file=sys.stderr)
        reference = None
    if args.clock == "cpu" and args.gpu:
        fail("--clock cpu measures CPU runs; with --gpu the wall clock (with CUDA synchronisation) is the measure")
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            fail("--gpu: no CUDA device visible to torch")
        notes.append("seed_reference is CPU-only: not run with --gpu")
    parallel = sorted({int(k) for k in args.parallel.split(",") if k.strip() and int(k) > 1}) if args.gpu else []
    threads = args.threads or len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="klue_tc_bench-") as tmp:
        work = args.work_dir.expanduser().resolve() if args.work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bench = Bench(
            data,
            args.limit,
            args.epochs,
            args.batch_size,
            encoders,
            reference,
            threads,
            args.gpu,
            work,
            args.timeout,
            parallel,
            notes,
            args.override,
            args.repeat,
            args.clock,
            args.phase_budget,
            runs,
            ensemble_members,
        )
        report = bench.measure()
    print_rich(report)
    if args.out:
        out = args.out.expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".json":
            out.write_text(json.dumps(report, indent=1, default=str))
        else:
            out.write_text(render(report), encoding="utf-8")
            out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
        print(f"[bench] wrote {out}", file=sys.stderr)
    return 0
