"""One configuration, all requested folds: the job that `python -m klue_tc` runs.

check the inputs -> resolve the job's context -> look up finished folds -> train the missing ones
-> score the validation set -> write metrics.json -> log the aggregate -> say where it all is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from klue_tc.core import interrupts
from klue_tc.core.config import LoggerKind, job_config, keyed_settings, validate
from klue_tc.core.files import atomic_write_text, link_or_copy, link_or_copy_tree, tolerate_full_disk_in_logs
from klue_tc.core.redaction import redact, redact_files, redact_logs
from klue_tc.data.corpus import gather_sources
from klue_tc.data.titles import LABEL_NAMES
from klue_tc.jobs import distributed
from klue_tc.jobs.distributed import is_other_rank, plan_for_other_ranks, wait_for_pretrained, wait_for_tokenizer
from klue_tc.jobs.folds import FoldTitles, job_folds, prepare, require_scored_titles
from klue_tc.jobs.job_setup import resolve_job, results_root
from klue_tc.jobs.preflight import check_inputs
from klue_tc.store.records import FoldResult, RunResult, RunValidation
from klue_tc.store.results import ResultsStore
from klue_tc.training.job_context import FirstStepClock, JobContext

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig) -> RunResult:
    """The job's result, also written to metrics.json in its run directory."""
    job = start_job(cfg)
    finished, other_code = find_finished(job)
    missing = [k for k in job.folds if k not in finished]
    if missing:
        finished |= train_folds(job, missing)
    folds = [link_into_run(finished[k], job.fold_dir(k)) for k in job.folds]
    result = RunResult(
        job.describe,
        job.key,
        job.run.sweep,
        job.run.cv.folds,
        folds,
        sorted(k for k in finished if k not in missing),  # found in the store, not trained by this job
        other_code,
        label_names=list(job.inputs.train.label_names),
    )
    if job.inputs.validation is not None and all(f.checkpoint for f in folds):
        result.validation = score_validation(job, folds)
    result.save(job.run_dir / "metrics.json")
    if job.run.logger.name == LoggerKind.wandb and job.run.cv.fold is None:
        from klue_tc.jobs.loggers import log_aggregate

        log_aggregate(job.run.logger.wandb, result, job.run_dir, job.wandb_group)
    if HydraConfig.get().mode != RunMode.MULTIRUN:  # a sweep names its W&B runs once, as it ends
        from klue_tc.jobs.loggers import local_logs_line, offline_runs_line

        kind = job.run.logger.name
        line = offline_runs_line(job.run_dir) if kind == LoggerKind.wandb else local_logs_line(kind, job.run_dir)
        if line:
            print(line, flush=True)
    print(f"run directory: {job.run_dir}", flush=True)
    print(final_line(result), flush=True)
    return result


def start_job(cfg: DictConfig) -> JobContext:
    """Check the config and inputs, write the resolved config beside where metrics.json will be,
    and resolve everything the job needs before its first step."""
    clock = FirstStepClock()
    run = validate(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    redact_logs()
    tolerate_full_disk_in_logs()
    redact_hydra_files(run_dir)
    resolved = redact(job_config(cfg))  # what is written: config.yaml, the store's, W&B's
    store = ResultsStore(results_root(run))
    inputs = check_inputs(run, run_dir, store.root)  # the folders it writes first: a full disk is its line
    # The config that produced every number in this directory, resolved, beside metrics.json.
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(resolved))
    require_scored_titles(run, inputs)
    names = inputs.train.label_names
    labels = "" if names == LABEL_NAMES else f"; {len(names)} labels: {', '.join(names)}"
    log.info("training data: %d titles from %s%s", len(inputs.train), inputs.train.source, labels)
    sources = gather_sources(run, inputs.train, inputs.validation) if run.pretrain.active else None
    return resolve_job(run, resolved, run_dir, inputs, store, clock, sources)


def score_validation(job: JobContext, folds: list[FoldResult]) -> RunValidation:
    """The fold ensemble on the validation titles, its confusion matrix beside metrics.json."""
    from klue_tc.core.figures import plot_confusion

    if job.run.wide.on:
        from klue_tc.training.wide import score_wide_run as score_run
    else:
        from klue_tc.training.evaluate import score_run
    validation = score_run(folds, job.inputs.validation, job.run.data.eval_batch_size)
    names = list(job.inputs.validation.label_names)
    title = f"{job.run.experiment}: the fold ensemble on {Path(validation.ensemble.source).name}"
    plot_confusion(validation.ensemble.confusion_matrix, names, job.run_dir / "confusion_matrix.png", title)
    return validation


def redact_hydra_files(run_dir: Path) -> None:
    """Hydra has already written the overrides as given (a shell-expanded $HF_TOKEN among them)."""
    hydra = HydraConfig.get()
    written = list((run_dir / hydra.output_subdir).glob("*.yaml")) if hydra.output_subdir else []
    if hydra.mode == RunMode.MULTIRUN:
        written.append(Path(hydra.sweep.dir) / "multirun.yaml")
    redact_files(written)


def find_finished(job: JobContext) -> tuple[dict[int, FoldResult], list[int]]:
    """The folds already finished (records of this code, or of any with results.reuse=any), and
    which of them came from other code."""
    if not job.run.results.resume:
        return {}, []
    finished, reused_other_code = {}, []
    for k in job.folds:
        lookup = job.store.find(job.key, k, job.code, reuse_any=job.run.results.reuse == "any")
        record = lookup.record
        if record is None:
            continue
        if not has_model(record):
            log.warning(
                "fold %d of %s: its scores are reused, but its checkpoint (%s) is gone: no validation "
                "score or prediction from this run (results.resume=false trains it again)",
                k,
                job.key,
                record.checkpoint,
            )
        finished[k] = record
        if lookup.reused_other_code:
            reused_other_code.append(k)
            log.warning(
                "fold %d of %s: reusing the record of other code (%s), as results.reuse=any asks",
                k,
                job.key,
                record.code.label() if record.code else "unknown",
            )
        else:
            log.info("fold %d of %s already finished (%s): skipped", k, job.key, job.store.root)
    return finished, reused_other_code


def train_folds(job: JobContext, missing: list[int]) -> dict[int, FoldResult]:
    """Train the folds no record holds, each claimed in the results store while this job trains it."""
    # torch and lightning only now, so that a bad override or file fails before they load. The time
    # to first step leaves the imports out; in a sweep's later jobs in one process they cost nothing.
    with job.clock.paused():
        from klue_tc.jobs.progress import JobProgress, quiet_libraries
        from klue_tc.tokenizers import TokenizerCache

        quiet_libraries()
    folds, cache = job_folds(job.run, job.inputs), TokenizerCache(job.run.data.cache_dir)
    progress = JobProgress(len(missing), job.run.trainer.max_epochs)
    with contextlib.ExitStack() as held:
        trained = claim_folds(job, missing, held)
        to_train = [k for k in missing if k not in trained]
        held.enter_context(plan_for_other_ranks(job.config, job.run_dir, job.store.root, job.key, to_train))
        trained |= train_planned_folds(job, to_train, folds, cache, progress)
    return trained


def train_planned_folds(
    job: JobContext, to_train: list[int], folds: list[FoldTitles], cache, progress=None
) -> dict[int, FoldResult]:
    """The folds rank 0 plans, in its order: what every rank of a multi-device fit runs (the
    other ranks without progress lines, klue_tc/jobs/distributed.py); the records, on rank 0."""
    trained = {}
    for k in to_train:
        callbacks = [*progress.callbacks(k), progress.bar()] if progress is not None else []
        record = train_and_store(job, k, folds[k], cache, callbacks)
        if record is not None:
            trained[k] = record
        if interrupts.requested() is not None:  # asked to stop as the fold's training ended
            raise interrupts.JobInterrupted(interrupts.requested(), f"after fold {k} was finished and recorded")
        job.clock.restart()  # the next fold's time to first step starts here
    return trained


def run_other_rank() -> int:
    """Train rank 0's folds as one more rank of each fit, through the fold pipeline rank 0 runs
    (train_planned_folds, below); nothing is written but the cache."""
    from klue_tc.jobs.progress import quiet_libraries
    from klue_tc.tokenizers import TokenizerCache

    logging.basicConfig(level=logging.WARNING, format=f"rank {os.environ['LOCAL_RANK']}: %(levelname)s: %(message)s")
    distributed.log.setLevel(logging.INFO)  # its few lines say what the rank trains from
    plan = json.loads(os.environ[distributed.PLAN_ENV])
    run, run_dir, root = validate(plan["config"]), Path(plan["run_dir"]), Path(plan["results_root"])
    inputs = check_inputs(run, run_dir, root)
    quiet_libraries()
    sources = gather_sources(run, inputs.train, inputs.validation) if run.pretrain.active else None
    store = ResultsStore(root)
    job = resolve_job(run, plan["config"], run_dir, inputs, store, FirstStepClock(), sources, key=plan["key"])
    train_planned_folds(job, plan["folds"], job_folds(run, inputs), TokenizerCache(run.data.cache_dir))
    return 0


def claim_folds(job: JobContext, folds: list[int], held: contextlib.ExitStack) -> dict[int, FoldResult]:
    """Every fold's lock in the results store, all held (by `held`) before any trains, so that the
    list the other ranks of a multi-device fit are given is final; the records among them that an
    identical job finished meanwhile."""
    for k in folds:
        held.enter_context(job.store.claim(job.key, k))
    if not job.run.results.resume:
        return {}
    found = {k: job.store.find(job.key, k, job.code, reuse_any=False).record for k in folds}
    return {k: record for k, record in found.items() if record is not None}


def train_and_store(job: JobContext, k: int, fold: FoldTitles, cache, callbacks: list) -> Optional[FoldResult]:
    """One fold: its pretrained encoder (with pretraining), its encoded titles, its training under
    its own logger, and its record in the results store. The other ranks of a multi-device fit
    take rank 0's encoder or tokenizer, log nothing and store nothing (None)."""
    from klue_tc.training.fold import train_fold

    if job.sources is not None:
        pretrained = pretrain_for_fold(job, k, fold.held_out, cache)
    else:
        pretrained = None
        if is_other_rank():
            wait_for_tokenizer(job.run, cache, fold.titles.subset(fold.train_idx))
    teacher = job.inputs.teacher
    prepared = prepare(job.run, fold, cache, pretrained, teacher.probs if teacher is not None else None)
    with fold_logger(job, k) as logger:
        if job.run.wide.on:  # the wide path beside the encoder (klue_tc/training/wide.py)
            from klue_tc.training.wide import train_wide_fold

            record = train_wide_fold(job, k, fold, prepared, logger, callbacks, pretrained)
        else:
            record = train_fold(job, k, prepared, logger, callbacks, pretrained)
    if record is None:
        return None
    job.store.put(job.key, k, record, job.config)
    job.store.discard_training_state(job.key, k)
    return record


@contextlib.contextmanager
def fold_logger(job: JobContext, k: int) -> Iterator:
    """The fold's Lightning logger, finished as failed when its training raises (Ctrl-C reaches
    here as Lightning's sys.exit(1))."""
    from klue_tc.jobs.loggers import finish_logger, make_logger

    if is_other_rank():  # rank 0 logs the fit
        yield None
        return
    config = {**job.config, "config_hash": job.key, "fold": k}
    logger = make_logger(job.run.logger, job.run_dir, job.run_name(k), job.wandb_group, f"fold{k}", config)
    try:
        yield logger
    except BaseException:
        finish_logger(logger, exit_code=1)
        raise
    finish_logger(logger)


def pretrain_for_fold(job: JobContext, k: int, held_out: np.ndarray, cache):
    """The fold's pretrained encoder: found in the store, or pretrained now, with its own progress
    line and its own W&B run in the job's group; on the other ranks, the one rank 0 stores."""
    from klue_tc.data.corpus import fold_corpus
    from klue_tc.jobs.loggers import finish_wandb_run, open_wandb_run
    from klue_tc.jobs.progress import PretrainLine
    from klue_tc.pretraining.encoder_keys import pretrained_keys, stored_key
    from klue_tc.pretraining.objectives import objective
    from klue_tc.pretraining.pretrain import ensure_pretrained, store_for

    run, identity = job.run, job.inputs.tokenizer_identity
    corpus = fold_corpus(run, job.sources, job.inputs.train, held_out)
    keys = pretrained_keys(run, job.device, corpus, identity)
    store = store_for(run, job.store.root, keys[0])
    key = stored_key(store, keys)
    if is_other_rank():
        return wait_for_pretrained(store, key, k)
    line, wandb_run = PretrainLine(loss_name=objective(run.pretrain.objective).loss_name), None
    if run.logger.name == LoggerKind.wandb and store.find(key) is None:
        config = {"pretrain": keyed_settings(run.pretrain), "pretrained_key": key, "corpus_titles": len(corpus.texts)}
        name = f"{run.experiment}-pretrain-{key}"
        wandb_run = open_wandb_run(run.logger.wandb, job.run_dir, name, job.wandb_group, "pretrain", config)

    def on_step(step: int, total: int, loss, batch) -> None:
        line(step, total, loss)
        if wandb_run is not None and (step % run.trainer.log_every_n_steps == 0 or step == total):
            wandb_run.log({f"pretrain/{run.pretrain.objective}_loss": float(loss)}, step=step)

    try:
        return ensure_pretrained(run, job.device, corpus, store, cache, identity, on_step)
    finally:
        finish_wandb_run(wandb_run)


def has_model(record: FoldResult) -> bool:
    return bool(record.checkpoint and Path(record.checkpoint).is_file() and Path(record.tokenizer_dir).is_dir())


def link_into_run(record: FoldResult, fold_dir: Path) -> FoldResult:
    """The fold's checkpoint and tokenizer inside this run directory: a fold trained by an earlier
    run is hard-linked in (copied across file systems), so the run holds every file it names."""
    if not has_model(record):
        return replace(record, checkpoint=None)
    checkpoint = Path(record.checkpoint)
    if checkpoint.parent.resolve() == fold_dir.resolve():
        return record
    fold_dir.mkdir(parents=True, exist_ok=True)
    target = fold_dir / checkpoint.name
    link_or_copy(checkpoint, target)
    link_or_copy_tree(Path(record.tokenizer_dir), fold_dir / "tokenizer")
    return replace(record, checkpoint=str(target.resolve()), tokenizer_dir=str((fold_dir / "tokenizer").resolve()))


def final_line(result: RunResult) -> str:
    """The job's last line: its CV macro-F1 (mean ± std over its folds) and, when scored, its
    validation macro-F1. One fold (`cv.fold=k`) is no CV: its own score, with no mean or spread; a
    final model (`cv.folds=1`) is scored on the validation titles alone."""
    name, f1 = result.describe.experiment, result.f1
    if result.cv_folds == 1:  # a final model (klue_tc/jobs/folds.py): no CV, its score is the validation titles'
        model = result.folds[0]
        line = (
            f"{name}: final model on all {model.train_size + model.inner_size:,} training "
            f"titles (epoch {model.best_epoch} of {model.epochs_run}, chosen on its inner split), no CV"
        )
    elif len(result.folds) == 1:
        fold = result.folds[0]
        line = f"{name}: fold {fold.fold} macro-F1 {fold.f1:.4f} (one fold: no CV mean or spread)"
    else:
        line = f"{name}: CV macro-F1 {f1.mean:.4f} ± {f1.std:.4f} over {counted(len(result.folds), 'fold')}"
    if result.validation is not None:
        ensemble = result.validation.ensemble
        line += f"; validation macro-F1 {ensemble.f1:.4f} (accuracy {ensemble.accuracy:.4f})"
    if result.diverged_folds:
        diverged = result.diverged_folds
        line += f"; {'fold' if len(diverged) == 1 else 'folds'} {', '.join(map(str, diverged))} diverged"
        line += " (left out of the mean)" if len(result.folds) > 1 else ""
    reused = [f for f in result.folds if f.fold in result.reused_folds]
    if reused:
        line += f"; {reused_phrase(reused)}"
        if result.reused_from_other_code:
            line += f" ({len(result.reused_from_other_code)} made by other code: results.reuse=any)"
    return line


def counted(n: int, noun: str) -> str:
    """`1 fold`, `3 folds`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def reused_phrase(reused: list[FoldResult]) -> str:
    """`3 folds reused (finished 2026-12-07 20:04 to 20:10 UTC)`: when the reused folds' training
    ended, the earliest to the latest (minutes, UTC; the date again only where it differs)."""
    times = sorted(f.finished_at[:16].replace("T", " ") for f in reused if f.finished_at)
    phrase = f"{counted(len(reused), 'fold')} reused"
    if not times:  # records of older code may lack the time
        return phrase
    first, last = times[0], times[-1]
    if last == first:
        return f"{phrase} (finished {first} UTC)"
    return f"{phrase} (finished {first} to {last[11:] if last[:10] == first[:10] else last} UTC)"
