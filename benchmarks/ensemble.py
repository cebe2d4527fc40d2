"""Serving an ensemble against a single model: the titles/s of `python -m klue_tc.predict` on an
ensemble's folder (klue_tc/ensemble/artefact.py) and on one fold model, on the same held-out titles.

The folder is the one the ensemble sweep's stage writes (sweeps/ensemble.yaml): each of its member
designs (sweeps/ensemble_member/: encoder, size, tokenizer and head as the sweep composes them) as
`ENSEMBLE_FOLDS` fold models, and the two linear baselines with theirs. Their weights are trained for a couple
of steps only, without pretraining: what a title costs to serve does not depend on them. Both timings
include reading the models, as a `predict` command does; each member's share is timed on its own too."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from benchmarks.constants import ENSEMBLE_FOLDS, ENSEMBLE_TRAIN_STEPS, REPO_ROOT

SWEEP = "ensemble"  # sweeps/ensemble.yaml: the members the benchmark serves by default


def sweep_members(repo: Path = REPO_ROOT) -> list[str]:
    """The ensemble sweep's member designs (its `+ensemble_member` axis), in the sweep's order."""
    from klue_tc.jobs.sweeps import sweep_jobs

    jobs = sweep_jobs(SWEEP, sweeps_dir=repo / "sweeps", conf_dir=repo / "conf")
    choices = (o.split("=", 1)[1] for job in jobs for o in job if o.startswith("+ensemble_member="))
    return list(dict.fromkeys(choices))


def member_names(repo: Path = REPO_ROOT) -> list[str]:
    """Every member design a sweep can name (sweeps/ensemble_member/*.yaml)."""
    return sorted(p.stem for p in (repo / "sweeps" / "ensemble_member").glob("*.yaml"))


def compose_member(member: str, spec: dict, repo: Path = REPO_ROOT):
    """The RunConfig of the ensemble sweep's job for `member`, trained ENSEMBLE_TRAIN_STEPS steps, not pretrained,
    with the benchmark's data, batch, cache and device (and its --override values last)."""
    from klue_tc.core.config import validate
    from klue_tc.jobs.sweeps import compose_sweep

    overrides = [
        f"+ensemble_member={member}",
        "pretrain=none",
        "cv.fold=0",
        f"data.batch_size={spec['batch_size']}",
        f"data.cache_dir={spec['cache_dir']}",
        "trainer.max_epochs=1",
        f"trainer.limit_train_batches={ENSEMBLE_TRAIN_STEPS}",
        f"trainer.accelerator={'gpu' if spec['gpu'] else 'cpu'}",
        "trainer.devices=1",
        "trainer.progress_bar=none",
        "logger=none",
        *spec.get("overrides", []),
    ]
    return validate(compose_sweep(SWEEP, overrides, sweeps_dir=repo / "sweeps", conf_dir=repo / "conf"))


def build_artefact(records: list, names: list[str], data, train_rows: np.ndarray, work: Path) -> Path:
    """The folder: each record as a member of ENSEMBLE_FOLDS fold models, the linear baselines beside them,
    every member weighted alike."""
    from klue_tc.ensemble.artefact import write_artefact
    from klue_tc.ensemble.linear import LinearFold
    from klue_tc.ensemble.members import LINEAR, NEURAL, Member, Titles
    from klue_tc.ensemble.selection import Selection
    from klue_tc.ensemble.stage import Ensemble
    from klue_tc.training.baseline import BASELINES
    from klue_tc.training.linear_files import model_path, save_linear_model

    texts, labels = [data.texts[i] for i in train_rows], data.labels[train_rows]
    unknown = np.full((len(labels), data.num_classes), 1 / data.num_classes)  # no out-of-fold predictions here
    members = [Member(name, name, NEURAL, unknown, None) for name in names]
    for member, record in zip(members, records):
        member.folds = [replace(record, fold=k) for k in range(ENSEMBLE_FOLDS)]
    for baseline in BASELINES:
        saved = model_path(work, baseline.short_name)
        save_linear_model(baseline.pipeline().fit(texts, labels), saved)
        folds = [LinearFold(k, baseline.default_c, 1.0, None, saved) for k in range(ENSEMBLE_FOLDS)]
        members.append(Member(baseline.short_name, baseline.name, LINEAR, unknown, None, folds=folds))
    selection = Selection((1,) * len(members), tuple(range(len(members))), (float("nan"),), (float("nan"),), 1)
    ensemble = Ensemble(work, members, Titles(labels, None, data.num_classes), selection, list(data.label_names))
    return write_artefact(ensemble, work / "ensemble-model")


def timed(call: Callable[[], object], clock: str = "wall") -> float:
    """Seconds `call` takes on the wall clock or this process's CPU clock (robust on a busy machine
    with one thread)."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    started = now()
    call()
    return now() - started


def serving_speeds(
    artefact: Path, single: tuple[Path, Path], texts: list[str], batch_size: int, clock: str = "wall"
) -> dict:
    """Titles/s of the ensemble's folder and of one fold model, each read from disk and run on `texts`;
    then each member's fold models alone, as the ensemble serves them."""
    from klue_tc.ensemble.artefact import artefact_probs, member_probs, read_manifest
    from klue_tc.ensemble.serving import neural_fold_probs

    manifest = read_manifest(artefact)
    classes = len(manifest["label_names"])
    # Imports, the morpheme dictionary and kernels warm for every timing: a served process keeps them.
    neural_fold_probs(*single, texts[:8], batch_size)
    artefact_probs(artefact, texts[:8], batch_size)
    single_s = timed(lambda: neural_fold_probs(*single, texts, batch_size), clock)
    ensemble_s = timed(lambda: artefact_probs(artefact, texts, batch_size), clock)
    per_member = []
    for member in manifest["members"]:
        seconds = timed(partial(member_probs, artefact, member, texts, classes, batch_size), clock)
        per_member.append(
            {
                "name": member["name"],
                "kind": member["kind"],
                "fold_models": len(member["folds"]),
                "seconds": seconds,
                "titles_per_s": len(texts) / seconds,
            }
        )
    return {
        "titles": len(texts),
        "clock": clock,
        "members": len(manifest["members"]),
        "fold_models": sum(len(m["folds"]) for m in manifest["members"]),
        "single_titles_per_s": len(texts) / single_s,
        "ensemble_titles_per_s": len(texts) / ensemble_s,
        "slowdown": ensemble_s / single_s,
        "per_member": per_member,
    }
