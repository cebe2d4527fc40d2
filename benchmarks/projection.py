"""The paper sweep's projected wall time, its grid read from sweeps/paper.yaml, from measured (and
concurrent) throughput."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import OmegaConf

from benchmarks.constants import LAYERS, REPO_ROOT, YNAT_TRAIN_TITLES


def project_sweep(
    titles_per_s: dict[str, float],
    eval_titles_per_s: dict[str, float],
    *,
    epochs: int,
    overhead_s: float,
    jobs: dict[str, dict[int, int]],
    n_titles: int = YNAT_TRAIN_TITLES,
    folds: int = 5,
    measured_layers: int = LAYERS,
    parallel_speedup: Optional[dict[int, dict[str, float]]] = None,
) -> dict:
    """Wall time of a sweep's single-fold jobs: `jobs[encoder][layers]` of them (sweep_grid), for
    the encoders whose speed was measured.

    Each job trains on (folds-1)/folds of `n_titles` for `epochs` epochs and validates on the
    rest after every epoch. Training and validation times come from the titles/s measured at
    `measured_layers` layers, scaled by layers/measured_layers (the encoder stack dominates);
    `overhead_s` (start-up to first step, and the end of the job) is added per job.
    With k jobs at once on one GPU, the GPU part runs `parallel_speedup[k][encoder]` times
    faster in aggregate, and the per-job overhead (CPU) overlaps k-fold.
    """
    train_titles = n_titles * (folds - 1) / folds
    val_titles = n_titles / folds
    per_job, gpu_total, overhead_total, count = {}, {}, 0.0, 0
    for encoder, speed in titles_per_s.items():
        eval_speed = eval_titles_per_s.get(encoder)
        per_job[encoder], gpu_total[encoder] = {}, 0.0
        for n_layers, repeats in sorted(jobs.get(encoder, {}).items()):
            scale = n_layers / measured_layers
            train_s = epochs * train_titles / speed * scale
            val_s = epochs * val_titles / eval_speed * scale if eval_speed else 0.0
            per_job[encoder][n_layers] = train_s + val_s + overhead_s
            gpu_total[encoder] += (train_s + val_s) * repeats
            overhead_total += overhead_s * repeats
            count += repeats
    sequential = sum(gpu_total.values()) + overhead_total
    parallel = {}
    for k, speedups in sorted((parallel_speedup or {}).items()):
        parallel[k] = (
            sum(total / speedups.get(encoder, 1.0) for encoder, total in gpu_total.items()) + overhead_total / k
        )
    return {
        "jobs": count,
        "epochs": epochs,
        "train_titles": train_titles,
        "val_titles": val_titles,
        "per_job_s": per_job,
        "sequential_s": sequential,
        "parallel_s": parallel,
    }


@functools.cache  # composing the sweep file takes seconds; it does not change under a run
def sweep_grid(name: str = "paper", repo: Path = REPO_ROOT) -> dict:
    """sweeps/<name>.yaml as `make sweep` expands it: its jobs per encoder and layer count, and
    the epochs, folds and batch-width multiple its jobs run with."""
    from klue_tc.jobs.sweeps import compose_sweep, sweep_jobs

    dirs = {"sweeps_dir": repo / "sweeps", "conf_dir": repo / "conf"}
    jobs = sweep_jobs(name, **dirs)
    composed: dict[tuple, object] = {}  # one composition per experiment and encoder choice
    grid: dict[str, dict[int, int]] = {}
    experiments: dict[str, str] = {}  # each encoder's experiment (its head and sizes) in the sweep
    settings = set()
    for job in jobs:
        choices = tuple(o for o in job if o.split("=", 1)[0] in ("+experiment", "encoder"))
        if choices not in composed:
            composed[choices] = compose_sweep(name, choices, **dirs)
        cfg = composed[choices]
        values = dict(o.split("=", 1) for o in job)
        layers = int(values.get("encoder.layers", cfg.encoder.layers))
        grid.setdefault(cfg.encoder.name, {}).setdefault(layers, 0)
        grid[cfg.encoder.name][layers] += 1
        experiments.setdefault(cfg.encoder.name, cfg.get("experiment"))
        settings.add(tuple(values.get(key, OmegaConf.select(cfg, key)) for key in SETTINGS))
    if len(settings) != 1:
        raise ValueError(f"sweeps/{name}.yaml: its jobs differ in {', '.join(SETTINGS)}; one projection needs one")
    epochs, folds, pad_multiple = (int(v) for v in settings.pop())
    return {
        "jobs": grid,
        "experiments": experiments,
        "jobs_in_file": len(jobs),
        "epochs": epochs,
        "folds": folds,
        "pad_multiple": pad_multiple,
        "layers": tuple(sorted({n for per in grid.values() for n in per})),
        "source": f"sweeps/{name}.yaml",
    }


SETTINGS = ("trainer.max_epochs", "cv.folds", "data.pad_multiple")


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
    settings = sweep_grid("paper")
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
        jobs=settings["jobs"],
        folds=settings["folds"],
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
