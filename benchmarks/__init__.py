"""Training throughput and macro-F1 against the original notebook's design; sweep overhead; GPU projection.

    python -m benchmarks [--limit 5000] [--epochs 1] [--encoders transformer,trans_blstm,...]
    python -m benchmarks --gpu          # on CUDA, in three phases of at most --phase-budget s each

With --gpu: (1) titles/s per encoder on the full train split, bf16, in the paper sweep's batch
widths and padded to one width; (2) 2, 4 and 8 jobs at once on the one GPU, their encoders in
turn, as the speed-up over running them one by one; (3) the main job's per-job overhead and the
projected wall time of sweeps/paper.yaml at the best measured concurrency. Each phase prints as it
goes and starts no run once its budget is spent.

Each encoder (3 layers, the experiments' sizes) is trained four ways on the same titles, each
in a fresh subprocess with the same torch thread count:

- klue_tc: klue_tc's own path (``prepare_fold`` + ``train_fold``), ``data.bucketing=true``;
- notebook path: the same with ``data.bucketing=false`` (every title padded to the longest
  training title, no buckets: the original notebook's data path);
- seed_reference: ``../shared/bench/seed_reference.py`` (the notebook's design as a plain torch
  loop), where it is present and has that architecture;
- pretrain: klue_tc's masked-LM pretraining loop (klue_tc.pretraining.pretrain) for the same encoder on
  the same titles, batch, epochs, precision and threads, beside the klue_tc run, as the ratio of
  their loop titles/s; and both training steps' achieved GFLOP/s (FLOPs counted by
  klue_tc.training.model_size) against a large square matrix product's in the same precision and threads.

The ensemble run serves an ensemble's folder (benchmarks/ensemble.py: sweeps/ensemble.yaml's member
designs, or ``--ensemble-members``, and the linear baselines, 5 fold models each) against one fold
model, as titles/s of ``python -m klue_tc.predict``, with each member's share.

``--runs`` chooses among klue_tc, pretrain, notebook, reference, overhead and ensemble (default: all).

The training split is seed_reference's own (a stratified 10% of --data held out with
random_state=0, then --limit titles sampled from the rest with random_state=0), so all three
train on the same titles and are scored on the same held-out titles. Titles/s is FoldMonitor's
``train_samples_per_s``, the figure ``metrics.json`` reports. Sweep overhead is measured by
running the real main job (``python -m klue_tc``) twice, with a fresh cache and then cached.
"""

from benchmarks.cli import main
from benchmarks.constants import DEFAULT_DATA, ENCODERS, LAYERS, REPO_ROOT, YNAT_TRAIN_TITLES
from benchmarks.processes import Finished, run_measured
from benchmarks.projection import (
    concurrent_throughput,
    fastest,
    gpu_projection,
    project_sweep,
    sweep_grid,
)
from benchmarks.reference import (
    CPU_CLOCK_LAUNCHER,
    DEFAULT_REFERENCE,
    REFERENCE_ARCH,
    parse_reference_line,
    reference_split,
)
from benchmarks.render import (
    DASH,
    PRETRAIN_HEADER,
    TABLE_HEADER,
    TARGET_CACHED_FIRST_STEP_S,
    TARGET_PRETRAIN_RATIO,
    TARGET_SPEEDUP,
    efficiency,
    fmt,
    fmt_seconds,
    markdown_table,
    pretrain_rows,
    print_rich,
    render,
    table_rows,
    target_checks,
)
from benchmarks.runner import Bench
from benchmarks.worker import run_worker

__all__ = [
    "DEFAULT_DATA",
    "ENCODERS",
    "LAYERS",
    "REPO_ROOT",
    "YNAT_TRAIN_TITLES",
    "CPU_CLOCK_LAUNCHER",
    "DEFAULT_REFERENCE",
    "REFERENCE_ARCH",
    "parse_reference_line",
    "reference_split",
    "concurrent_throughput",
    "fastest",
    "gpu_projection",
    "sweep_grid",
    "project_sweep",
    "DASH",
    "PRETRAIN_HEADER",
    "TABLE_HEADER",
    "TARGET_CACHED_FIRST_STEP_S",
    "TARGET_PRETRAIN_RATIO",
    "TARGET_SPEEDUP",
    "efficiency",
    "fmt",
    "fmt_seconds",
    "markdown_table",
    "pretrain_rows",
    "print_rich",
    "render",
    "table_rows",
    "target_checks",
    "Finished",
    "run_measured",
    "run_worker",
    "Bench",
    "main",
]
