"""A fitted linear baseline (klue_tc/training/baseline.py: TF-IDF + linear SVM, NB-SVM) as files that
load without running code: `<name>.model.json`, its settings (the vectorizer's parameters and
vocabulary, the classifier's kind and setting, the classes) with its own checksum, and
`<name>.model.npz` beside it, its arrays (coef, intercept, the TF-IDF weights idf), read with
numpy's allow_pickle off. Loading builds the vectorizer from the JSON with the vocabulary fixed, and
the classifier is the product of its arrays: the decision scores are those the fitted pipeline gave."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.pipeline import Pipeline
from sklearn.svm import LinearSVC

from klue_tc.core.checksums import checked_json, require_checksum, sha256_of, with_checksum
from klue_tc.core.errors import KlueTcError
from klue_tc.core.files import atomic_write, atomic_write_text
from klue_tc.core.pickles import refusal
from klue_tc.training.nbsvm import NBSVM

FORMAT = "klue_tc linear model"
VERSION = 1
MODEL_SUFFIX = ".model.json"
ARRAYS_SUFFIX = ".model.npz"
# The vectorizers and classifiers a file may name: a name picks one of these, never an import.
VECTORIZERS = {"tfidf": TfidfVectorizer, "count": CountVectorizer}
CLASSIFIERS = ("linear_svc", "nbsvm")


class LinearModelError(KlueTcError):
    """A fitted baseline that cannot be written in the safe format, or files that are not one."""


def model_path(folder: Path, stem: str) -> Path:
    return Path(folder) / f"{stem}{MODEL_SUFFIX}"


def arrays_path(model: Path) -> Path:
    """The arrays beside the settings file `model` (fold0.model.json: fold0.model.npz)."""
    model = Path(model)
    return model.with_name(model.name[: -len(MODEL_SUFFIX)] + ARRAYS_SUFFIX)


def model_files(model: Path) -> tuple[Path, Path]:
    return Path(model), arrays_path(model)


@dataclass
class LinearModel:
    """A fitted baseline read from its files: its vectorizer, then a linear map of the features
    (binarised first for NB-SVM, as NBSVM.decision_function does)."""

    vectorizer: Any
    coef: np.ndarray  # (classes, features); one row for LinearSVC's two-class margin
    intercept: np.ndarray
    classes_: np.ndarray
    binary_features: bool

    def decision_function(self, texts: Sequence[str]) -> np.ndarray:
        features = self.vectorizer.transform(list(texts))
        if self.binary_features:
            features = sparse.csr_matrix(features, dtype=np.float64)
            features.data = (features.data > 0).astype(np.float64)
        scores = np.asarray(features @ self.coef.T) + self.intercept
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        scores = self.decision_function(texts)
        return self.classes_[(scores > 0).astype(int)] if scores.ndim == 1 else self.classes_[scores.argmax(axis=1)]


def vectorizer_settings(vectorizer: Any) -> dict:
    kind = next((name for name, cls in VECTORIZERS.items() if type(vectorizer) is cls), None)
    if kind is None:
        raise LinearModelError(f"a {type(vectorizer).__name__} cannot be written as arrays and JSON")
    params = {k: v for k, v in vectorizer.get_params().items() if k != "vocabulary"}
    params["dtype"] = np.dtype(params["dtype"]).name
    params["ngram_range"] = list(params["ngram_range"])
    bad = sorted(k for k, v in params.items() if callable(v))
    if bad:
        raise LinearModelError(f"the vectorizer's {', '.join(bad)} is code, which JSON cannot hold")
    vocabulary = sorted(vectorizer.vocabulary_, key=vectorizer.vocabulary_.get)
    return {"kind": kind, "params": params, "vocabulary": vocabulary}


def vectorizer_from_settings(settings: dict, source: Path) -> Any:
    """The vectorizer `vectorizer_settings` wrote, its vocabulary fixed (`source`: the file, for errors)."""
    if settings.get("kind") not in VECTORIZERS:
        raise LinearModelError(f"{source}: unknown vectorizer kind")
    params = dict(settings["params"])
    params["dtype"] = np.dtype(params["dtype"]).type
    params["ngram_range"] = tuple(params["ngram_range"])
    vocabulary = settings["vocabulary"]
    if len(set(vocabulary)) != len(vocabulary):
        raise LinearModelError(f"{source}: its vocabulary repeats a term")
    return VECTORIZERS[settings["kind"]](**params, vocabulary={term: i for i, term in enumerate(vocabulary)})


def classifier_arrays(classifier: Any) -> tuple[dict, dict]:
    """The classifier's settings (JSON) and arrays."""
    if type(classifier) is NBSVM:
        settings = {"kind": "nbsvm", "C": classifier.C, "alpha": classifier.alpha, "beta": classifier.beta}
    elif type(classifier) is LinearSVC:
        settings = {"kind": "linear_svc", "C": classifier.C}
    else:
        raise LinearModelError(f"a {type(classifier).__name__} cannot be written as arrays and JSON")
    arrays = {"coef": np.asarray(classifier.coef_, dtype=np.float64), "intercept": np.asarray(classifier.intercept_)}
    return {**settings, "classes": np.asarray(classifier.classes_).tolist()}, arrays


def save_linear_model(pipeline: Pipeline, model: Path) -> None:
    """Write the fitted pipeline (vectorizer, classifier) as `model` (…model.json) and its arrays."""
    if not isinstance(pipeline, Pipeline) or len(pipeline.steps) != 2:
        raise LinearModelError(f"{type(pipeline).__name__}: not a fitted (vectorizer, classifier) pipeline")
    vectorizer, classifier = (step for _, step in pipeline.steps)
    settings = vectorizer_settings(vectorizer)
    classifier_settings, arrays = classifier_arrays(classifier)
    if settings["kind"] == "tfidf" and vectorizer.use_idf:
        arrays["idf"] = np.asarray(vectorizer.idf_, dtype=np.float64)
    model = Path(model)
    if not model.name.endswith(MODEL_SUFFIX):
        raise ValueError(f"{model}: a linear model's settings file ends with {MODEL_SUFFIX}")
    arrays_file = arrays_path(model)
    write_arrays(arrays_file, arrays)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "arrays_sha256": sha256_of(arrays_file),
        "vectorizer": settings,
        "classifier": classifier_settings,
    }
    atomic_write_text(model, json.dumps(with_checksum(payload), ensure_ascii=False))


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """`arrays` as one .npz file, written whole or not at all."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:  # a handle: given a path, numpy would append .npz to it
            np.savez(handle, **arrays)

    atomic_write(path, write)


def read_arrays(path: Path, sha256: str, settings: Path) -> dict[str, np.ndarray]:
    """The arrays at `path`, checked against the checksum the settings file `settings` keeps, read
    with numpy's allow_pickle off: an array that would need a pickle is refused, not loaded."""
    require_checksum(path, sha256, Path(settings).name)
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise refusal(path, Path(settings).parent, "an array file holding pickled objects") from None
        raise


def load_linear_model(model: Path) -> LinearModel:
    """The model written by save_linear_model; its arrays are checked against the checksum the
    settings keep, and an array that would need a pickle is refused."""
    model = Path(model)
    try:
        settings = checked_json(model)
    except (OSError, ValueError) as err:
        raise LinearModelError(f"{model}: unreadable linear model ({type(err).__name__}: {err})") from None
    if settings.get("format") != FORMAT or settings.get("version") != VERSION:
        raise LinearModelError(f"{model}: not a {FORMAT} of version {VERSION}")
    arrays = read_arrays(arrays_path(model), settings["arrays_sha256"], model)  # by name: a copy finds its own
    classifier = settings["classifier"]
    if classifier["kind"] not in CLASSIFIERS:
        raise LinearModelError(f"{model}: unknown classifier kind")
    vectorizer = vectorizer_from_settings(settings["vectorizer"], model)
    coef = arrays["coef"]
    if coef.ndim != 2 or coef.shape[1] != len(vectorizer.vocabulary):
        raise LinearModelError(f"{model}: its arrays do not match its vocabulary")
    if "idf" in arrays:
        vectorizer.idf_ = arrays["idf"]
    return LinearModel(
        vectorizer, coef, arrays["intercept"], np.asarray(classifier["classes"]), classifier["kind"] == "nbsvm"
    )
