"""The report: number formats, tables, targets, footnotes, Markdown and the rich console view."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.constants import ENSEMBLE_FOLDS, ENSEMBLE_TRAIN_STEPS, YNAT_TRAIN_TITLES

DASH = "—"
# Targets of issue 6: klue_tc titles/s over seed_reference's, per encoder; cached time to first step.
TARGET_SPEEDUP = {"transformer": 3.0, "trans_blstm": 2.0}
TARGET_CACHED_FIRST_STEP_S = 2.0
# Issue 43: masked-LM pretraining's titles/s over fine-tuning's, same encoder, size, precision, threads.
TARGET_PRETRAIN_RATIO = 0.80


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    if numerator is None or denominator is None or not denominator or _nan(numerator) or _nan(denominator):
        return None
    return numerator / denominator


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def fmt(value, spec: str = ".0f", suffix: str = "") -> str:
    if value is None or _nan(value):
        return DASH
    return f"{value:{spec}}{suffix}"


def fmt_seconds(seconds: Optional[float]) -> str:
    if seconds is None or _nan(seconds):
        return DASH
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


TABLE_HEADER = (
    "encoder",
    "klue_tc titles/s",
    "notebook-path titles/s",
    "seed_reference titles/s",
    "klue_tc / seed_reference",
    "klue_tc / notebook-path",
    "macro-F1 (klue_tc / notebook-path / seed_reference)",
    "peak memory MB (klue_tc / notebook-path / seed_reference)",
)


def table_rows(results: Sequence[dict]) -> list[list[str]]:
    """One row per encoder from {"encoder", "klue_tc", "notebook", "reference"} run records
    (each None when not run, else with samples_per_s, f1, peak_mb)."""
    rows = []
    for r in results:
        runs = [r.get("klue_tc"), r.get("notebook"), r.get("reference")]
        speeds = [run.get("samples_per_s") if run else None for run in runs]
        rows.append(
            [
                r["encoder"],
                *(fmt(s) for s in speeds),
                fmt(ratio(speeds[0], speeds[2]), ".2f", "x"),
                fmt(ratio(speeds[0], speeds[1]), ".2f", "x"),
                " / ".join(fmt(run.get("f1") if run else None, ".4f") for run in runs),
                " / ".join(fmt(run.get("peak_mb") if run else None, ".0f") for run in runs),
            ]
        )
    return rows


def loop_speed(run: Optional[dict], clock: str) -> Optional[float]:
    """A run's loop titles/s (step end to step end, batch assembly included) on the bench's clock."""
    if not run:
        return None
    return run.get("loop_cpu_samples_per_s" if clock == "cpu" else "loop_samples_per_s")


def efficiency(result: dict, peak: Optional[dict], clock: str) -> dict:
    """Pretraining against fine-tuning for one encoder, and the achieved GFLOP/s of each training
    step (FLOPs per title x loop titles/s) with its share of the measured matrix-product peak."""
    peak_gflops = (peak or {}).get("gflops_per_s")
    out = {"peak_gflops_per_s": peak_gflops}
    speeds = {}
    for kind in ("klue_tc", "pretrain"):
        run = result.get(kind)
        speeds[kind] = loop_speed(run, clock)
        flops = (run or {}).get("train_flops_per_title")
        gflops = None if speeds[kind] is None or flops is None else speeds[kind] * flops / 1e9
        name = "finetune" if kind == "klue_tc" else kind
        out[f"{name}_titles_per_s"] = speeds[kind]
        out[f"{name}_train_flops_per_title"] = flops
        out[f"{name}_gflops_per_s"] = gflops
        out[f"{name}_peak_fraction"] = ratio(gflops, peak_gflops)
    out["pretrain_ratio"] = ratio(speeds["pretrain"], speeds["klue_tc"])
    return out


PRETRAIN_HEADER = (
    "encoder",
    "precision",
    "fine-tuning titles/s",
    "pretraining titles/s",
    "pretraining / fine-tuning",
    "train-step GFLOP per title (fine-tuning / pretraining)",
    "achieved GFLOP/s (fine-tuning / pretraining)",
    "of matmul peak (fine-tuning / pretraining)",
)


def pretrain_rows(results: Sequence[dict], peak: Optional[dict], clock: str) -> list[list[str]]:
    """One row per encoder: masked-LM pretraining beside fine-tuning, and both steps' GFLOP/s."""
    rows = []
    for r in results:
        e = efficiency(r, peak, clock)
        precision = (r.get("klue_tc") or r.get("pretrain") or {}).get("precision")
        rows.append(
            [
                r["encoder"],
                precision or DASH,
                fmt(e["finetune_titles_per_s"]),
                fmt(e["pretrain_titles_per_s"]),
                fmt(e["pretrain_ratio"], ".2f", "x"),
                " / ".join(fmt(_giga(e[f"{k}_train_flops_per_title"]), ".3f") for k in ("finetune", "pretrain")),
                " / ".join(fmt(e[f"{k}_gflops_per_s"], ".1f") for k in ("finetune", "pretrain")),
                " / ".join(fmt(_percent(e[f"{k}_peak_fraction"]), ".0f", " %") for k in ("finetune", "pretrain")),
            ]
        )
    return rows


def _giga(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / 1e9


def _percent(fraction: Optional[float]) -> Optional[float]:
    return None if fraction is None else 100 * fraction


def peak_line(peak: Optional[dict], clock: str) -> str:
    if not peak:
        return "Matrix-product peak: not measured."
    on = "process CPU time" if clock == "cpu" else "wall clock"
    return (
        f"Matrix-product peak: a {peak['size']} x {peak['size']} {peak['dtype']} product (the training precision, "
        f"{peak['precision']}), {peak['threads']} thread(s), {on}: **{peak['gflops_per_s']:.1f} GFLOP/s** "
        f"(the fastest of {peak['repetitions']})."
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def target_checks(
    results: Sequence[dict], overhead: Optional[dict], clock: str = "wall"
) -> list[tuple[str, Optional[bool], str]]:
    """(target, met or None when not measured, detail) for issue 6's targets and issue 43's
    pretraining speed (loop titles/s on `clock`)."""
    checks = []
    for r in results:
        goal = TARGET_SPEEDUP.get(r["encoder"])
        if goal is None:
            continue
        ours, ref = r.get("klue_tc") or {}, r.get("reference") or {}
        speedup = ratio(ours.get("samples_per_s"), ref.get("samples_per_s"))
        checks.append(
            (
                f"{r['encoder']}: titles/s >= {goal:g}x seed_reference",
                None if speedup is None else speedup >= goal,
                fmt(speedup, ".2f", "x"),
            )
        )
        f1, ref_f1 = ours.get("f1"), ref.get("f1")
        met = None if f1 is None or ref_f1 is None else f1 >= ref_f1
        checks.append(
            (f"{r['encoder']}: macro-F1 >= seed_reference's", met, f"{fmt(f1, '.4f')} vs {fmt(ref_f1, '.4f')}")
        )
    for r in results:
        if not r.get("pretrain"):
            continue
        pretrain_ratio = efficiency(r, None, clock)["pretrain_ratio"]
        checks.append(
            (
                f"{r['encoder']}: pretraining titles/s >= {TARGET_PRETRAIN_RATIO:.2f}x fine-tuning's",
                None if pretrain_ratio is None else pretrain_ratio >= TARGET_PRETRAIN_RATIO,
                fmt(pretrain_ratio, ".2f", "x"),
            )
        )
    cached = (overhead or {}).get("cached", {}).get("time_to_first_step_s")
    checks.append(
        (
            f"cached job: time to first step < {TARGET_CACHED_FIRST_STEP_S:g} s",
            None if cached is None else cached < TARGET_CACHED_FIRST_STEP_S,
            fmt(cached, ".2f", " s"),
        )
    )
    return checks


def footnotes(report: dict) -> list[str]:
    s = report["settings"]
    first = next((r for r in report["results"] if r.get("klue_tc")), None)
    ours = first["klue_tc"] if first else {}
    ref = next((r["reference"] for r in report["results"] if r.get("reference")), None) or {}
    sampled = f"{s['limit']} titles sampled" if s["limit"] else "all titles taken"
    notes = [
        f"Same for every run: {ours.get('train_size', s['limit'])} training titles and {ours.get('val_size', '?')} "
        f"held-out titles, identical for all three (seed_reference's split of {Path(s['data']).name}: a stratified "
        f"10% held out with random_state=0, then "
        f"{sampled} "
        f"from the rest with random_state=0; "
        f"klue_tc reproduces the indices), batch {s['batch_size']}, {s['epochs']} epoch(s), {s['layers']} layers, "
        f"d 256 / 4 heads / FFN 512 / hidden 256, post-LN, {s['threads']} torch threads, one fresh process per run"
        + (
            f"; each figure is the fastest of {s['repeat']} alternating rounds (all rounds in the JSON)."
            if s.get("repeat", 1) > 1
            else "."
        ),
        *(
            [
                f"Clock: process CPU time ({s['threads']} thread(s)) for every titles/s figure: klue_tc's over the "
                f"same steps FoldMonitor times, seed_reference's own timer pointed at time.process_time. On a shared "
                f"machine this is the work each run needs, not the time slices it got; FoldMonitor's wall-clock "
                f"figures are in the JSON (monitor_samples_per_s)."
            ]
            if s.get("clock") == "cpu"
            else []
        ),
        (
            "titles/s: klue_tc and notebook-path = the steps FoldMonitor times for train_samples_per_s (the "
            "metrics.json figure)"
            if s.get("clock") == "cpu"
            else "titles/s: klue_tc and notebook-path = FoldMonitor's train_samples_per_s (the metrics.json figure)"
        )
        + ": forward + backward + optimiser steps only, first step excluded, batch assembly excluded. seed_reference "
        "= its own figure: its epoch loops (batch indexing and the first step included). The klue_tc loop figure "
        "below (wall clock) includes batch assembly and Lightning's hooks between steps, for the like-for-like view.",
        "macro-F1: after the last epoch, on the held-out titles, for all three "
        "(klue_tc's best-epoch F1 is in the JSON).",
        f"Tokenizers: klue_tc SentencePiece unigram, vocab 6000 (got {ours.get('vocab_size', '?')}), [CLS]/[SEP]; "
        f"seed_reference SentencePiece unigram, vocab 6005, [BOS]/[EOS]. Longest training title: "
        f"klue_tc {ours.get('max_len', '?')} pieces (mean {fmt(ours.get('mean_len'), '.1f')}), "
        f"seed_reference {ref.get('max_len', '?')}.",
        "Training recipe differs by design: klue_tc = the experiments' configs (AdamW lr 2e-3, warm-up + cosine, "
        "gradient clipping 1.0, zero-initialised residual branches, scaled sinusoidal positions; BLSTM head reads "
        "the packed final states; attention and BLSTMs skip pads); seed_reference = Adam lr 1e-4 constant, fixed "
        "sinusoidal positions, BLSTM decoder reads position -1.",
        f"Precision: klue_tc {ours.get('precision', '?')} (trainer.precision's default: bf16 autocast on a GPU "
        "and on CPUs where it measured faster (Intel AMX, AMD's AVX-512 BF16), else fp32; "
        "`--override trainer.precision=32-true` for fp32); seed_reference fp32.",
        *(
            [f"klue_tc runs (both columns) with the overrides {' '.join(s['overrides'])}."]
            if s.get("overrides")
            else []
        ),
        "Peak memory: "
        + (
            "torch.cuda.max_memory_allocated of the training process."
            if s.get("gpu")
            else "max RSS of each run's process (os.wait4), including Python, torch, tokenizer fitting and evaluation."
        ),
    ]
    return notes


def ensemble_lines(result: dict) -> list[str]:
    """The report's section (Markdown)."""
    if not result:
        return []
    rows = [
        [
            f"one fold model ({result.get('single_model', 'the first member')})",
            "1",
            fmt(result["single_titles_per_s"]),
            "1.00x",
        ],
        [
            f"ensemble: {result['members']} members x {ENSEMBLE_FOLDS} folds",
            str(result["fold_models"]),
            fmt(result["ensemble_titles_per_s"]),
            f"{fmt(result['slowdown'], '.1f')}x",
        ],
    ]
    single = result["single_titles_per_s"]
    rows += [
        [
            f"member {m['name']} ({m['kind']})",
            str(m["fold_models"]),
            fmt(m["titles_per_s"]),
            f"{fmt(single / m['titles_per_s'], '.1f')}x",
        ]
        for m in result.get("per_member", [])
    ]
    return [
        "### Serving: an ensemble's folder against a single model",
        "",
        markdown_table(("predict on", "models", "titles/s", "time per title"), rows),
        "",
        f"`python -m klue_tc.predict`'s path on the {result['titles']} held-out titles ({result.get('clock', 'wall')} "
        "clock), models read from disk each time; the ensemble is sweeps/ensemble.yaml's member designs and the two "
        f"linear baselines, each as {ENSEMBLE_FOLDS} fold models, trained {ENSEMBLE_TRAIN_STEPS} steps: the cost of a "
        "title does not depend on the weights. A member's row is its fold models alone.",
    ]


def render(report: dict) -> str:
    """The whole report as Markdown (also what --out FILE.md holds)."""
    s = report["settings"]
    parts = [
        f"## klue_tc training benchmark: {s['device']}",
        "",
        markdown_table(TABLE_HEADER, table_rows(report["results"])),
        "",
    ]
    parts += [f"{i}. {note}" for i, note in enumerate(footnotes(report), 1)]
    loop = [
        [
            r["encoder"],
            *(fmt((r.get(k) or {}).get("loop_samples_per_s")) for k in ("klue_tc", "notebook")),
            *(fmt((r.get(k) or {}).get("eval_samples_per_s")) for k in ("klue_tc", "notebook")),
            *(fmt((r.get(k) or {}).get("wall_s"), ".0f", " s") for k in ("klue_tc", "notebook", "reference")),
        ]
        for r in report["results"]
    ]
    parts += [
        "",
        "### Loop throughput and wall time",
        "",
        markdown_table(
            (
                "encoder",
                "klue_tc loop titles/s",
                "notebook-path loop titles/s",
                "klue_tc eval titles/s",
                "notebook-path eval titles/s",
                "wall klue_tc",
                "wall notebook-path",
                "wall seed_reference",
            ),
            loop,
        ),
    ]
    if any(r.get("pretrain") for r in report["results"]):
        parts += ["", *pretrain_lines(report)]
    overhead = report.get("overhead") or {}
    rows = [
        [
            label,
            fmt((overhead.get(key) or {}).get("time_to_first_step_s"), ".2f", " s"),
            fmt((overhead.get(key) or {}).get("wall_s"), ".1f", " s"),
        ]
        for key, label in (
            ("first", "first job (fresh cache: fits and encodes)"),
            ("cached", "cached job (same tokenizer and fold)"),
        )
    ]
    command = (overhead.get("first") or overhead.get("cached") or {}).get("command", "")
    parts += (
        []
        if not overhead
        else [
            "",
            "### Sweep overhead (time to first training step, from job start as FoldMonitor measures it)",
            "",
            markdown_table(("job", "time to first step", "process wall time"), rows),
            "",
            f"Before the job's clock starts: interpreter start-up and imports (python, torch, Lightning, Hydra, "
            f"klue_tc) take {fmt(overhead.get('startup_s'), '.1f', ' s')} in a fresh process. The process wall "
            f"time also holds 2 training steps, one validation pass over the fold's held-out titles and the "
            f"metrics write.",
            "",
            f"Command (run twice, the same cache dir): `{command}`" if command else "",
        ]
    )
    if "projection" in report:
        parts += ["", *projection_lines(report)]
    if report.get("ensemble"):
        parts += ["", *ensemble_lines(report["ensemble"])]
    checks = target_checks(report["results"], overhead, s.get("clock", "wall"))
    parts += [
        "",
        "### Targets (issue 6; pretraining: issue 43)",
        "",
        markdown_table(
            ("target", "met", "measured"),
            [[name, DASH if met is None else ("yes" if met else "NO"), detail] for name, met, detail in checks],
        ),
    ]
    if report.get("notes"):
        parts += ["", "Notes: " + "; ".join(report["notes"])]
    return "\n".join(parts).rstrip() + "\n"


def pretrain_lines(report: dict) -> list[str]:
    s = report["settings"]
    clock = s.get("clock", "wall")
    pretrain = next((r["pretrain"] for r in report["results"] if r.get("pretrain")), {})
    on = "process CPU time" if clock == "cpu" else "wall clock"
    return [
        "### Masked-LM pretraining beside fine-tuning, and achieved GFLOP/s",
        "",
        markdown_table(PRETRAIN_HEADER, pretrain_rows(report["results"], report.get("peak"), clock)),
        "",
        f"titles/s: both loops timed the same way ({on}), from one step's end to the next, the first step "
        f"excluded, batch assembly included (for pretraining also the masking): fine-tuning = klue_tc's bucketed "
        f"run above (Lightning), pretraining = klue_tc.pretraining.pretrain.pretrain_encoder "
        f"(`pretrain.objective=mlm`, mask_p {pretrain.get('mask_p', '?')}, BERT's 80/10/10) on the same "
        f"training titles with the same "
        f"tokenizer, encoder, batch {s['batch_size']}, {s['epochs']} epoch(s), precision and threads, in its own "
        f"process. The masked-LM head scores only the masked rows (their count rounded up to a multiple of "
        f"{pretrain.get('head_row_bucket', '?')}): "
        f"{pretrain.get('head_rows', '?')} rows for {pretrain.get('masked_tokens', '?')} masked of "
        f"{pretrain.get('tokens', '?')} padded positions in the first encoder's timed steps.",
        "",
        "GFLOP/s: FLOPs of the timed steps (klue_tc.training.model_size.forward_flops: torch's flop counter plus the "
        "LSTMs' matrix products, on one title of each padded width the steps met, times the titles at it; for "
        "pretraining plus the head's rows), a training step taken as 3x its forward pass, over the same time "
        "as the titles/s. " + peak_line(report.get("peak"), clock) + _peak_rounds(report.get("peak_rounds")),
    ]


def _peak_rounds(rounds: Optional[Sequence[Optional[float]]]) -> str:
    if not rounds or len(rounds) < 2:
        return ""
    return " Each round's peak: " + " / ".join(fmt(r, ".1f") for r in rounds) + " GFLOP/s."


def projection_lines(report: dict) -> list[str]:
    p = report["projection"]
    st = p["settings"]
    lines = [
        f"### Paper sweep projection ({p['jobs']} single-fold jobs, {p['epochs']} epochs each "
        f"(from {st['source']}), {YNAT_TRAIN_TITLES:,} titles)",
        "",
    ]
    layers = sorted({n for per in p["per_job_s"].values() for n in per})
    lines.append(
        markdown_table(
            ("encoder", *(f"{n} layers: per job" for n in layers)),
            [[enc, *(fmt_seconds(per[n]) for n in layers)] for enc, per in p["per_job_s"].items()],
        )
    )
    lines += ["", f"- sequential, one GPU: **{fmt_seconds(p['sequential_s'])}**"]
    for k, wall in p["parallel_s"].items():
        speedup = next(iter(p["parallel_speedup"][k].values()), 1.0)
        best = " (the best measured)" if k == p.get("best_parallel") else ""
        lines.append(f"- {k} jobs at once on one GPU{best}: **{fmt_seconds(wall)}** (measured speed-up {speedup:.2f}x)")
    concurrency = {int(k): v for k, v in (report.get("concurrency") or {}).items()}
    if concurrency:
        rows = [
            [
                str(k),
                ", ".join(sorted(set((v or {}).get("encoders") or []))) or "—",
                fmt((v or {}).get("aggregate_samples_per_s")),
                fmt((v or {}).get("speedup"), ".2f", "x"),
                fmt((v or {}).get("peak_mb_each") or None),
            ]
            for k, v in sorted(concurrency.items())
        ]
        lines += [
            "",
            markdown_table(
                ("jobs at once", "encoders (in turn)", "titles/s in all", "speed-up over one by one", "peak GPU MB"),
                rows,
            ),
        ]
    lines += [
        "",
        f"Assumptions: per-job time = epochs x (train titles / klue_tc loop titles/s + validation titles / eval "
        f"titles/s) x layers/3, measured at 3 layers with SentencePiece (Mecab and KoBERT pieces assumed the "
        f"same speed), every job running all {p['epochs']} epochs (early stopping only shortens it), plus "
        f"{fmt_seconds(p['overhead_s'])} per job (the cached main job's whole process wall time, start-up to "
        f"exit). With k jobs at once, the GPU part runs at the measured speed-up of k concurrent workers "
        f"started together, their encoders taken in turn (the sweep's mix): the time their epochs take one "
        f"after another at each encoder's own titles/s, over the span they took together; start-up "
        f"overlaps k-fold on the CPU cores.",
    ]
    if p["parallel_assumed_1x"]:
        lines.append(f"Not measured, assumed 1x: {', '.join(p['parallel_assumed_1x'])}.")
    if st.get("jobs_in_file") and st["jobs_in_file"] != p["jobs"]:
        lines.append(
            f"Note: sweeps/paper.yaml's grid has {st['jobs_in_file']} jobs; this projection covers the "
            f"{p['jobs']} of the encoders measured."
        )
    return lines


def print_rich(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal or console.width < 200:  # one line per row, also in logs and pipes
        console = Console(width=200)
    s = report["settings"]
    n_train = next((r["klue_tc"]["train_size"] for r in report["results"] if r.get("klue_tc")), s["limit"])
    clock = ", CPU clock" if s.get("clock") == "cpu" else ""
    table = Table(
        title=f"klue_tc training benchmark: {s['device']}{clock}, {n_train} titles, batch {s['batch_size']}, "
        f"{s['epochs']} epoch(s), {s['layers']} layers"
    )
    for i, name in enumerate(TABLE_HEADER):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in table_rows(report["results"]):
        table.add_row(*row)
    console.print(table)
    console.print(_after_main_table(render(report)), markup=False, highlight=False)


def _after_main_table(markdown: str) -> str:
    """The report below the main table (footnotes, overhead, projection, targets)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("1. "))
    return "\n".join(lines[start:])
