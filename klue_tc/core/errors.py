"""User-facing errors: each is reported as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

USER_ERROR_EXIT = 2  # a bad input or override; a bug keeps Python's 1 and its traceback


class KlueTcError(Exception):
    """Base of errors caused by input or configuration, not by a bug."""


class DataError(KlueTcError):
    """A data file (or the hub) cannot give valid labelled titles."""


class ConfigError(KlueTcError):
    """An override or config value is invalid."""


class ResourceError(KlueTcError):
    """A model or dataset is neither available locally nor downloadable."""


class DamagedFileError(ResourceError):
    """A stored file (a record, checkpoint, encoder or tokenizer) is cut short or does not match its checksum."""


class DiskFullError(ResourceError):
    """A write found no space (or no quota) left; the file it wrote is as it was before."""


def exit_with(err: KlueTcError) -> NoReturn:
    """End the process on a user error: its one line on stderr, exit status USER_ERROR_EXIT."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    raise SystemExit(USER_ERROR_EXIT)
