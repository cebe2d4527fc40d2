"""The numbers a change must not move, pinned: a tiny deterministic fold per built-in experiment
(each built-in encoder, post- and pre-LN) and per pretraining objective, in fp32 on one thread.

The code version in the results key covers the numeric modules and the chosen variants only
(klue_tc/store/fingerprint.py); an edit elsewhere keeps every stored record. These pins are what catches
an edit that moves numbers all the same: each fold's scores, the loss its pretraining ended at and
a checksum of its weights must come out as pinned. A change meant to move numbers re-pins them
(print the new values with `pytest tests/test_pinned_numbers.py -s`) and, in a numeric module,
gets a new code version, so stored records train again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import make_headlines, write_tsv
from jobs import run_in_process
from klue_tc.core.registry import ENCODERS, OBJECTIVES

# About a second a fold: 2 folds of 112 titles, 8 epochs, 2 layers 32 wide, mecab.
TINY_FOLD = [
    "tokenizer=mecab",
    "encoder.layers=2",
    "encoder.d_model=32",
    "encoder.heads=2",
    "head.hidden=32",
    "data.batch_size=16",
    "cv.folds=2",
    "cv.fold=0",
    "trainer.max_epochs=8",
    "trainer.early_stopping_patience=8",  # every epoch runs: the curve and the choice of epoch count
    "optim.lr=5e-3",
    "trainer.accelerator=cpu",
    "trainer.precision=32-true",
    "trainer.progress_bar=none",
    "logger=none",
]
TINY_PRETRAINING = ["pretrain.batch_size=16", "pretrain.max_steps=6", "pretrain.warmup_ratio=0.2"]

# Each built-in experiment (every built-in encoder with its head, post- and pre-LN), and the
# default tokenizer: (overrides, (held-out macro-F1, inner-split macro-F1, checkpoint checksum)).
PINNED_FOLDS = {
    "transformer": (["+experiment=transformer"], (0.5965449337629789, 0.4523809552192688, 144.83120421479174)),
    "transformer_pre_ln": (
        ["+experiment=transformer_pre_ln"],
        (0.5698031781882713, 0.6190476417541504, 176.99274919009494),
    ),
    "trans_blstm": (["+experiment=trans_blstm"], (0.6273268398268398, 0.6190476417541504, 300.6641737228563)),
    "trans_blstm_parallel": (
        ["+experiment=trans_blstm_parallel"],
        (0.6418016765842853, 0.8095238208770752, 171.6990144901726),
    ),
    "cnn": (["+experiment=cnn"], (0.15162718578867646, 0.6190476417541504, 270.56651966118585)),
    "sentencepiece": (
        ["+experiment=transformer", "tokenizer=sentencepiece", "tokenizer.vocab_size=300"],
        (0.20940550133096716, 0.1666666716337204, 210.2627806446889),
    ),
}
# Each built-in objective, the Transformer pretrained for 6 steps on the fold's training titles:
# (pretraining's final loss, pretrained encoder checksum, held-out macro-F1, checkpoint checksum).
PINNED_PRETRAINING = {
    "mlm": (4.255630970001221, 200.66752021744009, 0.5855824945608228, 148.6005752269809),
    "electra": (35.46785354614258, 195.83299516546705, 0.5449134199134199, 147.96773496834058),
}


# The weights' checksum differs between CPU makers by up to 3e-5 of itself (one fp32 thread: MKL's
# kernels round differently on AMD and Intel; measured on both), the scores and losses not at all.
WEIGHTS_REL = 1e-4


def checksum(state: dict[str, torch.Tensor]) -> float:
    """One number that moves with any weight: each tensor's entries weighted by their position."""
    total = 0.0
    for name in sorted(state):
        values = state[name].detach().double().flatten()
        total += float((values * torch.linspace(1.0, 2.0, len(values), dtype=torch.float64)).sum())
    return total


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def distinct_titles(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The first of each title's copies: KLUE YNAT has none, and copies change the fold assignment
    (each title's copies are kept in one fold), which these pins are not about."""
    seen: set[str] = set()
    return [row for row in rows if not (row[1] in seen or seen.add(row[1]))]


def train_tiny_fold(tmp_path: Path, *overrides: str) -> dict:
    data = write_tsv(tmp_path / "train.tsv", distinct_titles(make_headlines(per_class=16, seed=0)))
    run_dir = tmp_path / "run"
    run_in_process([f"data.path={data}", f"results.dir={tmp_path / 'results'}", *TINY_FOLD, *overrides], run_dir)
    (record,) = json.loads((run_dir / "metrics.json").read_text())["folds"]
    weights = torch.load(run_dir / record["checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    return {"record": record, "weights": checksum(weights)}


def test_every_built_in_encoder_and_objective_has_pinned_numbers():
    pinned = {o.removeprefix("+experiment=") for overrides, _ in PINNED_FOLDS.values() for o in overrides}
    assert {ENCODERS[name].name for name in ENCODERS.built_ins} <= {p.removesuffix("_pre_ln") for p in pinned}
    assert set(OBJECTIVES.built_ins) == set(PINNED_PRETRAINING)


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(PINNED_FOLDS))
def test_a_tiny_fold_of_each_built_in_encoder_makes_its_pinned_numbers(tmp_path, one_thread, case):
    overrides, (f1, inner_f1, weights) = PINNED_FOLDS[case]
    fold = train_tiny_fold(tmp_path, *overrides)
    found = (fold["record"]["f1"], fold["record"]["inner_f1"], fold["weights"])
    print(f"{case!r}: {found},")
    assert found[:2] == pytest.approx((f1, inner_f1), abs=1e-9)
    assert found[2] == pytest.approx(weights, rel=WEIGHTS_REL)


@pytest.mark.integration
@pytest.mark.parametrize("objective", sorted(PINNED_PRETRAINING))
def test_a_tiny_pretraining_of_each_objective_makes_its_pinned_numbers(tmp_path, one_thread, objective):
    fold = train_tiny_fold(tmp_path, "+experiment=transformer", f"pretrain={objective}", *TINY_PRETRAINING)
    stored = Path(fold["record"]["pretrained"]["path"])
    encoder = checksum(torch.load(stored / "encoder.pt", map_location="cpu", weights_only=True))
    found = (fold["record"]["pretrained"]["final_loss"], encoder, fold["record"]["f1"], fold["weights"])
    print(f"{objective!r}: {found},")
    loss, encoder_weights, f1, weights = PINNED_PRETRAINING[objective]
    assert found[0] == pytest.approx(loss, rel=1e-6)
    assert found[1] == pytest.approx(encoder_weights, rel=WEIGHTS_REL)
    assert found[2] == pytest.approx(f1, abs=1e-9)
    assert found[3] == pytest.approx(weights, rel=WEIGHTS_REL)
