"""The report of a run or sweep: its records read, summarised with their noise, judged, drawn and written.

    python -m klue_tc.report outputs/sweeps/study [--wandb]

Modules, one job each: loading (records and run settings in), summary (one row per configuration,
the grid's gaps, the baseline), grid_model (one model of the whole grid: every interval and the
best's ties), title_bootstrap (validation intervals that resample titles too), effects, interactions
and claims (contrasts of the grid model and the verdicts), evidence (what the records can answer),
exclusions (the configurations left out, only by rules the runs' configs declare),
render (Markdown, CSV and the terminal's tables), plots; the further sections, each from the whole
fold records (sections says what they hand back): baselines (TF-IDF + SVM and NB-SVM side by side),
sizes (parameters, FLOPs, F1 against size), speed (seconds per epoch per machine), per_class
(per-class F1, confusion matrix, learning curves), class_mix (train's class mix against the
validation file, F1 reweighted to it); wandb_run (the report as one W&B run), write (all of it into
a folder), cli, and sweep_callback (Hydra's hook).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Lazy, so Hydra's import of the sweep callback does not load pandas and scipy on every run.
    if name == "write_report":
        from klue_tc.report.write import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
