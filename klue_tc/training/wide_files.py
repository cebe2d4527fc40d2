"""A fold's n-grams (klue_tc/data/ngrams.py's NgramFeatures: the wide path's vocabulary, ratios and
starting NB-SVM) as files that load without running code, in the fold's tokenizer folder, so that
every copy of a fold's model files (the results store, a rerun's run directory, an ensemble's folder)
takes them along: `wide.json`, the vectorizer's settings and vocabulary, the NB-SVM setting, the
temperature its scores start divided by and the arrays' checksum, with its own; `wide.npz`, the
arrays, read with numpy's allow_pickle off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from klue_tc.core.checksums import checked_json, sha256_of, with_checksum
from klue_tc.core.errors import KlueTcError
from klue_tc.core.files import atomic_write_text
from klue_tc.data.ngrams import NgramFeatures
from klue_tc.training.linear_files import read_arrays, vectorizer_from_settings, vectorizer_settings, write_arrays

FORMAT = "klue_tc wide n-grams"
VERSION = 1
SETTINGS_FILE, ARRAYS_FILE = "wide.json", "wide.npz"


class WideFilesError(KlueTcError):
    """A fold folder whose n-gram files are missing or are not this format."""


def save_ngram_features(features: NgramFeatures, folder: Path) -> Path:
    """Write `features` into `folder` (the fold's tokenizer folder); the settings file's path."""
    folder = Path(folder)
    arrays = {
        "ratios": features.ratios.astype(np.float64),
        "svm_coef": features.svm_coef.astype(np.float64),
        "intercept": features.intercept.astype(np.float64),
    }
    write_arrays(folder / ARRAYS_FILE, arrays)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "arrays_sha256": sha256_of(folder / ARRAYS_FILE),
        "vectorizer": vectorizer_settings(features.vectorizer),
        "nbsvm": {
            "setting": list(features.setting),
            "inner_f1": features.inner_f1,
            "temperature": features.temperature,
        },
    }
    settings = folder / SETTINGS_FILE
    atomic_write_text(settings, json.dumps(with_checksum(payload), ensure_ascii=False))
    return settings


def has_ngram_features(folder: Path) -> bool:
    return (Path(folder) / SETTINGS_FILE).is_file()


def load_ngram_features(folder: Path) -> NgramFeatures:
    """The n-grams save_ngram_features wrote into `folder`, checked against their checksums."""
    settings_file = Path(folder) / SETTINGS_FILE
    if not settings_file.is_file():
        raise WideFilesError(f"{folder}: no {SETTINGS_FILE} (the wide path's n-grams) beside the fold's tokenizer")
    try:
        settings = checked_json(settings_file)
    except (OSError, ValueError) as err:
        raise WideFilesError(f"{settings_file}: unreadable ({type(err).__name__}: {err})") from None
    if settings.get("format") != FORMAT or settings.get("version") != VERSION:
        raise WideFilesError(f"{settings_file}: not a {FORMAT} file of version {VERSION}")
    arrays = read_arrays(Path(folder) / ARRAYS_FILE, settings["arrays_sha256"], settings_file)
    vectorizer = vectorizer_from_settings(settings["vectorizer"], settings_file)
    ratios, svm_coef, intercept = arrays["ratios"], arrays["svm_coef"], arrays["intercept"]
    if ratios.shape != svm_coef.shape or ratios.shape[1] != len(vectorizer.vocabulary) or len(intercept) != len(ratios):
        raise WideFilesError(f"{settings_file}: its arrays do not match its vocabulary")
    nbsvm = settings["nbsvm"]
    inner_f1: Optional[float] = nbsvm.get("inner_f1")
    temperature = float(nbsvm.get("temperature", 1.0))  # files written before it: NB-SVM's scores as they were
    return NgramFeatures(vectorizer, ratios, svm_coef, intercept, nbsvm["setting"], inner_f1, temperature)
