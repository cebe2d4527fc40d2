"""Calibration chosen by out-of-fold log-loss. Temperature scaling (Guo et al. 2017): one scalar
per member that softens or sharpens its probabilities; it never changes a single model's predicted
class, only how much its vote weighs beside the others'. Class offsets: one number per class added
to the log of the ensemble's weighted mean; at the least log-loss each class's mean probability
equals its share of the titles, which averaging members that hedge differently does not keep.

Used by the ensemble stage (klue_tc/ensemble/) on its members' out-of-fold predictions, and by the
wide path (klue_tc/training/wide.py) for its starting NB-SVM's temperature on a fold's inner split:
in the code version only while the wide path is on (klue_tc/store/fingerprint.py)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import log_softmax, softmax

# float16 probabilities round the smallest to 0: their logarithm is floored here.
SMALLEST = 1e-7
# The temperatures searched (log-spaced): wide enough for an SVM's margins and a sharp network alike.
BOUNDS = (0.02, 50.0)


def logits_of(probs: np.ndarray) -> np.ndarray:
    """Log-probabilities, which softmax turns back into `probs` (at temperature 1)."""
    return np.log(np.clip(np.asarray(probs, dtype=np.float64), SMALLEST, None))


def tempered(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T), float32: T > 1 softens, T < 1 sharpens."""
    return softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1).astype(np.float32)


def log_loss(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    """The mean negative log-probability of the true class."""
    scaled = log_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1)
    return float(-scaled[np.arange(len(labels)), labels].mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The temperature of least log-loss on these titles (scores or log-probabilities)."""
    labels = np.asarray(labels, dtype=int)
    found = minimize_scalar(
        lambda log_t: log_loss(logits, labels, float(np.exp(log_t))),
        bounds=tuple(np.log(BOUNDS)),
        method="bounded",
        options={"xatol": 1e-4},
    )
    return float(np.exp(found.x))


def fit_class_offsets(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The offsets b of least log-loss of softmax(logits + b) on these titles, centred (softmax
    ignores a shift common to every class)."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    rows, classes = np.arange(len(labels)), logits.shape[1]
    shares = np.bincount(labels, minlength=classes) / len(labels)

    def loss_and_gradient(offsets: np.ndarray) -> tuple[float, np.ndarray]:
        scaled = log_softmax(logits + offsets, axis=1)
        return float(-scaled[rows, labels].mean()), np.exp(scaled).mean(axis=0) - shares

    found = minimize(loss_and_gradient, np.zeros(classes), jac=True, method="L-BFGS-B")
    return found.x - found.x.mean()


def offset(probs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """softmax(log probs + offsets), float32."""
    return softmax(logits_of(probs) + np.asarray(offsets, dtype=np.float64), axis=1).astype(np.float32)
