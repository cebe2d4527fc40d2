"""The linear baselines (klue_tc/training/baseline.py) as ensemble members, on the runs' own titles and folds.

Each fold's model is fitted as the report's baseline is (on the training fold less its inner split,
its setting chosen on that split), and its probabilities are the softmax of its decision scores at
a temperature chosen by log-loss on the same inner split: the scored fold and the validation titles
choose nothing. Kept in <dir>/baselines/<name>/: each fold's predictions with their probabilities
(fold<k>.predicted.npz, as the results store keeps a fold's), its fitted model as arrays and JSON
(fold<k>.model.json and fold<k>.model.npz, klue_tc/training/linear_files.py; large, never committed)
and settings.json, which names the titles and settings they were fitted on (fitted again when those
change) and the validation titles they were scored on (scored again when those change).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from klue_tc.core.files import atomic_write_json
from klue_tc.core.pickles import refuse_pickles
from klue_tc.ensemble.members import LINEAR, Member, Titles
from klue_tc.ensemble.serving import decision_scores, linear_fold_probs
from klue_tc.store.records import FoldPredictions, TitlePredictions
from klue_tc.training.baseline import BASELINES, LinearBaseline, fit_choosing_c, runs_titles
from klue_tc.training.calibration import fit_temperature, tempered
from klue_tc.training.linear_files import model_files, model_path, save_linear_model

log = logging.getLogger(__name__)

STORE_DIR = "baselines"
SETTINGS_FILE = "settings.json"
# How fast a fold model is fitted again from its stored setting, for the cost said before it starts:
# 32,888 titles in 5 to 7 s, TF-IDF + SVM and NB-SVM alike (one core of an Intel Xeon, the other busy).
REFIT_TITLES_PER_S = 5_000


@dataclass
class LinearFold:
    fold: int
    setting: Any  # C, or NB-SVM's [C, beta]
    temperature: float  # of the softmax over its decision scores, chosen on the inner split
    inner_f1: Optional[float]
    model: Path  # its fitted pipeline's settings (fold<k>.model.json), its arrays beside them


def store_key(baseline: LinearBaseline, recipe: Any, data: Any) -> dict:
    """What a baseline's fold models were fitted from (the validation titles are scored apart)."""
    key = {
        "baseline": baseline.name,
        "data": data.fingerprint(),
        "folds": recipe.cv.folds,
        "cv_seed": recipe.cv.seed,
        "inner_fraction": recipe.inner_fraction,
        "grid": list(baseline.c_grid),
        "probabilities": "softmax of the decision scores, temperature chosen on the inner split",
    }
    return json.loads(json.dumps(key))


def fit_fold(
    baseline: LinearBaseline,
    texts: list[str],
    labels: np.ndarray,
    inner_fraction: Optional[float],
    seed: int,
    classes: Optional[int] = None,
) -> tuple[Any, Any, Optional[float], float]:
    """(model, setting, inner F1, temperature) for one training fold's titles."""
    from klue_tc.data.titles import inner_split

    if inner_fraction is None:  # runs of older code chose on the scored fold: the default setting, no split
        return baseline.pipeline().fit(texts, labels), baseline.default_c, None, 1.0
    model, chosen = fit_choosing_c(texts, labels, inner_fraction, seed, baseline=baseline)
    _, inner = inner_split(labels, inner_fraction, seed)
    temperature = fit_temperature(decision_scores(model, [texts[i] for i in inner], classes), labels[inner])
    return model, chosen["C"], chosen["inner_f1"], temperature


def fit_titles(recipe: Any, data: Any, fold: int) -> np.ndarray:
    """The rows a fold model learns from: its training fold less the inner split, as the runs'."""
    from klue_tc.data.titles import inner_split, title_folds

    train = title_folds(data, recipe.cv.folds, recipe.cv.seed)[fold][0]
    if recipe.inner_fraction is None:
        return train
    return train[inner_split(data.labels[train], recipe.inner_fraction, recipe.cv.seed)[0]]


@dataclass
class LinearStore:
    """A baseline's fold models and predictions in <dir>/baselines/<name>/."""

    baseline: LinearBaseline
    folder: Path
    key: dict

    def predictions_path(self, fold: int) -> Path:
        return self.folder / f"fold{fold}.predicted.npz"

    def model_path(self, fold: int) -> Path:
        return model_path(self.folder, f"fold{fold}")

    def compute(self, recipe: Any, data: Any) -> None:
        from klue_tc.data.titles import title_folds

        log.warning("fitting %s on the runs' %d folds (kept in %s)", self.baseline.name, recipe.cv.folds, self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        folds = []
        for fold, (train, held) in enumerate(title_folds(data, recipe.cv.folds, recipe.cv.seed)):
            texts = [data.texts[i] for i in train]
            model, setting, inner_f1, temperature = fit_fold(
                self.baseline, texts, data.labels[train], recipe.inner_fraction, recipe.cv.seed, data.num_classes
            )
            scored = tempered(decision_scores(model, [data.texts[i] for i in held], data.num_classes), temperature)
            FoldPredictions(TitlePredictions.of(held, data.labels[held], scored)).save(self.predictions_path(fold))
            save_linear_model(model, self.model_path(fold))
            folds.append({"fold": fold, "setting": setting, "temperature": temperature, "inner_f1": inner_f1})
        atomic_write_json(self.folder / SETTINGS_FILE, {"key": self.key, "folds": folds, "validation": None})

    def read(self) -> Optional[tuple[list[LinearFold], list[FoldPredictions], Optional[str]]]:
        """The folds, their predictions and the fingerprint of the validation titles they were
        scored on; None where they are missing, damaged or of other titles or settings."""
        try:
            stored = json.loads((self.folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if stored.get("key") != self.key:
            return None
        folds = [
            LinearFold(f["fold"], f["setting"], f["temperature"], f["inner_f1"], self.model_path(f["fold"]))
            for f in stored["folds"]
        ]
        predictions = [FoldPredictions.read(self.predictions_path(f.fold)) for f in folds]
        if any(p is None or p.scored.probs is None for p in predictions):
            return None
        return folds, predictions, stored.get("validation")

    def refit_missing_models(self, recipe: Any, data: Any, folds: Sequence[LinearFold]) -> None:
        """Fold models whose file is gone (a clone keeps the predictions, not the models) are fitted
        again with the setting their fold chose: the same optimum, up to the solver's tolerance."""
        missing = [f for f in folds if not all(p.is_file() for p in model_files(f.model))]
        if not missing:
            return
        rows_of = {f.fold: fit_titles(recipe, data, f.fold) for f in missing}
        titles = sum(len(rows) for rows in rows_of.values())
        which = f"fold{'s' if len(missing) > 1 else ''} {', '.join(str(f.fold) for f in missing)}"
        log.warning(
            "refitting %s's fold models (%s) with their stored settings, %s titles in all: about %.0f s",
            self.baseline.name,
            which,
            f"{titles:,}",
            titles / REFIT_TITLES_PER_S,
        )
        for fold in missing:
            rows = rows_of[fold.fold]
            setting = tuple(fold.setting) if isinstance(fold.setting, list) else fold.setting
            model = self.baseline.pipeline(setting).fit([data.texts[i] for i in rows], data.labels[rows])
            save_linear_model(model, fold.model)

    def score_validation(
        self, folds: Sequence[LinearFold], predictions: Sequence[FoldPredictions], validation: Any
    ) -> None:
        """Each fold model on the validation titles, kept beside its scored fold's predictions."""
        for fold, part in zip(folds, predictions):
            part.validation = None
            if validation is not None:
                probs = linear_fold_probs(fold.model, fold.temperature, validation.texts, validation.num_classes)
                part.validation = TitlePredictions.of(np.arange(len(validation)), validation.labels, probs)
            part.save(self.predictions_path(fold.fold))
        stored = json.loads((self.folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        stored["validation"] = validation.fingerprint() if validation is not None else None
        atomic_write_json(self.folder / SETTINGS_FILE, stored)


def linear_member(
    baseline: LinearBaseline, recipe: Any, directory: Path, data: Any, validation: Any, models: bool
) -> Member:
    """The baseline's member, from its store in `directory` (fitted there first where missing). A
    store holding pickles (fold<k>.joblib, as older code kept its models) is refused: converted once
    by the command the refusal names."""
    store = LinearStore(baseline, directory / STORE_DIR / baseline.short_name, store_key(baseline, recipe, data))
    refuse_pickles(store.folder, directory)
    found = store.read()
    if found is None:
        store.compute(recipe, data)
        found = store.read()
    folds, predictions, scored_on = found
    wanted = validation.fingerprint() if validation is not None else None
    if models or scored_on != wanted:
        store.refit_missing_models(recipe, data, folds)
    if scored_on != wanted:
        store.score_validation(folds, predictions, validation)
    classes = predictions[0].scored.probs.shape[1]
    oof = np.zeros((len(data), classes), dtype=np.float32)
    for part in predictions:
        oof[part.scored.index] = part.scored.probs.astype(np.float32)
    scored = [p.validation for p in predictions]
    return Member(
        baseline.short_name,
        baseline.name,
        LINEAR,
        oof,
        [p.probs.astype(np.float32) for p in scored] if all(p is not None for p in scored) else None,
        folds=list(folds),
        restore=functools.partial(store.refit_missing_models, recipe, data, folds),
    )


def linear_members(
    recipe: Any, directory: Path, titles: Titles, models: bool = False, baselines: Sequence[LinearBaseline] = BASELINES
) -> tuple[list[Member], list[str]]:
    """The baselines' members on the runs' titles and folds (`recipe`, their config.yaml), where
    those are the titles `titles` names; else none, and the line saying why. `models`: every fold
    model's file must be there (to serve or score new titles)."""
    from klue_tc.core.errors import KlueTcError

    if recipe is None:
        return [], ["no linear baseline: the runs name no common data file and folds (their config.yaml)"]
    try:
        data, validation = runs_titles(recipe.data, recipe.seed)
    except KlueTcError as err:
        return [], [f"no linear baseline: {err}"]
    if not np.array_equal(data.labels, titles.labels) or data.num_classes != titles.classes:
        return [], ["no linear baseline: the runs' config.yaml names other titles than the records were scored on"]
    members = [linear_member(b, recipe, directory, data, validation, models) for b in baselines]
    notes = []
    if (
        titles.validation_labels is None
        or validation is None
        or not np.array_equal(validation.labels, titles.validation_labels)
    ):
        for member in members:
            member.validation = None
        if validation is not None and titles.validation_labels is not None:
            notes.append("the linear baselines' validation file is not the records' one: not on validation")
    return members, notes


def fold_settings(folds: Sequence[LinearFold]) -> list[dict]:
    """The folds' settings as the artefact keeps them (paths left out)."""
    return [{k: v for k, v in asdict(f).items() if k != "model"} for f in folds]
