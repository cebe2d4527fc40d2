"""SHA-256 checksums for the files a later run trusts (records, checkpoints, encoders, tokenizers).

A truncated file usually fails to load, but a changed byte (a bad disk, a copy gone wrong, a hand
edit) loads as other numbers: torch reads a checkpoint with a flipped byte without a word. So a
file kept across runs carries its checksum, in the JSON that names it or beside it, and reading it
checks the checksum first; a mismatch is a `DamagedFileError` naming the file. Files of older code
without a checksum are read as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from klue_tc.core.errors import DamagedFileError
from klue_tc.core.files import atomic_write_bytes, atomic_write_text

CHECKSUM_KEY = "sha256"  # a JSON file's own checksum, over the rest of it
SIDECAR_SUFFIX = ".sha256"  # a binary file's checksum, in a file beside it


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_of_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_digest(payload: dict) -> str:
    """Over the JSON as it reads back (keys sorted), so that writing and reading agree."""
    canonical = json.loads(json.dumps(payload, ensure_ascii=False))
    return sha256_of_bytes(json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode("utf-8"))


def with_checksum(payload: dict) -> dict:
    """The JSON object with its own checksum under CHECKSUM_KEY."""
    return {**payload, CHECKSUM_KEY: _json_digest(payload)}


def checked_json(path: Path) -> dict:
    """The JSON object in `path` without its checksum; a DamagedFileError where the checksum does
    not match (JSON that does not parse is json's ValueError, as before)."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(payload, dict):
        raise DamagedFileError(f"{path}: damaged (not a JSON object)")
    stored = payload.pop(CHECKSUM_KEY, None)
    if stored is not None and stored != _json_digest(payload):
        raise DamagedFileError(f"{path}: damaged (its content does not match its checksum)")
    return payload


def require_checksum(path: Path, expected: Optional[str], named_in: str) -> None:
    """`path` has the SHA-256 `expected` (kept by `named_in`); None: a file of older code, unchecked."""
    if expected is not None and sha256_of(path) != expected:
        raise DamagedFileError(f"{path}: damaged (its SHA-256 differs from the one {named_in} keeps)")


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def require_sidecar_checksum(path: Path) -> None:
    """`path` matches the checksum beside it, where one is (a crash between the two writes leaves none)."""
    beside = sidecar(path)
    if beside.is_file():
        require_checksum(path, beside.read_text(encoding="utf-8").strip(), beside.name)


def write_with_sidecar(path: Path, data: bytes, suffix: str = ".tmp") -> None:
    """`data` to `path` atomically, its checksum beside it. The old checksum goes first: a crash
    between the writes leaves a file without one (loaded unchecked, as before), never a mismatch."""
    sidecar(path).unlink(missing_ok=True)
    atomic_write_bytes(path, data, suffix=suffix)
    atomic_write_text(sidecar(path), sha256_of_bytes(data) + "\n")
