"""One-line errors for bad overrides.

Hydra reports a bad override as several lines (search paths, a hint about HYDRA_FULL_ERROR) and
lists the internal `_schema` entries among the choices. Users of a sweep tool want one line that
names the override and the valid choices, so Hydra's reporter is wrapped here. Real bugs keep
their traceback, and HYDRA_FULL_ERROR=1 still shows Hydra's own report.
"""
from __future__ import annotations

import os
import sys

from hydra._internal import utils as hydra_utils
from hydra.errors import CompactHydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

from klue_tc.errors import USER_ERROR_EXIT, KlueTcError


def one_line(err: BaseException) -> str | None:
    """The user-facing line for an input or override error, or None for anything else."""
    if isinstance(err, KlueTcError):
        return str(err)
    if isinstance(err, MissingConfigException) and err.options is not None:
        group = os.path.dirname(err.missing_cfg_file or "") or "config"
        choice = os.path.basename(err.missing_cfg_file or "")
        valid = ", ".join(o for o in err.options if not o.startswith("_"))
        return f"unknown choice {group}={choice}; valid choices: {valid}"
    if isinstance(err, CompactHydraException):
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        cause = err.__cause__
        if isinstance(cause, OmegaConfBaseException):
            lines = lines[:1] + [str(cause).splitlines()[0]]
        return " ".join(ln for ln in lines if not ln.startswith("To append"))
    return None


def install() -> None:
    original = hydra_utils.run_and_report

    def run_and_report(func):
        try:
            return func()
        except Exception as err:
            line = None if os.environ.get("HYDRA_FULL_ERROR") == "1" else one_line(err)
            if line is None:  # not a user error: Hydra's own report, with the traceback
                def reraise(error: Exception = err):
                    raise error

                return original(reraise)
            print(f"error: {line}", file=sys.stderr, flush=True)
            sys.exit(USER_ERROR_EXIT)

    hydra_utils.run_and_report = run_and_report
