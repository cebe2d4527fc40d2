"""The value a job hands back to Hydra's sweeper: its CV macro-F1, which the hyper-parameter
search (conf/hparams_search/optuna.yaml) maximises."""

from __future__ import annotations

import math

from hydra.core.hydra_config import HydraConfig

from klue_tc.store.records import RunResult


def sweeper_value(result: RunResult) -> float:
    """The CV macro-F1; NaN with a diverged fold (no candidate), which under Optuna is raised: the
    hydra-optuna-sweeper 1.3 with optuna 2.x ends the whole study on a NaN objective, while an
    exception is recorded as one failed trial and the study goes on."""
    score = result.score
    if not math.isfinite(score) and optuna_drives_this_job():
        raise FloatingPointError(f"CV macro-F1 is {score}: the trial is recorded as failed")
    return score


def optuna_drives_this_job() -> bool:
    return HydraConfig.get().runtime.choices.get("hydra/sweeper") == "optuna"
