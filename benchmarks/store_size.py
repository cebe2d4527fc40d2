"""The disk a store takes on the paper grid (sweeps/paper.yaml, 600 jobs), from measured fold sizes.

    python -m benchmarks.store_size [STORE ...]            # each store's mean fold, then the projection
    KLUE_TC_KOBERT_MODEL=spiece.model python -m benchmarks.store_size outputs/sweeps/smoke/results docs/ensemble/results

A fold's record and predictions are measured in the stores given (the last one holding them is the
paper's size: docs/ensemble/results is 5 folds of every title). Checkpoints are not in git, and the
smoke sweep's are of a tiny model, so the paper grid's checkpoints and tokenizers are measured by
building them at its size: each tokenizer fitted on fold 0's training titles of every title and
saved, each of the grid's 120 models built with that vocabulary and saved as a fold's checkpoint is
(weights only: klue_tc/engine/checkpoints.py); no training. The same build of the smoke sweep's
configurations is set against the checkpoints that sweep wrote, to show it measures what training
writes. The projection is 600 x (record + predictions + checkpoint + tokenizer).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.constants import REPO_ROOT
from klue_tc.core.config import keyed_settings, register_schemas, validate
from klue_tc.core.files import human_size
from klue_tc.data.titles import LABEL_NAMES, stratified_subsample, title_folds, training_titles
from klue_tc.jobs.sweeps import compose_sweep, sweep_jobs
from klue_tc.models.classifier import build_classifier
from klue_tc.store.disk import FoldSize, fold_sizes, size_of, typical_fold
from klue_tc.tokenizers.base import fit_tokenizer


def checkpoint_bytes(run, vocab_size: int, pad: int, classes: int) -> int:
    """The bytes of a fold's checkpoint of `run`'s model: its weights, as the fold keeps them."""
    model = build_classifier(vocab_size, pad, run.encoder, run.head, classes)
    slim = {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": {"vocab_size": vocab_size, **keyed_settings(run)},
        "pytorch-lightning_version": "2",
        "epoch": 0,
        "global_step": 0,
    }
    buffer = io.BytesIO()
    torch.save(slim, buffer)
    return buffer.getbuffer().nbytes


def grid_sizes(sweep: str, fold: int = 0) -> tuple[list[int], dict[str, int], int]:
    """Every configuration of `sweep` built at its size: its checkpoint's bytes, each tokenizer's
    folder's bytes (fitted once on the fold's training titles) and the count of jobs."""
    jobs = sweep_jobs(sweep)
    configurations = sorted({tuple(o for o in job if not o.startswith("cv.fold=")) for job in jobs})
    tokenizers: dict[str, tuple] = {}
    checkpoints = []
    with tempfile.TemporaryDirectory() as tmp:
        for job in configurations:
            run = validate(compose_sweep(sweep, [*job, f"cv.fold={fold}"]))
            name = run.tokenizer.name
            if name not in tokenizers:
                titles = training_titles(run.data, announce_fallback=False)
                data = stratified_subsample(titles, run.data.limit, run.seed)
                train_idx, _ = title_folds(data, run.cv.folds, run.cv.seed)[fold]
                tokenizer = fit_tokenizer(run.tokenizer, data.subset(train_idx).texts)
                folder = tokenizer.save(Path(tmp) / name)
                tokenizers[name] = (tokenizer, size_of(folder), data.num_classes)
                print(f"{sweep}: {name} tokenizer, vocabulary {tokenizer.vocab_size:,}: {human_size(size_of(folder))}")
            tokenizer, _, classes = tokenizers[name]
            checkpoints.append(checkpoint_bytes(run, tokenizer.vocab_size, tokenizer.specials.pad, classes))
    return checkpoints, {name: size for name, (_, size, _) in tokenizers.items()}, len(jobs)


def built_against_written(store: Path) -> None:
    """The build's checkpoint bytes beside those a sweep wrote, for each configuration in `store`."""
    import yaml
    from omegaconf import OmegaConf

    from klue_tc.tokenizers import load_tokenizer

    for record in sorted(store.glob("*/fold0.json")):
        written = next(record.with_suffix("").glob("*.ckpt"), None)
        if written is None:
            continue
        run = validate(OmegaConf.create(yaml.safe_load((record.parent / "config.yaml").read_text(encoding="utf-8"))))
        tokenizer = load_tokenizer(record.with_suffix("") / "tokenizer")
        built = checkpoint_bytes(run, tokenizer.vocab_size, tokenizer.specials.pad, len(LABEL_NAMES))
        print(f"  {record.parent.name}: written {written.stat().st_size:,} bytes, built {built:,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store_size", description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="*", type=Path, default=[REPO_ROOT / "docs" / "ensemble" / "results"])
    parser.add_argument("--sweep", default="paper", help="the grid projected (default: paper)")
    args = parser.parse_args(argv)
    register_schemas()
    measured = None
    for store in args.stores:
        fold = typical_fold(fold_sizes(store))
        if fold is None:
            print(f"{store}: no fold record")
            continue
        print(f"{store}: {len(fold_sizes(store))} folds, mean fold {human_size(fold.total)} ({fold.parts()})")
        if fold.checkpoint:
            print(f"{store}: its checkpoints beside the same build:")
            built_against_written(store)
        measured = fold
    if measured is None:
        print("no store with a fold record given", file=sys.stderr)
        return 2
    checkpoints, tokenizers, jobs = grid_sizes(args.sweep)
    checkpoint = round(statistics.mean(checkpoints))
    tokenizer = round(statistics.mean(tokenizers[name] for name in tokenizers))
    print(
        f"{args.sweep}: {len(checkpoints)} configurations built, checkpoint {human_size(min(checkpoints))} "
        f"to {human_size(max(checkpoints))}, mean {human_size(checkpoint)}"
    )
    fold = FoldSize(measured.record, measured.predictions, checkpoint, tokenizer)
    print(
        f"{args.sweep}: {jobs} jobs x {human_size(fold.total)} a fold ({fold.parts()}) = "
        f"{human_size(jobs * fold.total)}; "
        f"records and predictions alone {human_size(jobs * (fold.record + fold.predictions))}"
    )
    print(f"{args.sweep}: a fold in bytes (klue_tc/store/disk.py's PAPER_FOLD_BYTES): {vars(fold)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
