"""The TF-IDF character n-gram + linear SVM baseline: the bar every neural encoder has to clear."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.svm import LinearSVC

from klue_tc.config import CVConfig, DataConfig

# Character 1-3-grams within words, tf damped, n-grams seen at least twice, C=0.5: the settings that
# scored best of those measured on a held-out tenth of train (docs/full-training.md), about +0.4
# points of macro-F1 over scikit-learn's defaults.
CHAR_NGRAM_TFIDF = {"analyzer": "char_wb", "ngram_range": (1, 3), "sublinear_tf": True}
# The C values each fold chooses from on its inner split, around the 0.5 measured best.
C_GRID = (0.125, 0.25, 0.5, 1.0, 2.0)


def baseline_pipeline(untuned: bool = False, C: float = 0.5) -> Pipeline:
    if untuned:
        return make_pipeline(TfidfVectorizer(analyzer="char", ngram_range=(1, 3)), LinearSVC())
    return make_pipeline(TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2), LinearSVC(C=C))


def fit_choosing_c(
    texts: Sequence[str], labels: np.ndarray, inner_fraction: float, seed: int, grid: Sequence[float] = C_GRID
) -> tuple[Pipeline, dict]:
    """The baseline as the neural models are chosen: trained on a training fold less its inner split
    (the same titles as theirs, for the same `inner_fraction` and cv seed), C chosen from `grid` by
    the inner split's macro-F1. The model, and {C, inner_f1}."""
    from sklearn.metrics import f1_score

    from klue_tc.data import inner_split

    fit, inner = inner_split(labels, inner_fraction, seed)
    vectorizer = TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2)
    fit_features = vectorizer.fit_transform([texts[i] for i in fit])  # the same for every C: fit once
    inner_features = vectorizer.transform([texts[i] for i in inner])
    best_f1, best_c, best_svm = float("-inf"), None, None
    for c in grid:
        svm = LinearSVC(C=c).fit(fit_features, labels[fit])
        f1 = float(f1_score(labels[inner], svm.predict(inner_features), average="macro"))
        if f1 > best_f1:  # the first (smallest) C of equal ones
            best_f1, best_c, best_svm = f1, c, svm
    return make_pipeline(vectorizer, best_svm), {"C": best_c, "inner_f1": best_f1}


def score_on_folds(
    data_cfg: DataConfig, cv: CVConfig, seed: int, cache: Path | None = None, inner_fraction: float | None = None
) -> list[dict]:
    """The baseline on the folds a run or sweep used (its config.yaml's data and cv settings): per
    fold its macro-F1 on the held-out fold and, where a validation file is named, on that. With
    `inner_fraction` (the runs' `cv.inner_fraction`), C is chosen on each fold's inner split as the runs chose their
    epoch; runs without it chose on the held-out fold, and are compared with C=0.5 on the whole
    training fold, as they were then. Cached in `cache` (a JSON file) by what it depends on."""
    import json

    from sklearn.metrics import f1_score

    from klue_tc.data import stratified_folds, stratified_subsample, training_titles, validation_titles
    from klue_tc.files import atomic_write_text

    # The runs said where their titles came from; the report reading them again need not.
    data = stratified_subsample(training_titles(data_cfg, announce_fallback=False), data_cfg.limit, seed)
    validation = validation_titles(data_cfg, data.label_names) if data_cfg.validation_path else None
    key = {
        "data": data.fingerprint(),
        "folds": cv.folds,
        "seed": cv.seed,
        "validation": validation.fingerprint() if validation else None,
    }
    if inner_fraction is not None:
        key |= {"inner_fraction": inner_fraction, "C_grid": list(C_GRID)}
    if cache is not None and cache.is_file():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            return stored["folds"]
    rows = []
    for fold, (train, held) in enumerate(stratified_folds(data.labels, key["folds"], key["seed"])):
        texts = [data.texts[i] for i in train]
        if inner_fraction is None:
            model, chosen = baseline_pipeline().fit(texts, data.labels[train]), {}
        else:
            model, chosen = fit_choosing_c(texts, data.labels[train], inner_fraction, key["seed"])
        row = {
            "fold": fold,
            "f1": float(f1_score(data.labels[held], model.predict([data.texts[i] for i in held]), average="macro")),
            **chosen,
        }
        if validation is not None:
            row["validation_f1"] = float(f1_score(validation.labels, model.predict(validation.texts), average="macro"))
        rows.append(row)
    if cache is not None:
        atomic_write_text(cache, json.dumps({"key": key, "folds": rows}, indent=1))  # never half a cache
    return rows
