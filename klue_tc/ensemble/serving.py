"""A member's fold models on new titles: the probabilities each fold model gives, as the ensemble
stage scored them (neural: the fold's checkpoint through its own tokenizer, and with the wide path
its n-grams; linear: the softmax of its decision scores at its fold's temperature). Both are read
without running code from their files: the checkpoint as tensors and plain values, the linear model
and the n-grams as arrays and JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from klue_tc.core.config import EVAL_BATCH_SIZE
from klue_tc.training.calibration import tempered

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


def load_classifier(checkpoint: Path, folder: Optional[Path] = None):
    """The fold's classifier (a TopicClassifierModule, with the wide path a WideTopicClassifierModule,
    on the CPU) from its checkpoint, read as tensors and plain values only: as Lightning's
    load_from_checkpoint builds it (its hparams are plain dicts), without the unpickling that could
    run code. A checkpoint that needs more is refused in one line naming it and the command that
    converts `folder`."""
    from klue_tc.engine.checkpoints import load_weights_only
    from klue_tc.training.module import TopicClassifierModule

    saved = load_weights_only(Path(checkpoint), "cpu", folder)
    hparams = saved.get("hyper_parameters", {})
    if "wide" in hparams:  # trained with the wide path (klue_tc/training/wide.py)
        from klue_tc.training.wide import WideTopicClassifierModule as module_class
    else:
        module_class = TopicClassifierModule
    module = module_class(**hparams)
    module.load_state_dict(saved["state_dict"])
    return module


def neural_fold_probs(
    checkpoint: Path,
    tokenizer_dir: Path,
    texts: Sequence[str],
    batch_size: int = EVAL_BATCH_SIZE,
    folder: Optional[Path] = None,
) -> np.ndarray:
    from klue_tc.tokenizers import load_tokenizer
    from klue_tc.training.inference import default_device, predict_probs

    device = default_device()
    module = load_classifier(checkpoint, folder)
    tokenizer = load_tokenizer(tokenizer_dir)
    if "wide" in module.hparams:  # with the wide path: its n-grams' vocabulary lies in the tokenizer folder
        from klue_tc.training.wide import wide_probs
        from klue_tc.training.wide_files import load_ngram_features

        return wide_probs(module, tokenizer, load_ngram_features(tokenizer_dir), texts, batch_size, device)
    return predict_probs(module, tokenizer, texts, batch_size, device)


def linear_fold_probs(model: Path, temperature: float, texts: Sequence[str], classes: int) -> np.ndarray:
    """`model`: the fold model's settings file (fold<k>.model.json, its arrays beside it)."""
    from klue_tc.training.linear_files import load_linear_model

    return tempered(decision_scores(load_linear_model(model), texts, classes), temperature)


def as_votes(probs: np.ndarray) -> np.ndarray:
    """One-hot classes: how a member whose records kept no probabilities takes part."""
    return np.eye(probs.shape[1], dtype=np.float32)[probs.argmax(1)]
