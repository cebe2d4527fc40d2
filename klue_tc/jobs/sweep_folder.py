"""A sweep file's folder named by what its command line changes, so that a re-run with other ARGS
(say `data.limit=3000 trainer.max_epochs=3`) has its own job folders, results store and report
instead of writing into those of the sweep as the file has it.

The name is taken once, as the sweep starts (a Hydra callback), and handed to every job as a
`hydra.sweep.dir` override, so that jobs in other processes or on a cluster find the same folder.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import fields, is_dataclass
from typing import Any, Iterable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from klue_tc.core.config import RunConfig, may_be_in_results_key

# A value shown as it is in a folder name; any other (a path, a list, several choices) as a hash.
PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]{1,24}")
# Outside the schema's results key, yet changing the job: +experiment= picks a group of settings
# (the name it sets is what is outside), the precision asked for is keyed as it resolves, and how a
# file is read (its columns, its label set) is keyed as the titles' fingerprint. Where the files
# are is not named: the same titles anywhere are the same jobs.
KEYED_AS_RESOLVED = {"experiment", "trainer.precision", "data.labels", "data.title_column", "data.label_column"}


def changes_the_job(key: str) -> bool:
    """False for a setting that never changes a job's numbers (where files are, what is logged,
    which fold: the job folder names the fold), by the schema's results-key marks; a config group
    or a variant's own key changes it."""
    if key in KEYED_AS_RESOLVED:
        return True
    node: Any = RunConfig()
    for part in key.split("."):
        if not is_dataclass(node):
            return True
        field = next((f for f in fields(node) if f.name == part), None)
        if field is None:
            return True
        if not may_be_in_results_key(field):
            return False
        node = getattr(node, part)
    return True


def settings_name(task_overrides: Iterable[str], axes: Iterable[str]) -> str:
    """The command line's settings beside the sweep file's axes that change the jobs, sorted, as
    `key=value,key=value` ('' where there are none)."""
    axes = {axis.lstrip("+~") for axis in axes}
    named = []
    for override in OverridesParser.create().parse_overrides(list(task_overrides)):
        key = override.key_or_group
        if key in axes or not changes_the_job(key):
            continue
        if override.is_delete():
            named.append(f"~{key}")
            continue
        value = override.input_line.split("=", 1)[1].strip()  # as given: several choices too
        if not PLAIN_VALUE.fullmatch(value):
            value = hashlib.sha1(value.encode("utf-8")).hexdigest()[:8]
        named.append(f"{key}={value}")
    return ",".join(sorted(named))


class SweepFolderCallback(Callback):
    """Names the sweep's folder `<sweep dir>+<settings>` where the command line changes settings
    that are not the sweep file's axes, unless `hydra.sweep.dir` was given."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra = config.hydra
        if any(o.split("=", 1)[0] == "hydra.sweep.dir" for o in hydra.overrides.hydra):
            return
        axes = OmegaConf.to_container(hydra.sweeper.get("params") or {}, resolve=False)
        name = settings_name(hydra.overrides.task, axes)
        if not name:
            return
        folder = f"{hydra.sweep.dir}+{name}"
        with read_write(hydra), open_dict(hydra):
            hydra.sweep.dir = folder
            # Each job's config is composed again from these overrides (its own appended).
            hydra.overrides.hydra.append(f"hydra.sweep.dir='{folder}'")
        print(f"sweep folder: {folder} (the command line sets {name})", flush=True)
