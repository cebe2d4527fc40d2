"""Run the main job in-process (Hydra's compose API) or as a user would (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from conftest import REPO, TINY_MODEL
from klue_tc.core.config import register_schemas


def one_tiny_fold(data: Path, results: Path, *extra: str) -> list[str]:
    """Fold 0 of 2, one epoch of a one-layer tiny Transformer: the job a test trains to look at what
    it writes."""
    return [
        "+experiment=transformer",
        f"data.path={data}",
        "cv.folds=2",
        "cv.fold=0",
        "trainer.max_epochs=1",
        "encoder.layers=1",
        f"results.dir={results}",
        *TINY_MODEL,
        *extra,
    ]


def tiny_trained_sweep(tmp: Path, epochs: int) -> tuple[Path, Path, list[str]]:
    """One tiny one-layer Transformer trained for real on 2 folds into `tmp/sweep`'s results store,
    with validation titles: the records an ensemble is built from. Returns the sweep's folder, the
    validation file and the overrides every job on these titles shares."""
    from conftest import make_headlines, write_tsv

    train = write_tsv(tmp / "train.tsv", make_headlines(per_class=10, seed=0))
    validation = write_tsv(tmp / "validation.tsv", make_headlines(per_class=4, seed=1))
    common = [
        f"data.path={train}",
        f"data.validation_path={validation}",
        f"data.cache_dir={tmp / 'cache'}",
        "logger=none",
        *TINY_MODEL,
        "+experiment=transformer",
        "encoder.layers=1",
        f"trainer.max_epochs={epochs}",
    ]
    run_in_process([*common, f"results.dir={tmp / 'sweep' / 'results'}", "cv.folds=2"], tmp / "sweep" / "run")
    return tmp / "sweep", validation, common


def compose_job(overrides: list[str], run_dir: Path):
    register_schemas()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def run_in_process(overrides: list[str], run_dir: Path) -> float:
    """What the job hands back to a sweeper (its CV macro-F1), as `python -m klue_tc` does."""
    from klue_tc.jobs.run import run_job
    from klue_tc.jobs.sweep_objective import sweeper_value

    return sweeper_value(run_job(compose_job(overrides, run_dir)))


def run_python(args: list[str], cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python ARGS` in a fresh process that imports this checkout's klue_tc."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_cli(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return run_python(["-m", "klue_tc", *args], cwd=cwd, timeout=timeout)


def run_sweep_job_in_process(sweep: str, overrides: list[str]) -> Path:
    """One job of sweeps/<sweep>.yaml as `make sweep` runs it: its folder and its store under the
    sweep file's own (relative) sweep dir; the job's run directory is returned."""
    from hydra.types import RunMode

    from klue_tc.jobs.run import run_job
    from klue_tc.jobs.sweeps import compose_sweep

    cfg = compose_sweep(sweep, overrides, hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.runtime.output_dir = ""
    HydraConfig.instance().set_config(cfg)  # the job folder's name reads the choices made
    run_dir = (Path(cfg.hydra.sweep.dir) / cfg.hydra.sweep.subdir).absolute()
    OmegaConf.set_readonly(cfg.hydra, False)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    HydraConfig.instance().set_config(cfg)
    run_job(cfg)
    return run_dir
