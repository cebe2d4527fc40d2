"""One configuration, all requested folds: the job that `python -m klue_tc` runs.

Finished (configuration, fold) records are looked up first, so reruns and resumed sweeps
skip them without reading data; each newly trained fold is stored atomically as it ends.
"""
from __future__ import annotations

import hashlib
import logging
import math
import time
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from klue_tc.config import DataConfig, RunConfig, TokenizerKind, job_config, validate
from klue_tc.data import (
    LabelledTitles, load_hub_split, load_splitters, read_labelled_file, stratified_folds, stratified_subsample,
)
from klue_tc.results import ResultsStore, atomic_write_json, config_hash
from klue_tc.tokenizers import TokenizerCache, kobert_model_file

log = logging.getLogger(__name__)


def quiet_libraries() -> None:
    """Keep job logs to what a user reads: our per-epoch lines, warnings and the result."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def data_identity(cfg: DataConfig) -> str:
    """Cheap content identity of the training data (the file's bytes, or the hub dataset)."""
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if path.is_file():
            return hashlib.sha1(path.read_bytes()).hexdigest()[:16]
        return f"missing:{path}"
    return f"hub:{cfg.hub_repo}/{cfg.hub_config}"


def load_training(cfg: DataConfig, seed: int) -> LabelledTitles:
    data = read_labelled_file(cfg.path) if cfg.path else load_hub_split(cfg.hub_repo, cfg.hub_config, "train")
    return stratified_subsample(data, cfg.limit, seed)


def load_validation(cfg: DataConfig) -> Optional[LabelledTitles]:
    if cfg.validation_path:
        return read_labelled_file(cfg.validation_path)
    if cfg.path is None:
        return load_hub_split(cfg.hub_repo, cfg.hub_config, "validation")
    return None


def results_root(run: RunConfig) -> Path:
    if run.results.dir:
        return Path(run.results.dir).expanduser()
    hydra = HydraConfig.get()
    if hydra.mode == RunMode.MULTIRUN:
        return Path(hydra.sweep.dir) / "results"
    return Path("outputs/results")


def describe(run: RunConfig) -> dict:
    return {
        "experiment": run.experiment, "encoder": run.encoder.name.value, "ln": run.encoder.ln.value,
        "layers": run.encoder.layers, "head": run.head.name.value, "tokenizer": run.tokenizer.name.value,
    }


def _std(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def summarise(run: RunConfig, key: str, records: list[dict]) -> dict:
    f1 = [r["f1"] for r in records]
    accuracy = [r["accuracy"] for r in records]
    speeds = [r["train_samples_per_s"] for r in records if r.get("train_samples_per_s") and not math.isnan(r["train_samples_per_s"])]
    return {
        **describe(run),
        "config_hash": key,
        "sweep": run.sweep,
        "folds": records,
        "cv_folds": run.cv.folds,
        "cv_f1_mean": float(np.mean(f1)),
        "cv_f1_std": _std(f1),
        "cv_accuracy_mean": float(np.mean(accuracy)),
        "cv_accuracy_std": _std(accuracy),
        "train_samples_per_s": float(np.mean(speeds)) if speeds else None,
    }


def run_job(cfg: DictConfig) -> float:
    job_start = time.perf_counter()
    quiet_libraries()
    run = validate(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    resolved = job_config(cfg)
    # The config that produced every number in this directory, resolved, beside metrics.json.
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved), encoding="utf-8")

    key = config_hash(run, data_identity(run.data))
    store = ResultsStore(results_root(run))
    wanted = [run.cv.fold] if run.cv.fold is not None else list(range(run.cv.folds))
    records = {k: store.get(key, k) for k in wanted} if run.results.resume else {}
    missing = [k for k in wanted if records.get(k) is None]
    for k in wanted:
        if k not in missing:
            log.info("fold %d of %s already finished (%s): skipped", k, key, store.root)

    group = run.logger.wandb.group or run.sweep or run.experiment
    last_logger = None
    if missing:
        data = load_training(run.data, run.seed)
        log.info("training data: %d titles from %s", len(data), data.source)
        if run.tokenizer.name is TokenizerKind.kobert:
            kobert_model_file(run.tokenizer)  # offline without a copy: fail now, not after torch loads
        # torch and lightning only now, so that a bad override or file fails before they load.
        imports_start = time.perf_counter()
        load_splitters()  # scikit-learn: timed as an import too
        from klue_tc.fold import prepare_fold, require_asked_gpu, train_fold
        from klue_tc.loggers import finish_wandb, make_logger

        # The time to first step leaves the imports out, as it did when they came before the job
        # (README: sweep overhead); in a sweep's later jobs in the same process they cost nothing.
        job_start += time.perf_counter() - imports_start

        require_asked_gpu(run.trainer)
        splits = stratified_folds(data.labels, run.cv.folds, run.cv.seed)
        cache = TokenizerCache(run.data.cache_dir)

        for k in missing:
            if last_logger is not None:
                finish_wandb(last_logger)
            prepared = prepare_fold(run, data, *splits[k], cache)
            last_logger = make_logger(run.logger, run_dir, f"{run.experiment}-{key}-fold{k}", group, f"fold{k}",
                                      {**resolved, "config_hash": key, "fold": k})
            try:
                record = train_fold(run, k, prepared, run_dir / f"fold{k}", last_logger, job_start,
                                    store.training_state_dir(key, k))
            except BaseException:
                finish_wandb(last_logger)
                raise
            record.update(describe(run), config_hash=key, data_source=data.source)
            store.put(key, k, record)
            store.discard_training_state(key, k)
            records[k] = record
            job_start = time.perf_counter()  # the next fold's time to first step starts here

    metrics = summarise(run, key, [records[k] for k in wanted])
    validation = load_validation(run.data)
    if validation is not None and all(r.get("checkpoint") for r in metrics["folds"]):
        from klue_tc.evaluate import score_validation

        metrics.update(score_validation(metrics["folds"], validation, run_dir, run.data.eval_batch_size))
    atomic_write_json(run_dir / "metrics.json", metrics)
    if last_logger is not None:  # set only where folds were trained, with finish_wandb imported
        finish_wandb(last_logger, summary={f"cv/{k[3:]}": v for k, v in metrics.items()
                                           if k.startswith("cv_") and isinstance(v, (int, float))}
                     | {k: v for k, v in metrics.items() if k in ("validation_f1", "validation_accuracy")})
    print(final_line(metrics), flush=True)
    score = metrics["cv_f1_mean"]
    if not math.isfinite(score) and "optuna" in str(HydraConfig.get().sweeper.get("_target_", "")):
        # hydra-optuna-sweeper 1.3 with optuna 2.x ends the whole study on a NaN objective, while
        # an exception is recorded as one failed trial and the study goes on.
        raise FloatingPointError(f"CV macro-F1 is {score}: the trial is recorded as failed")
    return score


def final_line(metrics: dict) -> str:
    line = (f"{metrics['experiment']}: CV macro-F1 {metrics['cv_f1_mean']:.4f} ± {metrics['cv_f1_std']:.4f}"
            f" over {len(metrics['folds'])} fold(s)")
    if "validation_f1" in metrics:
        line += f"; validation macro-F1 {metrics['validation_f1']:.4f} (accuracy {metrics['validation_accuracy']:.4f})"
    return line
