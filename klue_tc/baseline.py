"""The TF-IDF character n-gram + linear SVM baseline: the bar every neural encoder has to clear."""

from __future__ import annotations

from pathlib import Path

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.svm import LinearSVC

from klue_tc.config import CVConfig, DataConfig

# Character 1-3-grams within words, tf damped, n-grams seen at least twice, C=0.5: the settings that
# scored best of those measured on a held-out tenth of train (docs/full-training.md), about +0.4
# points of macro-F1 over scikit-learn's defaults.
CHAR_NGRAM_TFIDF = {"analyzer": "char_wb", "ngram_range": (1, 3), "sublinear_tf": True}


def baseline_pipeline(untuned: bool = False) -> Pipeline:
    if untuned:
        return make_pipeline(TfidfVectorizer(analyzer="char", ngram_range=(1, 3)), LinearSVC())
    return make_pipeline(TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2), LinearSVC(C=0.5))


def score_on_folds(data_cfg: DataConfig, cv: CVConfig, seed: int, cache: Path | None = None) -> list[dict]:
    """The baseline on the folds a run or sweep used (its config.yaml's data and cv settings): per
    fold its macro-F1 on the held-out fold and, where a validation file is named, on that. Cached in
    `cache` (a JSON file) by what it depends on."""
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
    if cache is not None and cache.is_file():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            return stored["folds"]
    rows = []
    for fold, (train, held) in enumerate(stratified_folds(data.labels, key["folds"], key["seed"])):
        model = baseline_pipeline().fit([data.texts[i] for i in train], data.labels[train])
        row = {
            "fold": fold,
            "f1": float(f1_score(data.labels[held], model.predict([data.texts[i] for i in held]), average="macro")),
        }
        if validation is not None:
            row["validation_f1"] = float(f1_score(validation.labels, model.predict(validation.texts), average="macro"))
        rows.append(row)
    if cache is not None:
        atomic_write_text(cache, json.dumps({"key": key, "folds": rows}, indent=1))  # never half a cache
    return rows
