"""Experiment logging: one helper opens every W&B run (a fold's, a configuration's aggregate, the
sweep report's), offline by default, falling back to local files with one warning; and the
configuration's aggregate run, from its typed result."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

from klue_tc.core.config import LoggerConfig, LoggerKind, WandbConfig
from klue_tc.core.redaction import redact, redact_text
from klue_tc.store.records import RunResult

log = logging.getLogger(__name__)


def _has_api_key() -> bool:
    netrc = Path("~/.netrc").expanduser()
    return bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace")
    )


def open_wandb_run(
    cfg: WandbConfig,
    save_dir: Path,
    name: str,
    group: Optional[str],
    job_type: str,
    config: Optional[dict] = None,
    replaces_earlier: bool = False,
):
    """A started W&B run, or None with one warning when W&B cannot start (local files are the record).
    `replaces_earlier`: a run made again from the same records at each re-run (an aggregate, a
    report): offline, it takes the id of the one an earlier run left in `save_dir`, which it replaces."""
    mode = cfg.mode
    if mode == "online" and not _has_api_key():
        log.warning("W&B online mode asked for but no API key is set; logging offline")
        mode = "offline"
    run_id = None
    if replaces_earlier and mode == "offline":
        run_id = stable_run_id(save_dir, cfg.project, group, name)
        for earlier in (save_dir / "wandb").glob(f"offline-run-*-{run_id}"):
            shutil.rmtree(earlier, ignore_errors=True)
    try:
        import wandb

        save_dir.mkdir(parents=True, exist_ok=True)
        # W&B's metadata file records the command line, where a shell may have expanded a token.
        argv_has_secret = redact_text(" ".join(sys.argv)) != " ".join(sys.argv)
        # No console capture or system stats: jobs stay fast and their stdout stays readable.
        return wandb.init(
            project=redact(cfg.project),
            entity=redact(cfg.entity),
            name=redact(name),
            group=redact(group),
            job_type=job_type,
            dir=str(save_dir),
            mode=mode,
            id=run_id,
            config=redact(config),
            reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True, x_disable_meta=argv_has_secret),
        )
    except Exception as err:
        log.warning(
            "W&B could not start (%s: %s); continuing with local files",
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
        )
        return None


def stable_run_id(save_dir: Path, project: str, group: Optional[str], name: str) -> str:
    """The same W&B run id for the same run made again in the same folder."""
    text = "\0".join([str(Path(save_dir).resolve()), project, group or "", name])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def finish_wandb_run(run, exit_code: int = 0) -> None:
    """Finish the run (a non-zero `exit_code` marks it failed); offline_runs_line says how to view
    and upload the offline ones, once for all of a job's or sweep's runs."""
    if run is None:
        return
    run.finish(exit_code=exit_code)


def local_logs_line(kind: LoggerKind, run_dir: Path) -> Optional[str]:
    """Where a job's CSV or TensorBoard logs are and how to look at them, in one line."""
    if kind == LoggerKind.csv:
        return f"per-step and per-epoch metrics: {run_dir}/csv/fold<k>/metrics.csv (one CSV a fold)"
    if kind == LoggerKind.tensorboard:
        return (
            f"TensorBoard logs: {run_dir}/tensorboard; view them with `tensorboard --logdir {run_dir}/tensorboard` "
            "(pip install tensorboard, or the [tensorboard] extra)"
        )
    return None


def offline_runs_line(directory: Path) -> Optional[str]:
    """One line for every offline W&B run below `directory`: how to look at them without an account
    (`wandb leet`, a terminal viewer of local runs) and how to upload them all."""
    runs = sorted(Path(directory).rglob("offline-run-*"))
    runs = [r for r in runs if r.is_dir() and r.parent.name == "wandb"]
    if not runs:
        return None
    folders = sorted({r.parent for r in runs})
    if len(folders) == 1:
        view, upload = f"wandb leet {folders[0]}", f"wandb sync {folders[0]}/offline-run-*"
    else:
        view = f"wandb leet {folders[0]} (a job's)"
        upload = f"wandb sync $(find {directory} -type d -path '*/wandb/offline-run-*')"
    return f"W&B: {len(runs)} run(s) saved offline; view them with `{view}`, upload them with `{upload}`"


def make_logger(cfg: LoggerConfig, save_dir: Path, name: str, group: str, job_type: str, config: dict):
    """The Lightning logger of one fold's training: W&B, CSV, TensorBoard, or none."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    if cfg.name == LoggerKind.none:
        return None
    if cfg.name == LoggerKind.tensorboard:
        # Event files by tensorboardX (a dependency) where tensorboard itself is not installed.
        return TensorBoardLogger(save_dir=str(save_dir), name="tensorboard", version=job_type, default_hp_metric=False)
    if cfg.name == LoggerKind.wandb:
        run = open_wandb_run(cfg.wandb, save_dir, name, group, job_type, config)
        if run is not None:
            run.define_metric("val/f1", summary="max")
            run.define_metric("val/accuracy", summary="max")
            run.define_metric("inner/f1", summary="max")  # what chooses the epoch; the record has val's there
            # The run is started here and handed to Lightning: a failure shows now, not mid-training.
            return WandbLogger(experiment=run, save_dir=str(save_dir))
    return CSVLogger(save_dir=str(save_dir), name="csv", version=job_type)


def finish_logger(logger: Any, exit_code: int = 0) -> None:
    from lightning.pytorch.loggers import WandbLogger

    if isinstance(logger, WandbLogger):
        finish_wandb_run(logger.experiment, exit_code)


def config_group(group: Optional[str], sweep: Optional[str], experiment: str, key: str) -> str:
    """The W&B group of one configuration: its folds' runs and its aggregate run. In a sweep the
    sweep's name comes first, so that its configurations' groups sort together."""
    return group or (f"{sweep}-{experiment}-{key}" if sweep else f"{experiment}-{key}")


def log_aggregate(cfg: WandbConfig, result: RunResult, run_dir: Path, group: str) -> None:
    """The configuration's CV aggregate once, in a run of its own beside the folds' runs, with the
    validation confusion matrix and per-class F1."""
    describe = result.describe
    config = {**describe.to_dict(), "config_hash": result.config_hash}
    config.pop("pretrain")  # the keys aggregate runs had before pretraining existed: dashboards' filters still match
    name = f"{describe.experiment}-{result.config_hash}-cv"
    wandb_run = open_wandb_run(cfg, run_dir, name, group, "aggregate", config, replaces_earlier=True)
    if wandb_run is None:
        return
    import wandb

    f1 = result.f1
    summary = {"cv/f1_mean": f1.mean, "cv/f1_std": f1.std, "cv/n": f1.n, "cv/accuracy_mean": result.accuracy.mean}
    wandb_run.summary.update(summary)
    if result.validation is not None:
        from klue_tc.data.titles import LABEL_NAMES

        names, ensemble = result.label_names or LABEL_NAMES, result.validation.ensemble
        wandb_run.summary.update({"validation/f1": ensemble.f1, "validation/accuracy": ensemble.accuracy})
        per_class = [[name, f1] for name, f1 in ensemble.per_class_f1.items()]
        matrix = [[name, *row] for name, row in zip(names, ensemble.confusion_matrix)]
        wandb_run.log(
            {
                "validation/per_class_f1": wandb.Table(columns=["class", "f1"], data=per_class),
                "validation/confusion_matrix": wandb.Table(columns=["truth", *names], data=matrix),
                "validation/confusion_matrix_plot": wandb.Image(str(run_dir / "confusion_matrix.png")),
            }
        )
    finish_wandb_run(wandb_run)


def log_sweep_aggregates(sweep_dir: Path, cfg: WandbConfig) -> None:
    """One aggregate run per configuration of a sweep, in that configuration's group, where its
    folds ran as separate jobs (a job that trained every fold logged its own aggregate)."""
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
        group = config_group(cfg.group, first.sweep, first.describe.experiment, key)
        log_aggregate(cfg, combined, sweep_dir, group)
