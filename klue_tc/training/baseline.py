"""The linear baselines every neural encoder has to clear: TF-IDF character n-grams + a linear SVM,
and NB-SVM (klue_tc/training/nbsvm.py) on binarised character n-grams; both scored on a run's own folds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.svm import LinearSVC

from klue_tc.core.config import CVConfig, DataConfig
from klue_tc.training.nbsvm import NBSVM

if TYPE_CHECKING:
    from klue_tc.data.titles import LabelledTitles

# Character 1-3-grams within words, tf damped, n-grams seen at least twice, C=0.5: the settings that
# scored best of those measured on a held-out tenth of train (docs/full-training.md), about +0.4
# points of macro-F1 over scikit-learn's defaults.
CHAR_NGRAM_TFIDF = {"analyzer": "char_wb", "ngram_range": (1, 3), "sublinear_tf": True}
# The C values each fold chooses from on its inner split, around the 0.5 measured best.
C_GRID = (0.125, 0.25, 0.5, 1.0, 2.0)
# NB-SVM's features are the same character 1-3-grams, binarised (the paper's indicators), each
# scaled by a log-count ratio of a few units: its C sits far lower than TF-IDF's. Each fold chooses
# (C, beta) on its inner split: beta 0.25 is the paper's interpolation, 1 the plain SVM on NB features.
NBSVM_GRID = tuple((c, beta) for beta in (0.25, 1.0) for c in (0.001, 0.003, 0.01, 0.03))


@dataclass(frozen=True)
class LinearBaseline:
    """A linear baseline: its features, its classifier for one setting (C, or NB-SVM's (C, beta)),
    the settings a fold chooses from on its inner split, and the one used where runs chose on the
    scored fold."""

    name: str  # as the report names it
    vectorizer: Callable[[], Any]
    classifier: Callable[[Any], Any]
    c_grid: tuple
    default_c: Any
    cache_file: str  # its scores' cache in the report's folder
    setting_name: str = "C"
    short_name: str = ""  # in file names and the ensemble's tables

    def pipeline(self, C: Any = None) -> Pipeline:
        return make_pipeline(self.vectorizer(), self.classifier(self.default_c if C is None else C))

    def describe(self, setting: Any) -> str:
        if isinstance(setting, (list, tuple)):
            return "/".join(f"{v:g}" for v in setting)
        return f"{setting:g}"


TFIDF_SVM = LinearBaseline(
    "TF-IDF char_wb 1-3-grams + linear SVM",
    lambda: TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2),
    lambda c: LinearSVC(C=c),
    C_GRID,
    0.5,
    "baseline.json",
    short_name="tfidf-svm",
)
NB_SVM = LinearBaseline(
    "NB-SVM, char_wb 1-3-grams (Wang & Manning 2012)",
    lambda: CountVectorizer(analyzer="char_wb", ngram_range=(1, 3), min_df=2, binary=True),
    lambda setting: NBSVM(C=setting[0], beta=setting[1]),
    NBSVM_GRID,
    (0.003, 0.25),
    "nbsvm.json",
    "C/beta",
    "nb-svm",
)
BASELINES = (TFIDF_SVM, NB_SVM)


def baseline_pipeline(untuned: bool = False, C: float = 0.5) -> Pipeline:
    if untuned:
        return make_pipeline(TfidfVectorizer(analyzer="char", ngram_range=(1, 3)), LinearSVC())
    return make_pipeline(TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2), LinearSVC(C=C))


def fit_choosing_c(
    texts: Sequence[str],
    labels: np.ndarray,
    inner_fraction: float,
    seed: int,
    grid: Optional[Sequence[float]] = None,
    baseline: LinearBaseline = TFIDF_SVM,
) -> tuple[Pipeline, dict]:
    """The baseline as the neural models are chosen: trained on a training fold less its inner split
    (the same titles as theirs, for the same `inner_fraction` and cv seed), C chosen from `grid`
    (default: the baseline's) by the inner split's macro-F1. The model, and {C, inner_f1}."""
    from sklearn.metrics import f1_score

    from klue_tc.data.titles import inner_split

    fit, inner = inner_split(labels, inner_fraction, seed)
    vectorizer = baseline.vectorizer()
    fit_features = vectorizer.fit_transform([texts[i] for i in fit])  # the same for every C: fit once
    inner_features = vectorizer.transform([texts[i] for i in inner])
    best_f1, best_c, best_svm = float("-inf"), None, None
    for c in baseline.c_grid if grid is None else grid:
        svm = baseline.classifier(c).fit(fit_features, labels[fit])
        f1 = float(f1_score(labels[inner], svm.predict(inner_features), average="macro"))
        if f1 > best_f1:  # the first (smallest) C of equal ones
            best_f1, best_c, best_svm = f1, c, svm
    return make_pipeline(vectorizer, best_svm), {"C": best_c, "inner_f1": best_f1}


def runs_titles(data_cfg: DataConfig, seed: int) -> tuple[LabelledTitles, Optional[LabelledTitles]]:
    """The titles the runs trained on (their rows index the records' scored titles) and the
    validation file they scored, if they named one."""
    from klue_tc.data.titles import stratified_subsample, training_titles, validation_titles

    # The runs said where their titles came from; reading them again need not.
    data = stratified_subsample(training_titles(data_cfg, announce_fallback=False), data_cfg.limit, seed)
    return data, validation_titles(data_cfg, data.label_names) if data_cfg.validation_path else None


def score_on_folds(
    data_cfg: DataConfig,
    cv: CVConfig,
    seed: int,
    cache: Path | None = None,
    inner_fraction: float | None = None,
    baseline: LinearBaseline = TFIDF_SVM,
) -> list[dict]:
    """The baseline on the folds a run or sweep used (its config.yaml's data and cv settings): per
    fold its macro-F1 on the held-out fold and, where a validation file is named, on that (with its
    confusion matrix there, rows the true class, for per-class and class-mix figures). With
    `inner_fraction` (the runs' `cv.inner_fraction`), C is chosen on each fold's inner split as the runs chose their
    epoch; runs without it chose on the held-out fold, and are compared with the baseline's default C on the whole
    training fold, as they were then. Cached in `cache` (a JSON file) by what it depends on."""
    import json

    from sklearn.metrics import confusion_matrix, f1_score

    from klue_tc.core.files import atomic_write_text, read_json_cache
    from klue_tc.data.titles import duplicate_groups, title_folds

    data, validation = runs_titles(data_cfg, seed)
    key = {
        "data": data.fingerprint(),
        "folds": cv.folds,
        "seed": cv.seed,
        "validation": validation.fingerprint() if validation else None,
    }
    if duplicate_groups(data.texts) is not None:  # its folds keep a title's copies together, as the runs' do
        key["grouped_duplicates"] = True
    if baseline is not TFIDF_SVM:  # the TF-IDF baseline's caches keep their keys
        key["baseline"] = baseline.name
    if validation is not None:
        key["validation_confusion"] = True  # caches from before it lack the matrix
    key["predictions"] = True  # each title's predicted class, for paired intervals against the runs
    if inner_fraction is not None:
        key |= {"inner_fraction": inner_fraction, "C_grid": list(baseline.c_grid)}
    key = json.loads(json.dumps(key))  # as the cache holds it: NB-SVM's (C, beta) pairs as lists
    stored = read_json_cache(cache)
    if isinstance(stored, dict) and stored.get("key") == key and "folds" in stored:
        return stored["folds"]
    rows = []
    for fold, (train, held) in enumerate(title_folds(data, key["folds"], key["seed"])):
        texts = [data.texts[i] for i in train]
        if inner_fraction is None:
            model, chosen = baseline.pipeline().fit(texts, data.labels[train]), {}
        else:
            model, chosen = fit_choosing_c(texts, data.labels[train], inner_fraction, key["seed"], baseline=baseline)
        scored = model.predict([data.texts[i] for i in held])
        row = {
            "fold": fold,
            "f1": float(f1_score(data.labels[held], scored, average="macro")),
            **chosen,
            # the held-out titles' rows in the training titles, as the runs' records index them
            "scored_index": np.asarray(held).tolist(),
            "scored_predicted": scored.tolist(),
        }
        if validation is not None:
            predicted = model.predict(validation.texts)
            row["validation_f1"] = float(f1_score(validation.labels, predicted, average="macro"))
            classes = np.arange(len(data.label_names))
            row["validation_confusion"] = confusion_matrix(validation.labels, predicted, labels=classes).tolist()
            row["validation_predicted"] = predicted.tolist()  # in the validation file's order
        rows.append(row)
    rows = json.loads(json.dumps(rows))  # the same values whether computed now or read from the cache
    if cache is not None:
        # Never half a cache; compact, as most of it is the per-title predictions.
        atomic_write_text(cache, json.dumps({"key": key, "folds": rows}, separators=(",", ":")))
    return rows
