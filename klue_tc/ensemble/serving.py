"""A member's fold models on new titles: the probabilities each fold model gives, as the ensemble
stage scored them (neural: the fold's checkpoint through its own tokenizer; linear: the softmax of
its decision scores at its fold's temperature)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from klue_tc.core.config import EVAL_BATCH_SIZE


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

    from klue_tc.ensemble.calibration import tempered
    from klue_tc.ensemble.linear import decision_scores

    return tempered(decision_scores(joblib.load(model), texts, classes), temperature)


def as_votes(probs: np.ndarray) -> np.ndarray:
    """One-hot classes: how a member whose records kept no probabilities takes part."""
    return np.eye(probs.shape[1], dtype=np.float32)[probs.argmax(1)]
