"""Paths and settings that several of the benchmark's modules share."""
from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_DATA = (REPO_ROOT / ".." / "shared" / "data" / "klue-ynat-v1.1" / "train.tsv").resolve()
ENCODERS = ("transformer", "trans_blstm", "trans_blstm_parallel", "cnn")
LAYERS = 3
YNAT_TRAIN_TITLES = 45_678
