"""One configuration, all requested folds: the job that `python -m klue_tc` runs.

check the inputs -> look up finished folds -> train the missing ones -> score the validation set
-> write metrics.json -> log the aggregate -> say where it all is.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from klue_tc import interrupts
from klue_tc.config import LoggerKind, RunConfig, WandbConfig, job_config, keyed_settings, validate
from klue_tc.corpus import PretrainSources, gather_sources
from klue_tc.data import stratified_folds
from klue_tc.distributed import plan_for_other_ranks
from klue_tc.files import atomic_write_text, link_or_copy, link_or_copy_tree, tolerate_full_disk_in_logs
from klue_tc.fingerprint import code_version
from klue_tc.preflight import JobInputs, check_inputs
from klue_tc.records import Describe, FoldResult, RunResult
from klue_tc.redaction import redact, redact_files, redact_logs
from klue_tc.results import ResultsStore, config_hash

log = logging.getLogger(__name__)


def results_root(run: RunConfig) -> Path:
    if run.results.dir:
        return Path(run.results.dir).expanduser()
    hydra = HydraConfig.get()
    # A named sweep (a sweep file) keeps its records in its own, stable folder; an ad hoc `-m`
    # shares the single runs' store, since its timestamped folder is new at every re-run.
    if hydra.mode == RunMode.MULTIRUN and run.sweep:
        return Path(hydra.sweep.dir) / "results"
    return Path("outputs/results")


def describe(run: RunConfig) -> Describe:
    return Describe(
        run.experiment,
        run.encoder.name,
        run.encoder.ln.value,
        run.encoder.layers,
        run.head.name,
        run.tokenizer.name,
        run.pretrain.objective,
    )


def run_job(cfg: DictConfig) -> float:
    job_start = time.perf_counter()
    run = validate(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    redact_logs()
    tolerate_full_disk_in_logs()
    redact_hydra_files(run_dir)
    resolved = redact(job_config(cfg))  # what is written: config.yaml, the store's, W&B's
    # The config that produced every number in this directory, resolved, beside metrics.json.
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(resolved))
    store = ResultsStore(results_root(run))
    inputs = check_inputs(run, run_dir, store.root)
    log.info("training data: %d titles from %s", len(inputs.train), inputs.train.source)

    sources = gather_sources(run, inputs.train, inputs.validation) if run.pretrain.objective != "none" else None
    key, code = results_key(run, inputs, sources), code_version()
    wanted = [run.cv.fold] if run.cv.fold is not None else list(range(run.cv.folds))
    finished, other_code = find_finished(store, key, wanted, run, code)
    reused = sorted(finished)  # found in the store, not trained by this job
    missing = [k for k in wanted if k not in finished]
    if missing:
        finished |= train_folds(run, key, missing, inputs, store, run_dir, resolved, job_start, sources)
    folds = [link_into_run(finished[k], run_dir / f"fold{k}") for k in wanted]

    result = RunResult(
        describe(run),
        key,
        run.sweep,
        run.cv.folds,
        folds,
        reused,
        other_code,
        label_names=list(inputs.train.label_names),
    )
    if inputs.validation is not None and all(f.checkpoint for f in folds):
        result.validation = score_validation(folds, inputs, run, run_dir)
    result.save(run_dir / "metrics.json")
    metrics = result.to_dict()
    if run.logger.name == LoggerKind.wandb and run.cv.fold is None:
        log_aggregate(run.logger.wandb, metrics, run_dir, wandb_group(run, key))
    print(f"run directory: {run_dir}", flush=True)
    print(final_line(metrics), flush=True)
    # A configuration with a diverged fold is no candidate: NaN, a failed trial for Optuna.
    score = float("nan") if metrics["diverged_folds"] else metrics["cv_f1_mean"]
    if not math.isfinite(score) and "optuna" in str(HydraConfig.get().sweeper.get("_target_", "")):
        # hydra-optuna-sweeper 1.3 with optuna 2.x ends the whole study on a NaN objective, while
        # an exception is recorded as one failed trial and the study goes on.
        raise FloatingPointError(f"CV macro-F1 is {score}: the trial is recorded as failed")
    return score


def score_validation(folds: list[FoldResult], inputs: JobInputs, run: RunConfig, run_dir: Path) -> dict:
    """The fold ensemble on the validation titles, its confusion matrix beside metrics.json."""
    from klue_tc.evaluate import score_run
    from klue_tc.report.plots import plot_confusion_matrix

    validation = score_run(folds, inputs.validation, run.data.eval_batch_size)
    plot_confusion_matrix(
        validation["validation_confusion_matrix"], list(inputs.validation.label_names), run_dir / "confusion_matrix.png"
    )
    return validation


def redact_hydra_files(run_dir: Path) -> None:
    """Hydra has already written the overrides as given (a shell-expanded $HF_TOKEN among them)."""
    hydra = HydraConfig.get()
    written = list((run_dir / hydra.output_subdir).glob("*.yaml")) if hydra.output_subdir else []
    if hydra.mode == RunMode.MULTIRUN:
        written.append(Path(hydra.sweep.dir) / "multirun.yaml")
    redact_files(written)


def results_key(run: RunConfig, inputs: JobInputs, sources: PretrainSources | None = None) -> str:
    from klue_tc.hardware import default_precision

    return config_hash(
        run,
        inputs.train.fingerprint(),
        default_precision(run.trainer),
        inputs.tokenizer_identity,
        sources.fingerprint() if sources is not None else None,
    )


def pretrained_root(run: RunConfig) -> Path:
    """`pretrain.dir`, else `pretrained` beside the results store (so a sweep's jobs share it)."""
    return Path(run.pretrain.dir).expanduser() if run.pretrain.dir else results_root(run).parent / "pretrained"


def find_finished(store: ResultsStore, key: str, wanted: list[int], run: RunConfig, code) -> tuple[dict, list[int]]:
    """The folds already finished (records of this code, or of any with results.reuse=any), and
    which of them came from other code."""
    if not run.results.resume:
        return {}, []
    finished, reused_other_code = {}, []
    for k in wanted:
        lookup = store.find(key, k, code, reuse_any=run.results.reuse == "any")
        record = lookup.record
        if record is None:
            continue
        if not has_model(record):
            log.warning(
                "fold %d of %s: its scores are reused, but its checkpoint (%s) is gone: no validation "
                "score or prediction from this run (results.resume=false trains it again)",
                k,
                key,
                record.checkpoint,
            )
        finished[k] = record
        if lookup.reused_other_code:
            reused_other_code.append(k)
            log.warning(
                "fold %d of %s: reusing the record of other code (%s), as results.reuse=any asks",
                k,
                key,
                record.code.label() if record.code else "unknown",
            )
        else:
            log.info("fold %d of %s already finished (%s): skipped", k, key, store.root)
    return finished, reused_other_code


def train_folds(
    run: RunConfig,
    key: str,
    missing: list[int],
    inputs: JobInputs,
    store: ResultsStore,
    run_dir: Path,
    resolved: dict,
    job_start: float,
    sources: PretrainSources | None = None,
) -> dict[int, FoldResult]:
    # torch and lightning only now, so that a bad override or file fails before they load. The time
    # to first step leaves the imports out; in a sweep's later jobs in one process they cost nothing.
    imports_start = time.perf_counter()
    from klue_tc.loggers import finish_logger, make_logger
    from klue_tc.progress import JobProgress, quiet_libraries
    from klue_tc.tokenizers import TokenizerCache
    from klue_tc.training import prepare_fold, train_fold

    quiet_libraries()
    job_start += time.perf_counter() - imports_start
    splits = stratified_folds(inputs.train.labels, run.cv.folds, run.cv.seed)
    cache = TokenizerCache(run.data.cache_dir)
    progress = JobProgress(len(missing), run.trainer.max_epochs)
    group, code, trained = wandb_group(run, key), code_version(), {}
    with contextlib.ExitStack() as held:
        # All the job's folds are held before any trains, so that the list the other ranks of a
        # multi-device fit are given is final.
        for k in missing:
            held.enter_context(store.claim(key, k))
        for k in missing:
            lookup = store.find(key, k, code, reuse_any=False)  # an identical job may have finished it meanwhile
            if lookup.record is not None and run.results.resume:
                trained[k] = lookup.record
        to_train = [k for k in missing if k not in trained]
        held.enter_context(plan_for_other_ranks(resolved, run_dir, store.root, key, to_train))
        for k in to_train:
            pretrained = None
            if sources is not None:
                pretrained = pretrain_for_fold(run, sources, inputs, splits[k][1], cache, run_dir, group)
            prepared = prepare_fold(run, inputs.train, *splits[k], cache, pretrained)
            logger = make_logger(
                run.logger,
                run_dir,
                f"{run.experiment}-{key}-fold{k}",
                group,
                f"fold{k}",
                {**resolved, "config_hash": key, "fold": k},
            )
            try:
                record = train_fold(
                    run,
                    k,
                    prepared,
                    run_dir / f"fold{k}",
                    logger,
                    job_start,
                    store.training_state_dir(key, k),
                    callbacks=[progress.callback(k), progress.bar()],
                    validation=inputs.validation,
                    pretrained=pretrained,
                )
            except BaseException:  # Ctrl-C reaches here as Lightning's sys.exit(1)
                finish_logger(logger, exit_code=1)
                raise
            finish_logger(logger)
            record = replace(
                record,
                describe=describe(run),
                config_hash=key,
                code=code,
                data_source=inputs.train.source,
                finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
            store.put(key, k, record, resolved)
            store.discard_training_state(key, k)
            trained[k] = record
            if interrupts.requested() is not None:  # asked to stop as the fold's training ended
                raise interrupts.JobInterrupted(interrupts.requested(), f"after fold {k} was finished and recorded")
            job_start = time.perf_counter()  # the next fold's time to first step starts here
    return trained


def pretrain_for_fold(
    run: RunConfig, sources: PretrainSources, inputs: JobInputs, held_out, cache, run_dir: Path, group: str
):
    """The fold's pretrained encoder: found in the store, or pretrained now, with its own progress
    line and its own W&B run in the job's group."""
    from klue_tc.corpus import fold_corpus
    from klue_tc.loggers import finish_wandb_run, open_wandb_run
    from klue_tc.pretraining import PretrainedStore, ensure_pretrained, pretrained_key
    from klue_tc.progress import PretrainLine

    corpus = fold_corpus(run, sources, inputs.train, held_out)
    store, key = PretrainedStore(pretrained_root(run)), pretrained_key(run, corpus, inputs.tokenizer_identity)
    line, wandb_run = PretrainLine(), None
    if run.logger.name == LoggerKind.wandb and store.find(key) is None:
        config = {"pretrain": keyed_settings(run.pretrain), "pretrained_key": key, "corpus_titles": len(corpus.texts)}
        wandb_run = open_wandb_run(
            run.logger.wandb, run_dir, f"{run.experiment}-pretrain-{key}", group, "pretrain", config
        )

    def on_step(step: int, total: int, loss, batch) -> None:
        line(step, total, loss)
        if wandb_run is not None and (step % run.trainer.log_every_n_steps == 0 or step == total):
            wandb_run.log({"pretrain/mlm_loss": float(loss)}, step=step)

    try:
        return ensure_pretrained(run, corpus, store, cache, inputs.tokenizer_identity, on_step)
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


def wandb_group(run: RunConfig, key: str) -> str:
    """One group per configuration (its folds and its aggregate), in a sweep as in a single run."""
    from klue_tc.loggers import config_group

    return config_group(run.logger.wandb.group, run.sweep, run.experiment, key)


def log_aggregate(wandb_cfg: WandbConfig, metrics: dict, run_dir: Path, group: str) -> None:
    """The configuration's CV aggregate once, in a run of its own beside the folds' runs, with the
    validation confusion matrix and per-class F1."""
    from klue_tc.loggers import finish_wandb_run, open_wandb_run

    wandb_run = open_wandb_run(
        wandb_cfg,
        run_dir,
        f"{metrics['experiment']}-{metrics['config_hash']}-cv",
        group,
        "aggregate",
        {**metrics_config(metrics)},
    )
    if wandb_run is None:
        return
    import wandb

    wandb_run.summary.update(
        {
            "cv/f1_mean": metrics["cv_f1_mean"],
            "cv/f1_std": metrics["cv_f1_std"],
            "cv/n": metrics["cv_f1_n"],
            "cv/accuracy_mean": metrics["cv_accuracy_mean"],
        }
    )
    if "validation_f1" in metrics:
        from klue_tc.data import LABEL_NAMES

        names = metrics.get("label_names") or LABEL_NAMES
        wandb_run.summary.update(
            {"validation/f1": metrics["validation_f1"], "validation/accuracy": metrics["validation_accuracy"]}
        )
        per_class = metrics["validation_per_class_f1"]
        matrix = metrics["validation_confusion_matrix"]
        wandb_run.log(
            {
                "validation/per_class_f1": wandb.Table(
                    columns=["class", "f1"], data=[[k, v] for k, v in per_class.items()]
                ),
                "validation/confusion_matrix": wandb.Table(
                    columns=["truth", *names], data=[[name, *row] for name, row in zip(names, matrix)]
                ),
                "validation/confusion_matrix_plot": wandb.Image(str(run_dir / "confusion_matrix.png")),
            }
        )
    finish_wandb_run(wandb_run)


def log_sweep_aggregates(sweep_dir: Path, wandb_cfg: WandbConfig) -> None:
    """One aggregate run per configuration of a sweep, in that configuration's group, where its
    folds ran as separate jobs (a job that trained every fold logged its own aggregate)."""
    from klue_tc.loggers import config_group

    by_config: dict[str, list[RunResult]] = {}
    for path in sorted(sweep_dir.glob("**/metrics.json")):
        try:
            result = RunResult.load(path)
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("%s skipped for the W&B aggregates (%s)", path, type(err).__name__)
            continue
        by_config.setdefault(result.config_hash, []).append(result)
    for key, results in by_config.items():
        if any(len(r.folds) >= r.cv_folds for r in results):
            continue
        folds = {f.fold: f for r in results for f in r.folds}
        first = results[0]
        combined = RunResult(first.describe, key, first.sweep, first.cv_folds, [folds[k] for k in sorted(folds)])
        group = config_group(wandb_cfg.group, first.sweep, first.describe.experiment, key)
        log_aggregate(wandb_cfg, combined.to_dict(), sweep_dir, group)


def metrics_config(metrics: dict) -> dict:
    return {k: metrics[k] for k in ("experiment", "encoder", "ln", "layers", "head", "tokenizer", "config_hash")}


def final_line(metrics: dict) -> str:
    line = (
        f"{metrics['experiment']}: CV macro-F1 {metrics['cv_f1_mean']:.4f} ± {metrics['cv_f1_std']:.4f}"
        f" over {len(metrics['folds'])} fold(s)"
    )
    if "validation_f1" in metrics:
        line += f"; validation macro-F1 {metrics['validation_f1']:.4f} (accuracy {metrics['validation_accuracy']:.4f})"
    if metrics.get("diverged_folds"):
        line += f"; fold(s) {', '.join(map(str, metrics['diverged_folds']))} diverged (left out of the mean)"
    reused = [f for f in metrics["folds"] if f["fold"] in metrics["reused_folds"]]
    if reused:
        since = min(f["finished_at"] for f in reused)[:16].replace("T", " ")
        line += f"; {len(reused)} fold(s) reused, finished from {since} UTC"
        if metrics["reused_from_other_code"]:
            line += f" ({len(metrics['reused_from_other_code'])} made by other code: results.reuse=any)"
    return line
