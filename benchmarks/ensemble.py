"""Serving an ensemble against a single model: the titles/s of `python -m klue_tc.predict` on an
ensemble's folder (klue_tc/ensemble/artefact.py) and on one fold model, on the same held-out titles.

The folder is the one the ensemble sweep's stage writes (sweeps/ensemble.yaml): each of the
benchmark's encoders as a member of `FOLDS` fold models, and the two linear baselines with theirs.
Their weights are trained for a couple of steps only: what a title costs to serve does not depend
on them. Both timings include reading the models, as a `predict` command does."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

FOLDS = 5  # the ensemble sweep's folds: each member serves as many fold models
TRAIN_STEPS = 2


def build_artefact(records: list, data, train_rows: np.ndarray, work: Path) -> Path:
    """The folder: each record as a member of FOLDS fold models, the linear baselines beside them,
    every member weighted alike."""
    import joblib

    from klue_tc.ensemble.artefact import write_artefact
    from klue_tc.ensemble.linear import LinearFold
    from klue_tc.ensemble.members import LINEAR, NEURAL, Member, Titles
    from klue_tc.ensemble.selection import Selection
    from klue_tc.ensemble.stage import Ensemble
    from klue_tc.training.baseline import BASELINES

    members = [
        Member(f"{r.describe.encoder if r.describe else i}-{i}", f"network {i}", NEURAL, np.zeros((1, 1)), None)
        for i, r in enumerate(records)
    ]
    for member, record in zip(members, records):
        member.folds = [replace(record, fold=k) for k in range(FOLDS)]
    texts, labels = [data.texts[i] for i in train_rows], data.labels[train_rows]
    for baseline in BASELINES:
        model = baseline.pipeline().fit(texts, labels)
        joblib.dump(model, work / f"{baseline.short_name}.joblib")
        folds = [
            LinearFold(k, baseline.default_c, 1.0, None, work / f"{baseline.short_name}.joblib") for k in range(FOLDS)
        ]
        members.append(Member(baseline.short_name, baseline.name, LINEAR, np.zeros((1, 1)), None, folds=folds))
    selection = Selection((1,) * len(members), tuple(range(len(members))), (float("nan"),), (float("nan"),), 1)
    ensemble = Ensemble(work, members, Titles(labels, None, data.num_classes), selection, list(data.label_names))
    return write_artefact(ensemble, work / "ensemble-model")


def serving_speeds(artefact: Path, single: tuple[Path, Path], texts: list[str], batch_size: int) -> dict:
    """Titles/s of the ensemble's folder and of one fold model, each read from disk and run on `texts`."""
    from klue_tc.ensemble.artefact import artefact_probs, read_manifest
    from klue_tc.ensemble.serving import neural_fold_probs

    neural_fold_probs(*single, texts[:8], batch_size)  # imports and kernels warm for both timings
    started = time.perf_counter()
    neural_fold_probs(*single, texts, batch_size)
    single_s = time.perf_counter() - started
    started = time.perf_counter()
    artefact_probs(artefact, texts, batch_size)
    ensemble_s = time.perf_counter() - started
    manifest = read_manifest(artefact)
    return {
        "titles": len(texts),
        "members": len(manifest["members"]),
        "fold_models": sum(len(m["folds"]) for m in manifest["members"]),
        "single_titles_per_s": len(texts) / single_s,
        "ensemble_titles_per_s": len(texts) / ensemble_s,
        "slowdown": ensemble_s / single_s,
    }


def ensemble_lines(result: dict) -> list[str]:
    """The report's section (Markdown)."""
    from benchmarks.render import fmt, markdown_table

    if not result:
        return []
    rows = [
        [
            f"one fold model ({result.get('single_model', 'the first encoder')})",
            "1",
            fmt(result["single_titles_per_s"]),
            "1.00x",
        ],
        [
            f"ensemble: {result['members']} members x {FOLDS} folds",
            str(result["fold_models"]),
            fmt(result["ensemble_titles_per_s"]),
            f"{fmt(result['slowdown'], '.1f')}x",
        ],
    ]
    return [
        "### Serving: an ensemble's folder against a single model",
        "",
        markdown_table(("predict on", "models", "titles/s", "time per title"), rows),
        "",
        f"`python -m klue_tc.predict`'s path on the {result['titles']} held-out titles, models read from disk "
        "each time; the ensemble is the benchmark's encoders and the two linear baselines, each as a member of "
        f"{FOLDS} fold models (what sweeps/ensemble.yaml trains), trained {TRAIN_STEPS} steps: the cost of a "
        "title does not depend on the weights.",
    ]
