"""Which configurations the sweep files' grids hold, so that a results store's configurations that no
sweep file runs any more are told apart (`python -m klue_tc.prune`) without training anything.

A configuration is named by its results key's settings part (`settings_key`): the key
klue_tc/store/results.py's `config_hash` makes of the settings alone. The rest of a results key (the
titles' content, the precision the machine resolves, the tokenizer's model file, the pretraining
corpus, a teacher's soft labels) comes from the data and the machine, not from a sweep file; matching
on the settings keeps a configuration whose data changed, never drops one a grid still holds. Each
grid is expanded as the sweep launcher expands it (Hydra's basic sweeper), with the command line's
settings given beside its axes, and each configuration composed once (its folds share the key).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from klue_tc.core.config import RunConfig, register_schemas, validate
from klue_tc.core.errors import KlueTcError
from klue_tc.jobs.sweep_folder import changes_the_job
from klue_tc.jobs.sweeps import CONF_DIR, _GroupOptions, _search_path, expand_grid
from klue_tc.store.results import CONFIG_FILE, config_hash

SWEEP_COMMAND = "multirun.yaml"  # what Hydra saves of a sweep's command in its folder


def settings_key(run: RunConfig) -> str:
    """The results key of `run` with only its settings in it (no data, precision or model files)."""
    return config_hash(run, "", "")


def sweep_files(sweeps_dir: Path) -> list[Path]:
    """The sweep files in `sweeps_dir` (`_*.yaml` are what they share, not sweeps)."""
    return sorted(p for p in Path(sweeps_dir).glob("*.yaml") if not p.name.startswith("_"))


class GridError(KlueTcError):
    """A sweep file whose grid cannot be composed with the settings given: nothing can be said absent from it."""


def sweep_grid(sweep_file: Path, overrides: Sequence[str] = (), conf_dir: Path = CONF_DIR) -> set[str]:
    """The settings keys of a sweep file's configurations, each composed with `overrides` (a sweep
    command's settings beside the axes; one naming an axis replaces it, as on the command line)."""
    register_schemas()
    sweep_file = Path(sweep_file).absolute()
    keys = set()
    try:
        with initialize_config_dir(str(sweep_file.parent), version_base="1.3"):
            base = [_search_path(conf_dir)]
            cfg = compose(sweep_file.stem, overrides=[*base, *overrides], return_hydra_config=True)
            params = OmegaConf.to_container(cfg.hydra.sweeper.get("params") or {}, resolve=False)
            jobs = expand_grid(params, overrides, _GroupOptions(conf_dir))
            # A configuration's folds share its key: each is composed once.
            for job in sorted({tuple(o for o in job if o.split("=", 1)[0] != "cv.fold") for job in jobs}):
                keys.add(settings_key(validate(compose(sweep_file.stem, overrides=[*base, *job]))))
    except Exception as err:  # Hydra's and the schema's errors alike: the grid is unknown
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GridError(f"{sweep_file}: its grid could not be composed ({detail})") from None
    return keys


@dataclass(frozen=True)
class StoredConfiguration:
    """A configuration of a results store: its key, the sweep file that made it (None: a single
    run), its settings key (None where its config.yaml is missing or this code cannot read it) and
    what it is, in words."""

    key: str
    sweep: Optional[str]
    settings: Optional[str]
    describe: str


def stored_configurations(store: Path) -> list[StoredConfiguration]:
    """Every configuration folder of `store` that holds a fold record or model files."""
    register_schemas()
    found = []
    for folder in sorted(p for p in Path(store).iterdir() if p.is_dir() and (p / CONFIG_FILE).is_file()):
        try:
            config = yaml.safe_load((folder / CONFIG_FILE).read_text(encoding="utf-8"))
            run = validate(OmegaConf.create(config))
        except Exception:  # another code's config, or a damaged one: nothing is known of its grid
            found.append(StoredConfiguration(folder.name, None, None, "its config.yaml is not readable here"))
            continue
        describe = f"{run.experiment}, {run.encoder.ln.value}-LN, {run.encoder.layers} layers, {run.tokenizer.name}" + (
            f", pretrain={run.pretrain.objective}" if run.pretrain.active else ""
        )
        found.append(StoredConfiguration(folder.name, run.sweep or None, settings_key(run), describe))
    return found


def sweep_command_settings(store: Path) -> tuple[list[str], Optional[Path]]:
    """The settings the sweep that fills `store` was run with beside its axes (`ARGS="..."`), as
    its folder's multirun.yaml keeps them: those that change a job's numbers, not its axes (a cell
    re-run alone names them) nor where files are. None where the store is not in a sweep's folder."""
    path = Path(store).absolute().parent / SWEEP_COMMAND
    if not path.is_file():
        return [], None
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        hydra = saved.get("hydra") or {}
        task = list((hydra.get("overrides") or {}).get("task") or [])
        axes = {str(axis).lstrip("+~") for axis in ((hydra.get("sweeper") or {}).get("params") or {})}
    except (OSError, yaml.YAMLError, AttributeError):
        return [], None
    kept = []
    for override in task:
        key = str(override).split("=", 1)[0].lstrip("+~")
        if key not in axes and key != "cv.fold" and changes_the_job(key):
            kept.append(str(override))
    return kept, path
