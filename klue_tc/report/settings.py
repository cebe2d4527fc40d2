"""The settings every configuration in one report must share: the titles, the folds and the training
schedule (data, cv and trainer as far as they change the numbers, and the seed). A grid's axes (the
encoder, head, tokenizer, pretraining) and a search's hyper-parameters (optim, augment) may vary;
records that differ in these cannot sit in one table, so the report names the keys and stops.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

from klue_tc.core.config import CVConfig, DataConfig, RunConfig, TrainerConfig, keyed_settings
from klue_tc.core.errors import KlueTcError
from klue_tc.report.loading import read_config

SHARED_SECTIONS = {"data": DataConfig(), "cv": CVConfig(), "trainer": TrainerConfig()}


class MixedSettingsError(KlueTcError):
    """The folder's records were made with different shared settings."""


def shared_settings(config: dict) -> dict[str, Any]:
    """A run's config.yaml as `section.key` -> value for the shared settings; a key an older config
    lacks takes the schema's default."""
    settings = {"seed": config.get("seed", RunConfig.seed)}
    for section, defaults in SHARED_SECTIONS.items():
        given = config.get(section) or {}
        for key, default in keyed_settings(defaults).items():
            settings[f"{section}.{key}"] = given.get(key, default)
    return settings


def configs_by_key(directory: Path) -> dict[str, dict]:
    """Each configuration's config.yaml below `directory`, by its key: a results store's
    <key>/config.yaml and the one beside each metrics.json."""
    found = {}
    for path in sorted(directory.rglob("metrics.json")):
        try:
            key = json.loads(path.read_text(encoding="utf-8"))["config_hash"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # the report names unreadable metrics files
        found[key] = path.parent / "config.yaml"
    for path in sorted(directory.rglob("fold*.json")):
        found.setdefault(path.parent.name, path.parent / "config.yaml")
    configs = {key: read_config(path) for key, path in found.items()}
    return {key: config for key, config in configs.items() if config is not None}


def differing_settings(configs: Iterable[dict]) -> dict[str, list[str]]:
    """The shared settings that differ between `configs`, each with its values as written."""
    seen: dict[str, set[str]] = {}
    for config in configs:
        for key, value in shared_settings(config).items():
            seen.setdefault(key, set()).add(json.dumps(value))
    return {key: sorted(values) for key, values in seen.items() if len(values) > 1}


def refuse_mixed_settings(directory: Path, config_hashes: Iterable[str]) -> None:
    """One line naming the settings that differ between the configurations of `config_hashes`."""
    configs = configs_by_key(directory)
    differing = differing_settings(configs[key] for key in set(config_hashes) if key in configs)
    if differing:
        named = "; ".join(f"{key} {' / '.join(values)}" for key, values in sorted(differing.items()))
        raise MixedSettingsError(
            f"{directory}: its records were made with different settings ({named}), which one table "
            "cannot compare; report on a folder of one setting (a sweep re-run with other ARGS has its "
            "own: outputs/sweeps/<sweep>+<settings>)"
        )


def declared_note(directory: Path) -> Optional[str]:
    """The one-line note the runs below `directory` declared for their report (`report.note`, set by
    their sweep file: sweeps/smoke.yaml's says its scores mean nothing); None where none did. Notes
    that differ between runs are all given, in order."""
    notes = []
    for config in configs_by_key(Path(directory)).values():
        note = (config.get("report") or {}).get("note")
        if isinstance(note, str) and note.strip() and " ".join(note.split()) not in notes:
            notes.append(" ".join(note.split()))
    return "; ".join(notes) or None
