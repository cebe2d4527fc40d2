"""Paths and settings that several of the benchmark's modules share."""

from __future__ import annotations

from pathlib import Path

from klue_tc.core.registry import ENCODERS as ENCODER_REGISTRY

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = (REPO_ROOT / ".." / "shared" / "data" / "klue-ynat-v1.1" / "train.tsv").resolve()
ENCODERS = tuple(ENCODER_REGISTRY.names())
# KoBERT's SentencePiece pieces for the ensemble's KoBERT member, offline (unless $KLUE_TC_KOBERT_MODEL names one)
DEFAULT_KOBERT_MODEL = (REPO_ROOT / ".." / "shared" / "models" / "kobert-base-v1" / "spiece.model").resolve()
LAYERS = 3
YNAT_TRAIN_TITLES = 45_678
# The benchmark's runs (`--runs`): fine-tuning with length buckets, masked-LM pretraining beside it,
# fine-tuning on the notebook's data path, seed_reference, the main job's time to first step, and
# an ensemble's folder served against a single model.
RUNS = ("klue_tc", "pretrain", "notebook", "reference", "overhead", "ensemble")
# The ensemble's serving run: each member as the ensemble sweep's 5 fold models, trained 2 steps.
ENSEMBLE_FOLDS = 5
ENSEMBLE_TRAIN_STEPS = 2
