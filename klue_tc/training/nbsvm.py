"""NB-SVM (Wang & Manning 2012, "Baselines and bigrams"): a linear SVM on binarised n-gram features
scaled by their naive-Bayes log-count ratio, one-vs-rest over the classes.

For class c, with p = alpha + the feature counts of c's titles and q = alpha + those of the rest,
r_c = log((p / |p|_1) / (q / |q|_1)); a binary LinearSVC learns w_c on x * r_c, and its weights are
interpolated towards their mean magnitude, w'_c = (1 - beta) * mean|w_c| + beta * w_c (the paper's
beta = 0.25 trusts naive Bayes where the SVM is unsure). A title goes to the class of largest margin.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.svm import LinearSVC
from sklearn.utils.multiclass import unique_labels
from sklearn.utils.validation import check_is_fitted


class NBSVM(ClassifierMixin, BaseEstimator):
    """`C`: the SVM's; `alpha`: the count smoothing; `beta`: the interpolation (1: the plain SVM on
    NB-scaled features). Expects non-negative features, binarised here (the paper's indicator x-hat)."""

    def __init__(self, C: float = 1.0, alpha: float = 1.0, beta: float = 0.25):
        self.C = C
        self.alpha = alpha
        self.beta = beta

    def fit(self, X, y) -> NBSVM:
        X = sparse.csr_matrix(X, dtype=np.float64)
        X.data = (X.data > 0).astype(np.float64)
        y = np.asarray(y)
        self.classes_ = unique_labels(y)
        self.n_features_in_ = X.shape[1]
        weights, biases, ratios, interpolated = [], [], [], []
        for label in self.classes_:
            mine = y == label
            p = self.alpha + np.asarray(X[mine].sum(axis=0)).ravel()
            q = self.alpha + np.asarray(X[~mine].sum(axis=0)).ravel()
            ratio = np.log((p / p.sum()) / (q / q.sum()))
            svm = LinearSVC(C=self.C).fit(X @ sparse.diags(ratio), mine)
            w = svm.coef_.ravel()
            w = (1 - self.beta) * np.abs(w).mean() + self.beta * w
            weights.append(w * ratio)  # the scaling folded into the weights: x . (w' * r)
            biases.append(float(svm.intercept_[0]))
            ratios.append(ratio)
            interpolated.append(w)
        self.coef_ = np.vstack(weights)
        self.intercept_ = np.asarray(biases)
        # Both factors of coef_ (classes, features), for a model that trains on from them (klue_tc/models/wide.py).
        self.nb_ratios_, self.svm_coef_ = np.vstack(ratios), np.vstack(interpolated)
        return self

    def decision_function(self, X) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = sparse.csr_matrix(X, dtype=np.float64)
        X.data = (X.data > 0).astype(np.float64)
        return np.asarray(X @ self.coef_.T) + self.intercept_

    def predict(self, X) -> np.ndarray:
        return self.classes_[self.decision_function(X).argmax(axis=1)]
