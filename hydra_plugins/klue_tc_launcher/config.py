from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore


@dataclass
class ParallelLauncherConf:
    _target_: str = "hydra_plugins.klue_tc_launcher.parallel_launcher.ParallelLauncher"
    n_jobs: int = 2  # workers on a machine without a GPU; -1: one per core
    # CUDA_VISIBLE_DEVICES entries, e.g. [0,2]; null: CUDA_VISIBLE_DEVICES if set, else nvidia-smi -L; []: CPU workers
    gpus: Optional[list[str]] = None
    jobs_per_gpu: int = 1  # workers (jobs at once) on each GPU


# conf/hydra/launcher/parallel.yaml builds on this node (a YAML of the same name would shadow it).
ConfigStore.instance().store(
    group="hydra/launcher", name="klue_tc_parallel", node=ParallelLauncherConf, provider="klue_tc"
)
