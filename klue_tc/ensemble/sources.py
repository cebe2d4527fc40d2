"""The fold records an ensemble is built from: those below the folder given, and, for a sweep or
run directory, the same configurations' records in the results store its runs name (results.dir),
wherever that lies: a run directory keeps each fold's predicted classes only, the store keeps
their probabilities too."""

from __future__ import annotations

from pathlib import Path

from klue_tc.store.records import FoldResult


def named_stores(directory: Path) -> list[Path]:
    """The results stores outside `directory` that the runs' config.yaml below it name."""
    from klue_tc.report.loading import read_config

    found = set()
    for path in sorted(directory.rglob("config.yaml")):
        config = read_config(path)
        named = (config.get("results") or {}).get("dir") if config is not None else None
        if not isinstance(named, str):
            continue
        store = Path(named).expanduser().resolve()
        if store.is_dir() and not store.is_relative_to(directory.resolve()):
            found.add(store)
    return sorted(found)


def ensemble_records(directory: Path) -> list[FoldResult]:
    """Every configuration's fold records below `directory`, the results store's copy preferred."""
    from klue_tc.report.loading import fold_records

    records = {(r.config_hash, r.fold): r for r in fold_records(directory)}
    mine = {key for key, _ in records}
    for store in named_stores(directory):
        records |= {(r.config_hash, r.fold): r for r in fold_records(store) if r.config_hash in mine}
    return list(records.values())
