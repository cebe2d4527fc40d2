"""Class probabilities from trained fold models, alone or as an ensemble."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from klue_tc.core.checksums import require_checksum
from klue_tc.core.config import EVAL_BATCH_SIZE, DataConfig
from klue_tc.data.batches import EncodedSplit, make_loader
from klue_tc.store.records import FoldResult
from klue_tc.tokenizers import EncodedTitles, Tokenizer, load_tokenizer
from klue_tc.training.module import TopicClassifierModule


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def predict_probs(
    module: TopicClassifierModule,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    batch_size: int = EVAL_BATCH_SIZE,
    device: torch.device | None = None,
) -> np.ndarray:
    """(n, classes) probabilities in the order of `texts` (batches are length-sorted inside)."""
    encoded = EncodedTitles.from_lists(tokenizer.encode(texts))
    return encoded_probs(module, encoded, tokenizer.specials.pad, batch_size, device)


@torch.inference_mode()
def encoded_probs(
    module: TopicClassifierModule,
    encoded: EncodedTitles,
    pad_id: int,
    batch_size: int = EVAL_BATCH_SIZE,
    device: torch.device | None = None,
) -> np.ndarray:
    """(n, classes) probabilities of titles already encoded by the model's tokenizer, in their order."""
    device = device or default_device()
    module.eval().to(device)
    loader = make_loader(EncodedSplit(encoded, None), DataConfig(eval_batch_size=batch_size), pad_id, train=False)
    chunks = []
    for batch in loader:
        logits = module(batch["input_ids"].to(device))
        chunks.append((batch["index"].numpy(), torch.softmax(logits.float(), -1).cpu().numpy()))
    probs = np.zeros((len(encoded), chunks[0][1].shape[1]), dtype=np.float32)
    for index, p in chunks:
        probs[index] = p
    return probs


def load_fold(record: FoldResult, device: torch.device | None = None) -> tuple[TopicClassifierModule, Tokenizer]:
    if not record.checkpoint or not Path(record.checkpoint).is_file():
        raise FileNotFoundError(f"fold {record.fold}: checkpoint {record.checkpoint} is missing")
    require_checksum(Path(record.checkpoint), record.checkpoint_sha256, "the fold's record")
    module = TopicClassifierModule.load_from_checkpoint(record.checkpoint, map_location=device or default_device())
    return module, load_tokenizer(record.tokenizer_dir)


def fold_probs(records: list[FoldResult], texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> list[np.ndarray]:
    """Each fold model's probabilities, each through its own fold's tokenizer."""
    out = []
    for record in records:
        module, tokenizer = load_fold(record)
        out.append(predict_probs(module, tokenizer, texts, batch_size))
    return out


def ensemble_probs(records: list[FoldResult], texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
    """The fold models' averaged probabilities: what a run predicts."""
    return np.mean(fold_probs(records, texts, batch_size), axis=0)
