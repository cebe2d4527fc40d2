"""The plateau a masked-LM pretraining can stall on: predicting every hidden token from how often it
occurs, whatever the title around it. Its loss is the entropy of the corpus's token frequencies; an
encoder that ends near it learnt little from context and can be a worse start for fine-tuning than
none (the 4-layer post-LN TRANS-BLSTM of docs/study-pretrain). Free of torch at import: the report reads it."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import numpy as np

PLATEAU_NATS = 0.5  # a final loss within this of the entropy counts as on the plateau


def token_entropy(ids: np.ndarray, never_hidden: Iterable[int]) -> float:
    """Entropy in nats of the tokens in `ids` that masking can hide (all but `never_hidden`)."""
    counts = np.bincount(ids).astype(np.float64)
    counts[[i for i in never_hidden if i < len(counts)]] = 0.0
    shares = counts[counts > 0] / counts.sum()
    return float(-(shares * np.log(shares)).sum())


def applies_to(objective: Optional[str]) -> bool:
    """Whether `objective`'s loss is a masked-LM cross-entropy, which the plateau bounds: its
    Objective says so (klue_tc/pretraining/objectives/). The registry is read here, not at import."""
    from klue_tc.core.registry import OBJECTIVES

    return objective in OBJECTIVES and OBJECTIVES[objective].build.frequency_plateau


def plateau_warning(meta: Mapping) -> Optional[str]:
    """One line when a pretrained encoder's meta says its masked-LM loss ended on the plateau, else None."""
    entropy = meta.get("token_entropy")
    if not applies_to(meta.get("objective")) or entropy is None or not meta["final_loss"] > entropy - PLATEAU_NATS:
        return None
    return (
        f"pretraining ended at masked-LM loss {meta['final_loss']:.2f}, less than {PLATEAU_NATS} nats below the "
        f"entropy of the corpus's token frequencies ({entropy:.2f}): the encoder learnt little beyond how often "
        "each token occurs, and fine-tuning from it can do worse than from scratch (more pretrain.epochs or "
        "another pretrain.lr may get it past this plateau)"
    )
