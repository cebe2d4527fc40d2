"""`python -m klue_tc +experiment=trans_blstm`: one configuration, all folds (or a sweep with -m)."""
import sys

import hydra
from omegaconf import DictConfig

from klue_tc.config import register_schemas
from klue_tc.errors import KlueTcError

register_schemas()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from klue_tc.run import run_job

    try:
        return run_job(cfg)
    except KlueTcError as err:  # bad input or config: one line, no traceback
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
