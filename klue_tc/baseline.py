"""The TF-IDF character n-gram + linear SVM baseline: the bar every neural encoder has to clear."""

from __future__ import annotations

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.svm import LinearSVC

# Character 1-3-grams within words, tf damped, n-grams seen at least twice, C=0.5: the settings that
# scored best of those measured on a held-out tenth of train (docs/full-training.md), about +0.4
# points of macro-F1 over scikit-learn's defaults.
CHAR_NGRAM_TFIDF = {"analyzer": "char_wb", "ngram_range": (1, 3), "sublinear_tf": True}


def baseline_pipeline(untuned: bool = False) -> Pipeline:
    if untuned:
        return make_pipeline(TfidfVectorizer(analyzer="char", ngram_range=(1, 3)), LinearSVC())
    return make_pipeline(TfidfVectorizer(**CHAR_NGRAM_TFIDF, min_df=2), LinearSVC(C=0.5))
