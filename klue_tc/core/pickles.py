"""Folders a user hands klue_tc (a run directory, an ensemble's folder, a sweep's fitted baselines)
are read without running code from them. A pickle runs whatever code it names as it loads: a
.pkl, .pickle or .joblib file, or a torch file holding more than tensors and plain values. So a
folder holding one is refused, in one line naming the file and the command that converts the
folder once (that command loads its pickles, knowingly: only for a folder you trust)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from klue_tc.core.errors import ResourceError

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
CONVERT_COMMAND = "python -m klue_tc.predict --convert"


class PickleRefused(ResourceError):
    """A file that could run code as it loads: not loaded."""


def convert_command(folder: Path) -> str:
    return f"{CONVERT_COMMAND} {folder}"


def refusal(path: Path, folder: Optional[Path] = None, what: str = "a pickle") -> PickleRefused:
    """The one line for `path`, naming the command that converts `folder` (the folder the user
    named, where it holds the file; else the file's own folder)."""
    path = Path(path)
    if folder is None or not path.resolve().is_relative_to(Path(folder).resolve()):
        folder = path.parent
    return PickleRefused(
        f"{path} is {what}, which could run code as it loads: not loaded; "
        f"if you trust the folder, convert it once to the safe format: {convert_command(folder)}"
    )


def pickles_in(folder: Path) -> list[Path]:
    """The pickle files under `folder`, by name, in order (none where it is not a folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in PICKLE_SUFFIXES and p.is_file())


def refuse_pickles(folder: Path, command_folder: Optional[Path] = None) -> None:
    """A PickleRefused naming the first pickle under `folder`, if it holds one; `command_folder`: the
    folder the conversion command names (default `folder`)."""
    found = pickles_in(folder)
    if found:
        raise refusal(found[0], command_folder or folder)
