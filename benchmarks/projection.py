"""The paper sweep's grid and its projected wall time, from measured (and concurrent) throughput."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.constants import ENCODERS, LAYERS, REPO_ROOT, YNAT_TRAIN_TITLES

# The paper sweep (sweeps/paper.yaml): 4 encoders x 2 LN x 5 layer counts x 3 tokenizers x 5 folds.
PAPER_GRID = {"encoders": ENCODERS, "lns": 2, "layers": (2, 3, 4, 5, 6), "tokenizers": 3, "folds": 5}


def project_sweep(
    titles_per_s: dict[str, float],
    eval_titles_per_s: dict[str, float],
    *,
    epochs: int,
    overhead_s: float,
    n_titles: int = YNAT_TRAIN_TITLES,
    folds: int = 5,
    lns: int = 2,
    tokenizers: int = 3,
    layers: Sequence[int] = (2, 3, 4, 5, 6),
    measured_layers: int = LAYERS,
    parallel_speedup: Optional[dict[int, dict[str, float]]] = None,
) -> dict:
    """Wall time of a grid of single-fold jobs (encoder x LN x layers x tokenizer x fold).

    Each job trains on (folds-1)/folds of `n_titles` for `epochs` epochs and validates on the
    rest after every epoch. Training and validation times come from the titles/s measured at
    `measured_layers` layers, scaled by layers/measured_layers (the encoder stack dominates);
    `overhead_s` (start-up to first step, and the end of the job) is added per job.
    With k jobs at once on one GPU, the GPU part runs `parallel_speedup[k][encoder]` times
    faster in aggregate, and the per-job overhead (CPU) overlaps k-fold.
    """
    train_titles = n_titles * (folds - 1) / folds
    val_titles = n_titles / folds
    repeats = lns * tokenizers * folds
    per_job, gpu_total, overhead_total, jobs = {}, {}, 0.0, 0
    for encoder, speed in titles_per_s.items():
        eval_speed = eval_titles_per_s.get(encoder)
        per_job[encoder], gpu_total[encoder] = {}, 0.0
        for n_layers in layers:
            scale = n_layers / measured_layers
            train_s = epochs * train_titles / speed * scale
            val_s = epochs * val_titles / eval_speed * scale if eval_speed else 0.0
            per_job[encoder][n_layers] = train_s + val_s + overhead_s
            gpu_total[encoder] += (train_s + val_s) * repeats
            overhead_total += overhead_s * repeats
            jobs += repeats
    sequential = sum(gpu_total.values()) + overhead_total
    parallel = {}
    for k, speedups in sorted((parallel_speedup or {}).items()):
        parallel[k] = (
            sum(total / speedups.get(encoder, 1.0) for encoder, total in gpu_total.items()) + overhead_total / k
        )
    return {
        "jobs": jobs,
        "epochs": epochs,
        "train_titles": train_titles,
        "val_titles": val_titles,
        "per_job_s": per_job,
        "sequential_s": sequential,
        "parallel_s": parallel,
    }


def grid_axis(spec) -> list[str]:
    """Values of one Hydra sweeper axis: `a,b,c`, `range(a,b[,step])` or a YAML list."""
    if isinstance(spec, (list, tuple)):
        return [str(v) for v in spec]
    text = str(spec).strip()
    match = re.fullmatch(r"range\((-?\d+)\s*,\s*(-?\d+)(?:\s*,\s*(-?\d+))?\)", text)
    if match:
        start, stop, step = int(match[1]), int(match[2]), int(match[3] or 1)
        return [str(v) for v in range(start, stop, step)]
    return [v.strip() for v in text.split(",") if v.strip()]


def paper_sweep_settings(repo: Path = REPO_ROOT) -> dict:
    """max_epochs, layer counts and batch-width multiple of sweeps/paper.yaml (else the schema's
    defaults and the issue's grid)."""
    from omegaconf import OmegaConf

    from klue_tc.config import DataConfig, TrainerConfig

    settings = {
        "epochs": TrainerConfig().max_epochs,
        "layers": PAPER_GRID["layers"],
        "jobs_in_file": None,
        "source": "klue_tc.config.TrainerConfig",
        "pad_multiple": DataConfig().pad_multiple,
    }
    paper = repo / "sweeps" / "paper.yaml"
    if paper.is_file():
        cfg = OmegaConf.to_container(OmegaConf.load(paper), resolve=False)
        params = ((cfg.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
        epochs = params.get("trainer.max_epochs") or (cfg.get("trainer") or {}).get("max_epochs")
        settings["pad_multiple"] = int((cfg.get("data") or {}).get("pad_multiple", settings["pad_multiple"]))
        if epochs is not None and len(grid_axis(epochs)) == 1:
            settings["epochs"], settings["source"] = int(grid_axis(epochs)[0]), str(paper.relative_to(repo))
        if "encoder.layers" in params:
            settings["layers"] = tuple(int(v) for v in grid_axis(params["encoder.layers"]))
        if params:
            jobs = 1
            for spec in params.values():
                jobs *= len(grid_axis(spec))
            settings["jobs_in_file"] = jobs
    return settings


def fastest(trials: Sequence[dict]) -> Optional[dict]:
    return max(trials, key=lambda t: t["samples_per_s"], default=None)


def concurrent_throughput(results: Sequence[dict], solo: Optional[dict[str, float]] = None) -> dict:
    """Aggregate titles/s of concurrent workers: all their titles over the span from the first
    start to the last end (validation included, as in real jobs). With `solo` (titles/s of each
    encoder alone), the speed-up: the time their work takes one job after another, over the span."""
    start = min(r["train_start_wall"] for r in results)
    end = max(r["train_end_wall"] for r in results)
    titles = sum(r["trained_samples"] for r in results)
    one_by_one = [r["trained_samples"] / solo[r["encoder"]] for r in results if solo and solo.get(r.get("encoder"))]
    return {
        "jobs": len(results),
        "encoders": [r.get("encoder") for r in results],
        "aggregate_samples_per_s": titles / (end - start) if end > start else None,
        "speedup": sum(one_by_one) / (end - start) if len(one_by_one) == len(results) and end > start else None,
        "per_job_samples_per_s": [r["samples_per_s"] for r in results],
        "peak_mb_each": max((r.get("cuda_peak_mb") or 0) for r in results),
    }


def gpu_projection(report: dict) -> dict:
    # Wall-time projection: the loop figure (steps, batch assembly, hooks), not steps alone.
    speeds = {
        r["encoder"]: r["klue_tc"].get("loop_samples_per_s") or r["klue_tc"]["samples_per_s"]
        for r in report["results"]
        if r.get("klue_tc")
    }
    evals = {r["encoder"]: r["klue_tc"].get("eval_samples_per_s") for r in report["results"] if r.get("klue_tc")}
    settings = paper_sweep_settings()
    cached = (report.get("overhead") or {}).get("cached") or {}
    overhead_s = cached.get("wall_s") or 0.0
    # k jobs at once: the measured speed-up of the sweep's mix of encoders over one job at a time.
    parallel, assumed = {}, []
    for k, measured in sorted((int(k), v) for k, v in (report.get("concurrency") or {}).items()):
        speedup = (measured or {}).get("speedup")
        if not speedup:
            assumed.append(f"k={k}")
        parallel[k] = {encoder: speedup or 1.0 for encoder in speeds}
    projection = project_sweep(
        speeds,
        evals,
        epochs=settings["epochs"],
        overhead_s=overhead_s,
        layers=settings["layers"],
        parallel_speedup=parallel,
    )
    measured = {k: wall for k, wall in projection["parallel_s"].items() if f"k={k}" not in assumed}
    projection.update(
        settings=settings,
        overhead_s=overhead_s,
        parallel_speedup=parallel,
        parallel_assumed_1x=assumed,
        best_parallel=min(measured, key=measured.get) if measured else None,
    )
    return projection
