"""One fold on several devices. Lightning's DDP starts the other ranks by running `python -m
klue_tc` again; those train the folds rank 0 names in the environment they inherit, and leave the
results store, its locks, the records, metrics.json, W&B and pretraining to rank 0."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Iterator

PLAN_ENV = "KLUE_TC_RANK_PLAN"
# What Lightning's launcher sets in rank 0's own environment when it starts the other ranks.
LAUNCHER_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
TOKENIZER_WAIT_S = 1800.0  # rank 0 fits each fold's tokenizer: as long as the process group's timeout

log = logging.getLogger(__name__)


def is_other_rank() -> bool:
    """A rank other than 0 that Lightning started for one of this package's jobs."""
    return PLAN_ENV in os.environ and os.environ.get("LOCAL_RANK", "0") != "0"


@contextlib.contextmanager
def plan_for_other_ranks(config: dict, run_dir: Path, results_root: Path, key: str, folds: list[int]) -> Iterator[None]:
    """Rank 0 names the folds it trains, in order, where the ranks Lightning starts will read them.
    Afterwards its environment and process group are as before, so that the next job of a sweep
    run in this process starts its own ranks."""
    before = {name: os.environ.get(name) for name in (PLAN_ENV, *LAUNCHER_ENV)}
    os.environ[PLAN_ENV] = json.dumps(
        {"config": config, "run_dir": str(run_dir), "results_root": str(results_root), "key": key, "folds": folds}
    )
    try:
        yield
    finally:
        launched_here = before["LOCAL_RANK"] is None and "LOCAL_RANK" in os.environ
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch = sys.modules.get("torch")
        if launched_here and torch is not None and torch.distributed.is_available():
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()


def wait_for_tokenizer(run, cache, train_titles) -> None:
    """The other ranks use the tokenizer rank 0 fitted (and cached) for the fold's training titles,
    never one of their own, so that every rank maps titles to the same ids."""
    from klue_tc.tokenizers.base import META_FILE
    from klue_tc.tokenizers.cache import tokenizer_key

    done = cache.root / "tokenizers" / tokenizer_key(run.tokenizer, train_titles.fingerprint()) / META_FILE
    deadline = time.monotonic() + TOKENIZER_WAIT_S
    while not done.is_file():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 did not cache the tokenizer {done.parent} in {TOKENIZER_WAIT_S:.0f} s")
        time.sleep(0.5)


PRETRAINED_POLL_S = 1.0


def wait_for_pretrained(store, key: str, fold: int):
    """The encoder rank 0 pretrains (or finds) for a fold, once it is in the store: the other ranks
    never pretrain, and start from the same weights and tokenizer. Pretraining has no time bound,
    so the wait has none either; it ends if rank 0, the process that started this one, is gone."""
    parent = os.getppid()
    while (found := store.find(key)) is None:
        if os.getppid() != parent:
            raise RuntimeError(f"rank 0 ended before it stored the pretrained encoder {key} in {store.root}")
        time.sleep(PRETRAINED_POLL_S)
    log.info("fold %d starts from the pretrained encoder %s", fold, found.key)
    return found
