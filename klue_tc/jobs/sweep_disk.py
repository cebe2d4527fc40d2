"""What a sweep leaves on disk, said before it starts and after it ends (a Hydra callback).

At its start, one line: what its folders hold now (its results store, pretrained encoders, W&B runs,
the cache: klue_tc/store/disk.py), and what it will add: its folds times the mean fold of the
store's records (or, in an empty store, a fold of the paper grid's size). At its end, one line:
what it added, by kind. A sweep that adds more than the disk has free is said at the start.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from pathlib import Path
from typing import Any, Optional

from hydra.core.global_hydra import GlobalHydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from klue_tc.core.files import human_size
from klue_tc.jobs.sweeps import expand_grid, job_folds
from klue_tc.store.disk import PAPER_FOLD, DiskUse, Places, fold_sizes, measure, typical_fold

log = logging.getLogger(__name__)


def sweep_places(config: DictConfig) -> Places:
    """The sweep's folders, as its jobs will resolve them (klue_tc/jobs/job_setup.py's results_root)."""
    sweep_dir = Path(config.hydra.sweep.dir)
    results = OmegaConf.select(config, "results.dir")
    if results:
        store = Path(results).expanduser()
    elif OmegaConf.select(config, "sweep"):
        store = sweep_dir / "results"
    else:
        store = Path("outputs/results")
    pretrained = OmegaConf.select(config, "pretrain.dir")
    cache = OmegaConf.select(config, "data.cache_dir")
    return Places(
        store,
        Path(pretrained).expanduser() if pretrained else None,
        sweep_dir,
        Path(cache).expanduser() if cache else None,
    )


def sweep_folds(config: DictConfig) -> Optional[int]:
    """The folds the sweep's jobs train (finished ones among them add nothing), or None where the
    sweeper does not say its jobs beforehand (a search's trials)."""
    sweeper = config.hydra.sweeper
    cv_fold, cv_folds = OmegaConf.select(config, "cv.fold"), int(OmegaConf.select(config, "cv.folds") or 1)
    params = sweeper.get("params")
    if sweeper.get("n_trials"):  # Optuna's: one job of the configuration's folds a trial
        return int(sweeper.n_trials) * job_folds([], cv_fold, cv_folds)
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    task = list(config.hydra.overrides.task)
    jobs = expand_grid(OmegaConf.to_container(params, resolve=False) if params else {}, task, _group_options())
    return sum(job_folds(job, cv_fold, cv_folds) for job in jobs)


def _group_options() -> Any:
    return GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None


def start_line(places: Places, now: DiskUse, folds: Optional[int]) -> str:
    line = f"disk at the sweep's start: {human_size(now.total)} ({now.split()})"
    if folds is None:
        return line + "; what it adds is not known before its trials run"
    sizes = fold_sizes(places.store)
    fold, recorded = typical_fold(sizes), len(sizes)
    if fold is None:
        fold, source = PAPER_FOLD, "a fold at the paper grid's size, the store holding no record to measure"
    else:
        source = f"the mean fold of the store's {recorded} record{'s' if recorded != 1 else ''}"
    adds = folds * fold.total
    line += (
        f"; it adds up to {human_size(adds)}: {folds} fold{'s' if folds != 1 else ''} x {human_size(fold.total)}, "
        f"{source} ({fold.parts()}); a fold already recorded adds nothing"
    )
    free = free_space(places.store)
    if free is not None and adds > free:
        line += f"; only {human_size(free)} is free there"
    return line


def end_line(before: DiskUse, after: DiskUse) -> str:
    added = after.minus(before)
    return (
        f"disk at the sweep's end: it added {human_size(max(added.total, 0))} ({added.split(signed=True)}); "
        f"{human_size(after.total)} in all"
    )


def free_space(path: Path) -> Optional[int]:
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    with contextlib.suppress(OSError):
        return shutil.disk_usage(existing).free
    return None


class SweepDiskCallback(Callback):
    """Says what the sweep's folders hold on disk as it starts and what it added as it ends. Runs
    after the sweep folder is named (sweeps/_base.yaml lists it after SweepFolderCallback)."""

    def __init__(self) -> None:
        self.places: Optional[Places] = None
        self.before: Optional[DiskUse] = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self.places = sweep_places(config)
            self.before = measure(self.places)
            line = start_line(self.places, self.before, sweep_folds(config))
        except Exception as err:  # a line about disk never stops a sweep
            log.warning("the disk the sweep uses was not measured (%s: %s)", type(err).__name__, err)
            self.places = None
            return
        print(line, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.places is None or self.before is None:
            return
        try:
            line = end_line(self.before, measure(self.places))
        except Exception as err:
            log.warning("the disk the sweep used was not measured (%s: %s)", type(err).__name__, err)
            return
        print(line, flush=True)
