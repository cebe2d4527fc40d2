"""A sweep file (sweeps/<name>.yaml) composed and expanded into its jobs as `make sweep` runs it, so
that the benchmark's projection and the tests read the grid from the file instead of restating it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
SWEEPS_DIR = REPO_ROOT / "sweeps"
CONF_DIR = REPO_ROOT / "conf"


def _search_path(conf_dir: Path) -> str:
    return f"hydra.searchpath=[file://{conf_dir}]"


def compose_sweep(
    name: str,
    overrides: Sequence[str] = (),
    hydra_config: bool = False,
    sweeps_dir: Path = SWEEPS_DIR,
    conf_dir: Path = CONF_DIR,
) -> DictConfig:
    """The sweep file composed as `--config-dir sweeps --config-name NAME` composes it."""
    from klue_tc.core.config import register_schemas

    register_schemas()
    with initialize_config_dir(str(sweeps_dir), version_base="1.3"):
        return compose(name, overrides=[_search_path(conf_dir), *overrides], return_hydra_config=hydra_config)


class _GroupOptions:
    """The config loader's group listing with the sweep's search path, for `glob(...)` axes."""

    def __init__(self, conf_dir: Path):
        self.loader, self.overrides = GlobalHydra.instance().config_loader(), [_search_path(conf_dir)]

    def get_group_options(self, group: str, results_filter=None) -> list[str]:
        return self.loader.get_group_options(group, results_filter, config_name=None, overrides=self.overrides)


def sweep_jobs(
    name: str, overrides: Sequence[str] = (), sweeps_dir: Path = SWEEPS_DIR, conf_dir: Path = CONF_DIR
) -> list[list[str]]:
    """The jobs Hydra's basic sweeper launches for the sweep file: one override list per job."""
    from klue_tc.core.config import register_schemas

    register_schemas()
    with initialize_config_dir(str(sweeps_dir), version_base="1.3"):
        cfg = compose(name, overrides=[_search_path(conf_dir), *overrides], return_hydra_config=True)
        return expand_grid(cfg.hydra.sweeper.params, (), _GroupOptions(conf_dir))


def expand_grid(
    params: Mapping[str, Any], task_overrides: Sequence[str] = (), group_options: Any = None
) -> list[list[str]]:
    """The jobs Hydra's basic sweeper makes of a sweep file's axes (`hydra.sweeper.params`) and the
    command line's overrides, as it makes them: a value given on the command line replaces the axis
    of that name. `group_options` lists a config group's options for `glob(...)` axes (Hydra's
    config loader while a sweep runs)."""
    lines = [f"{key}={value}" for key, value in params.items()] + list(task_overrides)
    parser = OverridesParser.create(config_loader=group_options)
    return BasicSweeper.split_arguments(parser.parse_overrides(lines), max_batch_size=None)[0]


def job_folds(job: Sequence[str], cv_fold: Optional[int], cv_folds: int) -> int:
    """The folds one job of a sweep trains: one where it names its fold (an axis `cv.fold`, or
    `cv.fold=` set for every job), else every fold of `cv.folds`."""
    named = {line.split("=", 1)[0].lstrip("+~"): line.split("=", 1)[1] for line in job if "=" in line}
    if named.get("cv.fold", "null" if cv_fold is None else str(cv_fold)) != "null":
        return 1
    return int(named["cv.folds"]) if named.get("cv.folds", "").isdigit() else cv_folds
