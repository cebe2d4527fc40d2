"""The report's input: fold records (klue_tc.store.records' typed loaders) and the runs' settings (the typed schemas).

Every `metrics.json` and results-store record below a folder is read; fold records are merged by
`config_hash` (a fold seen twice counts once).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import yaml
from omegaconf import OmegaConf

from klue_tc.core.config import CVConfig, DataConfig, TrainerConfig
from klue_tc.core.errors import KlueTcError
from klue_tc.report.labels import shown_design
from klue_tc.report.replicates import REPLICATE, grouped, pretraining_seed
from klue_tc.store.records import FoldResult, RunResult

log = logging.getLogger(__name__)

DESCRIBE = ["tokenizer", "encoder", "ln", "head", "layers"]
# What names a cell of the grid: the table's columns and the encoder's starting point (every record
# has one: klue_tc.store.records reads older records, made before self-pretraining, as from scratch).
GRID = [*DESCRIBE, "pretrain"]
# Hydra's Optuna sweeper writes the study's best trial here, in the sweep directory.
OPTUNA_RESULTS = "optimization_results.yaml"


class NoResultsError(KlueTcError):
    """The folder holds no finished run to report on."""


class FinalModelsOnlyError(NoResultsError):
    """The folder's runs are all final models (cv.folds=1): nothing failed, there is no CV score to compare."""


def fold_frame(directory: str | Path) -> pd.DataFrame:
    """One row per (configuration, fold), from every metrics.json below `directory` and every
    results-store record (<key>/fold<k>.json) there: a folder of records alone, such as the
    committed docs/study/results, is reported on without its run folders."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NoResultsError(f"{directory}: no such directory")
    rows, final_models = [], []
    for path in sorted(directory.rglob("metrics.json")):
        try:
            run = RunResult.load(path)
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("%s skipped: not a klue_tc metrics file (%s: %s)", path, type(err).__name__, err)
            continue
        if run.cv_folds == 1:
            final_models.append(path.parent)
            continue
        describe = {**shown_design(run.describe), "config_hash": run.config_hash}
        seed = config_seed(path.parent / "config.yaml")
        rows += [fold_row(describe, upgraded_record(record, seed)) for record in run.folds]
    rows += stored_rows(directory)
    if final_models:
        log.info("left out, final models (cv.folds=1) with no CV score: %s", ", ".join(map(str, final_models)))
    if not rows and final_models:
        raise FinalModelsOnlyError(
            f"{directory}: only final models (cv.folds=1), trained on every title with no CV score to "
            "compare; each one's validation score is in its metrics.json and last line"
        )
    if not rows:
        raise NoResultsError(f"{directory}: no metrics.json or results record found (nothing finished to report on)")
    every = pd.DataFrame(rows).drop_duplicates(["config_hash", "fold"], keep="last")
    every, conflicts = grouped(every)  # a configuration pretrained with several seeds is one cell
    frame = every.dropna(subset=["f1"])
    if frame.empty:
        raise NoResultsError(f"{directory}: no fold in any metrics.json has an F1 score")
    frame = frame.reset_index(drop=True)
    frame.attrs["diverged"] = every[every["diverged"] != ""].to_dict("records")  # listed, never averaged
    frame.attrs["replicate_conflicts"] = conflicts
    for line in conflicts:
        log.warning("%s", line)
    return frame


def ensemble_scores(directory: Path) -> dict[str, float]:
    """Each configuration's fold ensemble on the validation titles (its folds' averaged
    probabilities: what a run's last line prints and predict uses), from the runs below `directory`
    that trained or reused all its folds; a job of one fold of several scored that fold alone."""
    scores = {}
    for path in sorted(directory.rglob("metrics.json")):
        try:
            run = RunResult.load(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # fold_frame names it
        if run.validation is not None and run.cv_folds > 1 and len(run.folds) == run.cv_folds:
            scores[run.config_hash] = run.validation.ensemble.f1
    return scores


def store_roots(directory: Path) -> list[Path]:
    """The results stores below `directory` (each holds <key>/fold<k>.json)."""
    return sorted({path.parent.parent for path in directory.rglob("fold*.json")})


def unfinished_line(*directories: Path) -> str:
    """One line for the folds of the results stores below `directories` that are not finished (a
    sweep writing the store meanwhile): those still running and those interrupted, whose records the
    report cannot hold; '' where there are none. Their records appear whole or not at all, so what
    is read meanwhile is the finished folds only."""
    from klue_tc.store.in_progress import Unfinished, unfinished_folds

    roots = {
        path.parent.parent
        for directory in directories
        for pattern in ("fold*.lock", "fold*.training")
        for path in Path(directory).rglob(pattern)
    }
    unfinished = sum((unfinished_folds(root) for root in sorted(roots)), Unfinished())
    line = unfinished.line()
    if not line:
        return ""
    where = ", ".join(map(str, sorted(roots))) if len(roots) <= 2 else f"{len(roots)} results stores"
    return f"{where}: {line}; read: the finished folds only"


def stored_rows(directory: Path) -> list[dict]:
    """Rows from the results-store records below `directory` (those that name their configuration)."""
    from klue_tc.store.results import CONFIG_FILE, ResultsStore

    rows, seeds = [], {}
    for root in store_roots(directory):
        for record in ResultsStore(root).records():
            if record.describe is None or not record.config_hash:
                continue
            if record.config_hash not in seeds:  # one config.yaml per configuration, read once
                seeds[record.config_hash] = config_seed(root / record.config_hash / CONFIG_FILE)
            describe = {**shown_design(record.describe), "config_hash": record.config_hash}
            rows.append(fold_row(describe, upgraded_record(record, seeds[record.config_hash])))
    return rows


def config_seed(path: Path) -> int:
    """A run's `seed` as its config.yaml says (the schema's default where it is unreadable or silent)."""
    from klue_tc.core.config import RunConfig

    config = read_config(path) if path.is_file() else None
    seed = (config or {}).get("seed", RunConfig.seed)
    return int(seed) if isinstance(seed, int) else RunConfig.seed


def fold_records(directory: str | Path) -> list[FoldResult]:
    """The fold records below `directory` that name their configuration, as `fold_frame` counts
    them (one per configuration and fold, the last found), whole: with their learning curves, model
    sizes and, from a results store, per-title predictions. Diverged folds are left out."""
    from dataclasses import replace

    from klue_tc.store.results import CONFIG_FILE, ResultsStore

    directory = Path(directory)
    found: dict[tuple[str, int], FoldResult] = {}
    for path in sorted(directory.rglob("metrics.json")):
        try:
            run = RunResult.load(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # fold_frame names it
        if run.cv_folds == 1:  # a final model: fold_frame names it
            continue
        seed = config_seed(path.parent / "config.yaml")
        for record in run.folds:
            record = replace(record, describe=run.describe, config_hash=run.config_hash)
            found[run.config_hash, record.fold] = upgraded_record(record, seed)
    for root in store_roots(directory):
        for record in ResultsStore(root).records():
            if record.describe is not None and record.config_hash:
                seed = config_seed(root / record.config_hash / CONFIG_FILE)
                found[record.config_hash, record.fold] = upgraded_record(record, seed)
    return [r for r in found.values() if not r.diverged and r.f1 is not None and not math.isnan(r.f1)]


def upgraded_record(record: FoldResult, run_seed: int) -> FoldResult:
    """The record as every section reads it, whichever code wrote it: beside klue_tc.store.records'
    `upgraded`, the one place that fills in what older code left out of a pretrained encoder's note,
    the seed that pretrained it (the run's `seed`, before records named their own) and, where it
    names no machine, the fold's own when the fold's first step waited for that pretraining."""
    from dataclasses import replace

    stored = record.pretrained
    if not stored:
        return record
    stored = {"seed": run_seed, **stored}
    seconds = stored.get("seconds") or 0.0
    waited = record.time_to_first_step_s is not None and record.time_to_first_step_s >= 0.9 * seconds
    if not stored.get("device") and seconds and waited:
        stored = {**stored, "device": record.device, "threads": record.threads}
    return replace(record, pretrained=stored)


def fold_row(describe: dict, record: FoldResult) -> dict:
    """One fold's row of the frame, from its record as `upgraded_record` reads it."""
    return {
        **describe,
        "fold": record.fold,
        "f1": record.f1,
        "accuracy": record.accuracy,
        "validation_f1": record.validation.f1 if record.validation else float("nan"),
        "best_epoch": record.best_epoch,
        "epochs_run": record.epochs_run,
        "still_improving": record.epochs_run > 0 and record.best_epoch == record.epochs_run,
        "train_samples_per_s": record.train_samples_per_s,
        "seconds": record.train_seconds,
        "code": record.code.label() if record.code else "unknown",
        # the part of it every configuration shares ("": a record of older code, which kept none)
        "shared_code": (record.code.shared_label() if record.code else None) or "",
        "precision": record.precision,
        "device": record.device or "unknown",
        "diverged": record.diverged or "",
        "selected_on": record.selected_on,
        "val_size": record.val_size,  # the held-out titles the fold's F1 was measured on
        "classes": class_count(record),
        # the inner split's lowest cross-entropy over the epochs: near ln K, nothing learnt from the titles
        "best_inner_loss": min((e.inner_loss for e in record.learning_curve), default=float("nan")),
        REPLICATE: pretraining_seed(record),
    }


def class_count(record: FoldResult) -> int:
    """A validation score names every class it scored; without one, the labels YNAT has."""
    from klue_tc.data.titles import NUM_CLASSES

    return len(record.validation.per_class_f1) if record.validation and record.validation.per_class_f1 else NUM_CLASSES


@dataclass
class Recipe:
    """The settings of the runs' config.yaml that the report shows and the baseline repeats."""

    seed: int = 42
    data: DataConfig = field(default_factory=DataConfig)
    cv: CVConfig = field(default_factory=CVConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # The runs' cv.inner_fraction; None: runs of older code, which chose their epoch on the scored fold.
    inner_fraction: Optional[float] = None

    def same_titles_and_folds(self) -> tuple:
        """What must agree between runs for one baseline row to fit them all."""
        return (self.data.path, self.data.limit, self.data.validation_path, self.cv.folds, self.cv.seed, self.seed)


def known_keys(schema: Any, values: Any) -> Any:
    """`values` without the keys `schema` (a dataclass) lacks, at every level: records written by
    other versions of the code may carry settings this one no longer has."""
    if not (is_dataclass(schema) and isinstance(values, dict)):
        return values
    names = {f.name: f for f in fields(schema)}
    return {k: known_keys(getattr(schema, k, None), v) for k, v in values.items() if k in names}


def read_config(path: Path) -> Optional[dict]:
    """A config.yaml as written, None where it is unreadable or no mapping."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return config if isinstance(config, dict) else None


def run_config(path: Path) -> Optional[dict]:
    """A run's config.yaml (one with data and cv sections), None where the file is not one."""
    config = read_config(path)
    if config is None or not (isinstance(config.get("data"), dict) and isinstance(config.get("cv"), dict)):
        return None
    return config


def load_recipe(path: Path) -> Optional[Recipe]:
    """A config.yaml's data, CV and trainer settings, typed by the schema (None: not a run's config)."""
    if (config := run_config(path)) is None:
        return None
    schema = OmegaConf.structured(Recipe)
    try:
        recipe = OmegaConf.to_object(OmegaConf.merge(schema, known_keys(Recipe(), config)))
    except Exception as err:  # a config.yaml the schema cannot read is no run's settings
        log.warning("%s skipped: %s", path, str(err).splitlines()[0])
        return None
    recipe.inner_fraction = config["cv"].get("inner_fraction")
    return recipe


def is_final_model(metrics_path: Path) -> bool:
    """A run of cv.folds=1: one model on every title, scored on the validation titles alone."""
    try:
        return json.loads(metrics_path.read_text(encoding="utf-8")).get("cv_folds") == 1
    except (OSError, ValueError, AttributeError):
        return False


def recipe_files(directory: Path) -> list[Path]:
    """The config.yaml of every finished run below `directory` (beside its metrics.json) and of every
    configuration with records in a results store there; not those of a run stopped before it
    finished (no record of its settings is in the report), nor Hydra's and W&B's copies."""
    from klue_tc.store.results import CONFIG_FILE

    runs = [path.parent / "config.yaml" for path in directory.rglob("metrics.json") if not is_final_model(path)]
    stored = [
        key / CONFIG_FILE for root in store_roots(directory) for key in {p.parent for p in root.glob("*/fold*.json")}
    ]
    return sorted({path for path in runs + stored if path.is_file()})


RECIPE_SETTINGS = ("data.path", "data.limit", "data.validation_path", "cv.folds", "cv.seed", "seed")


def run_recipe(directory: Path) -> Optional[Recipe]:
    """The data and CV settings of the runs below `directory` (their config.yaml), if they agree.
    Runs that differ only in whether they scored a validation file share their folds: the baseline
    is scored on that file."""
    recipes = [r for r in map(load_recipe, recipe_files(directory)) if r is not None]
    validation = {r.data.validation_path for r in recipes} - {None}
    if len(validation) == 1:
        for recipe in recipes:
            recipe.data.validation_path = next(iter(validation))
    # compared as JSON text: a setting may be a list, which does not hash
    settings = {tuple(json.dumps(value) for value in r.same_titles_and_folds()) for r in recipes}
    if len(settings) > 1:
        differing = [name for name, values in zip(RECIPE_SETTINGS, zip(*settings)) if len(set(values)) > 1]
        log.warning("the runs use different data or folds (%s differ): no baseline row", ", ".join(differing))
    return recipes[0] if len(settings) == 1 else None


@dataclass(frozen=True)
class OptunaBest:
    """The trial Hydra's Optuna sweeper named best, and the configuration whose records it is."""

    value: float
    params: dict
    config_hash: Optional[str]


def optuna_best(directory: Path) -> Optional[OptunaBest]:
    """The best trial of an Optuna sweep in `directory` (optimization_results.yaml), matched to its
    configuration by its parameters in the results store's config.yaml files."""
    path = directory / OPTUNA_RESULTS
    if not path.is_file():
        return None
    try:
        results = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:  # cut short: no trial is named best
        log.warning("%s skipped: damaged (%s)", path, type(err).__name__)
        return None
    if not isinstance(results, dict) or not isinstance(results.get("best_params"), dict) or "best_value" not in results:
        return None  # a multi-objective study names several best trials: no one row to pick
    params, value = results["best_params"], float(results["best_value"])
    matches = [
        key
        for root in store_roots(directory)
        for key, config in configs_in_store(root).items()
        if all(same_value(OmegaConf.select(config, name), wanted) for name, wanted in params.items())
    ]
    return OptunaBest(value, params, matches[0] if len(set(matches)) == 1 else None)


def configs_in_store(root: Path) -> dict[str, Any]:
    """Each configuration's resolved config in a results store, by its key."""
    from klue_tc.store.results import CONFIG_FILE

    configs = {}
    for path in sorted(root.glob(f"*/{CONFIG_FILE}")):
        try:
            configs[path.parent.name] = OmegaConf.load(path)
        except (OSError, yaml.YAMLError) as err:  # damaged: its configuration is reported without it
            log.warning("%s skipped: damaged (%s)", path, type(err).__name__)
    return configs


def same_value(found: Any, wanted: Any) -> bool:
    if isinstance(found, (int, float)) and isinstance(wanted, (int, float)):
        return math.isclose(found, wanted, rel_tol=1e-9, abs_tol=1e-12)
    return found == wanted
