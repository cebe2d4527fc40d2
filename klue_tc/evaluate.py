"""Scoring a labelled validation set with the fold ensemble and with each fold alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

from klue_tc.data import LABEL_NAMES, NUM_CLASSES, LabelledTitles
from klue_tc.inference import fold_probs


def score_validation(records: list[dict], validation: LabelledTitles, out_dir: Path, batch_size: int = 512) -> dict:
    per_fold = fold_probs(records, validation.texts, batch_size)
    ensemble = np.mean(per_fold, axis=0)  # averaged probabilities of the fold models
    predicted = ensemble.argmax(1)
    truth = validation.labels
    per_class = f1_score(truth, predicted, average=None, labels=range(NUM_CLASSES), zero_division=0)
    save_confusion_matrix(truth, predicted, out_dir / "confusion_matrix.png")
    return {
        "validation_f1": float(f1_score(truth, predicted, average="macro")),
        "validation_accuracy": float(accuracy_score(truth, predicted)),
        "validation_per_class_f1": {name: float(v) for name, v in zip(LABEL_NAMES, per_class)},
        "validation_fold_f1": [
            {"fold": r["fold"], "f1": float(f1_score(truth, p.argmax(1), average="macro")),
             "accuracy": float(accuracy_score(truth, p.argmax(1)))}
            for r, p in zip(records, per_fold)
        ],
        "validation_size": len(validation),
        "validation_source": validation.source,
    }


def save_confusion_matrix(truth: np.ndarray, predicted: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager
    from sklearn.metrics import ConfusionMatrixDisplay

    # Korean label names need a Hangul font; fall back to class ids where none is installed.
    hangul = any("CJK" in f.name or "Nanum" in f.name or "Noto Sans KR" in f.name for f in font_manager.fontManager.ttflist)
    labels = list(LABEL_NAMES) if hangul else [f"{i}" for i in range(NUM_CLASSES)]
    matrix = confusion_matrix(truth, predicted, labels=range(NUM_CLASSES))
    fig, ax = plt.subplots(figsize=(7, 6))
    ConfusionMatrixDisplay(matrix, display_labels=labels).plot(ax=ax, colorbar=False, cmap="Blues")
    if not hangul:
        ax.set_title("ids: " + ", ".join(f"{i} {n}" for i, n in enumerate(["IT/sci", "econ", "society", "life/culture", "world", "sports", "politics"])), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
