"""A sweep file (sweeps/<name>.yaml) composed and expanded into its jobs as `make sweep` runs it, so
that the benchmark's projection and the tests read the grid from the file instead of restating it."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

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
        params = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
        parser = OverridesParser.create(config_loader=_GroupOptions(conf_dir))
        return BasicSweeper.split_arguments(parser.parse_overrides(params), max_batch_size=None)[0]
