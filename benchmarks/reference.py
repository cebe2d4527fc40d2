"""seed_reference.py: where it is, how it is launched, its result line and its training split."""

from __future__ import annotations

import re
from typing import Optional

from benchmarks.constants import REPO_ROOT

DEFAULT_REFERENCE = (REPO_ROOT / ".." / "shared" / "bench" / "seed_reference.py").resolve()
# Runs seed_reference.py unchanged, except that its timer (time.perf_counter) reads the process CPU clock.
CPU_CLOCK_LAUNCHER = (
    "import runpy, sys, time; time.perf_counter = time.process_time; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
# seed_reference.py's --arch for the encoders it implements; the others have no reference.
REFERENCE_ARCH = {"transformer": "post_ln", "trans_blstm": "trans_blstm"}


def parse_reference_line(text: str) -> dict:
    """The `key=value ...` result line seed_reference.py prints (the last one in `text`)."""
    lines = [line for line in text.splitlines() if "samples_per_s=" in line]
    if not lines:
        raise ValueError("no result line (arch=... samples_per_s=... eval_macro_f1=...) in seed_reference's output")
    result = {}
    for key, value in re.findall(r"(\w+)=(\S+)", lines[-1]):
        try:
            number = float(value)
            result[key] = int(number) if re.fullmatch(r"-?\d+", value) else number
        except ValueError:
            result[key] = value
    return result


def reference_split(labels, limit: Optional[int], seed: int = 0):
    """seed_reference.py's split, by index: a stratified 10% held out, then `limit` training
    titles sampled from the rest (both with random_state=seed). Returns (train, held_out) in
    seed_reference's own order."""
    import pandas as pd

    from klue_tc.data.titles import stratified_holdout

    train, held_out = stratified_holdout(labels, 0.1, seed)
    if limit:
        if limit > len(train):
            raise ValueError(f"--limit {limit} is more than the {len(train)} titles left after the 10% hold-out")
        train = pd.Series(train).sample(limit, random_state=seed).to_numpy()
    return train, held_out
