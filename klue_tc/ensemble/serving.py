"""A member's fold models on new titles: the probabilities each fold model gives, as the ensemble
stage scored them (neural: the fold's checkpoint through its own tokenizer; linear: the softmax of
its decision scores at its fold's temperature)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from klue_tc.core.config import EVAL_BATCH_SIZE
from klue_tc.ensemble.calibration import tempered

# The score of a class the model never saw in training: no probability left for it after the softmax.
UNSEEN_CLASS_SCORE = -1e4


def decision_scores(model: Any, texts: Sequence[str], classes: Optional[int] = None) -> np.ndarray:
    """(titles, classes) scores; a two-class model's one margin as a pair whose softmax is its
    sigmoid. With `classes`, a column for every class id below it (those its titles lacked score low)."""
    scores = np.asarray(model.decision_function(list(texts)), dtype=np.float64)
    scores = np.column_stack([-scores / 2, scores / 2]) if scores.ndim == 1 else scores
    if classes is None:
        return scores
    full = np.full((len(scores), classes), UNSEEN_CLASS_SCORE)
    full[:, np.asarray(model.classes_, dtype=int)] = scores
    return full


def neural_fold_probs(
    checkpoint: Path, tokenizer_dir: Path, texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE
) -> np.ndarray:
    from klue_tc.tokenizers import load_tokenizer
    from klue_tc.training.inference import default_device, predict_probs
    from klue_tc.training.module import TopicClassifierModule

    device = default_device()
    module = TopicClassifierModule.load_from_checkpoint(str(checkpoint), map_location=device)
    return predict_probs(module, load_tokenizer(tokenizer_dir), texts, batch_size, device)


def linear_fold_probs(model: Path, temperature: float, texts: Sequence[str], classes: int) -> np.ndarray:
    import joblib

    return tempered(decision_scores(joblib.load(model), texts, classes), temperature)


def as_votes(probs: np.ndarray) -> np.ndarray:
    """One-hot classes: how a member whose records kept no probabilities takes part."""
    return np.eye(probs.shape[1], dtype=np.float32)[probs.argmax(1)]
