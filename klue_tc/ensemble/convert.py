"""`python -m klue_tc.predict --convert FOLDER`: an older folder's pickled models rewritten once in the
safe format, the pickles removed. Older versions kept the linear baselines' fitted models as
fold<k>.joblib (an ensemble's folder, a sweep's baselines/<name>/); those are loaded here, once,
because the user asks for it, and written as arrays and JSON (klue_tc/training/linear_files.py),
their decision scores checked equal before a pickle is removed. A checkpoint holding more than
tensors and plain values is loaded once too and written again with those alone, the checksums
that name it updated. A pickle the folder does not name as one of its models is not loaded at all:
the conversion stops before it changes anything, naming the file to remove."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import io
import json
import pickle
import re
import types
from pathlib import Path
from typing import Any, Optional

import numpy as np

from klue_tc.core.errors import KlueTcError
from klue_tc.core.pickles import PICKLE_SUFFIXES, PickleRefused, pickles_in
from klue_tc.ensemble.artefact import MANIFEST, VERSION

TORCH_SUFFIXES = (".ckpt", ".pt", ".pth")
# A sweep's fitted baselines, as older versions kept them: <dir>/baselines/<name>/fold<k>.joblib.
STORE_MODEL = re.compile(r"fold\d+")
# How many of its vocabulary's terms, as titles, check an old model against its conversion.
PROBE_TERMS = 256


class ConvertError(KlueTcError):
    """The folder cannot be converted (and was left as it was)."""


def convert_folder(folder: Path) -> list[str]:
    """Convert `folder`'s pickled models; the lines saying what was done."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConvertError(f"{folder}: no such folder")
    manifests = []
    for path in sorted(folder.rglob(MANIFEST)):
        try:
            manifests.append((path, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError) as err:
            raise ConvertError(f"{path}: unreadable ({type(err).__name__}: {err}); nothing converted") from None
    named = {
        (path.parent / fold["model"]).resolve(): (path, fold)
        for path, manifest in manifests
        for member in manifest.get("members", [])
        if member.get("kind") == "linear"
        for fold in member.get("folds", [])
    }
    pickles = pickles_in(folder)
    unknown = [p for p in pickles if p.resolve() not in named and not is_store_model(p)]
    if unknown:
        raise ConvertError(
            f"{unknown[0]} is a pickle that is none of the folder's models: not loaded and nothing converted; "
            f"delete it or move it out of {folder}, then convert again"
        )
    checkpoints = [p for p in sorted(folder.rglob("*")) if p.suffix in TORCH_SUFFIXES and needs_conversion(p)]
    if not pickles and not checkpoints:
        return [f"{folder}: nothing to convert (no pickle in it)"]
    lines, renamed = [], set()
    for old in pickles:
        new = convert_linear_model(old)
        if old.resolve() in named:
            manifest_path, fold = named[old.resolve()]
            fold["model"] = (Path(fold["model"]).parent / new.name).as_posix()
            renamed.add(manifest_path)
        lines.append(f"converted {old} -> {new.name} and {new.name[: -len('.json')]}.npz")
    for manifest_path, manifest in manifests:
        if manifest_path in renamed:
            manifest["version"] = VERSION
            write_manifest(manifest_path, manifest)
    for old in pickles:
        old.unlink()
    for checkpoint in checkpoints:
        convert_checkpoint(checkpoint)
        lines.append(f"converted {checkpoint} to tensors and plain values")
    lines.append(
        f"{folder}: {len(pickles) + len(checkpoints)} file(s) converted to the safe format, the pickles removed"
    )
    return lines


def is_store_model(path: Path) -> bool:
    """A sweep's fitted baseline as older versions kept it (baselines/<name>/fold<k>.joblib)."""
    return path.parent.parent.name == "baselines" and STORE_MODEL.fullmatch(path.stem) is not None


def write_manifest(path: Path, manifest: dict) -> None:
    from klue_tc.core.files import atomic_write_text

    atomic_write_text(path, json.dumps(manifest, ensure_ascii=False, indent=2))


def convert_linear_model(old: Path) -> Path:
    """`old` (a pickled fitted pipeline) as <stem>.model.json and .model.npz beside it; its decision
    scores on probe titles checked equal. The new settings file."""
    import joblib

    from klue_tc.training.linear_files import (
        LinearModelError,
        load_linear_model,
        model_files,
        model_path,
        save_linear_model,
    )

    stem = old.name[: -len(old.suffix)] if old.suffix.lower() in PICKLE_SUFFIXES else old.stem
    new = model_path(old.parent, stem)
    try:
        pipeline = joblib.load(old)  # the user asked for it: this runs whatever the pickle holds
    except Exception as err:
        raise ConvertError(f"{old}: cannot be loaded ({type(err).__name__}: {err})") from None
    try:
        save_linear_model(pipeline, new)
        probe = probe_titles(pipeline)
        before = np.asarray(pipeline.decision_function(probe), dtype=np.float64)
        after = load_linear_model(new).decision_function(probe)
    except (LinearModelError, AttributeError, TypeError, ValueError) as err:
        for path in model_files(new):
            path.unlink(missing_ok=True)
        raise ConvertError(f"{old}: not a linear model klue_tc can write as arrays and JSON ({err})") from None
    if not np.allclose(before, after, rtol=1e-9, atol=1e-12):
        for path in model_files(new):
            path.unlink(missing_ok=True)
        raise ConvertError(f"{old}: its conversion scores titles differently: kept as it was")
    return new


def probe_titles(pipeline: Any) -> list[str]:
    """Titles that reach the model's features: its vocabulary's terms, alone and run together."""
    vectorizer = pipeline.steps[0][1]
    terms = sorted(vectorizer.vocabulary_, key=vectorizer.vocabulary_.get)
    picked = terms[:: max(1, len(terms) // PROBE_TERMS)][:PROBE_TERMS]
    return [*picked, " ".join(picked), "".join(picked[::-1])]


def needs_conversion(path: Path) -> bool:
    from klue_tc.engine.checkpoints import load_weights_only

    try:
        load_weights_only(path)
    except PickleRefused:
        return True
    except Exception:  # not a torch file, or a damaged one: nothing to convert here
        return False
    return False


def convert_checkpoint(path: Path) -> None:
    """The checkpoint written again with tensors and plain values alone (its objects as their
    fields or values), and its checksum updated where a record or a file beside it keeps it."""
    import torch

    from klue_tc.core.checksums import sha256_of, sha256_of_bytes, sidecar
    from klue_tc.core.files import atomic_write_bytes, atomic_write_text

    before = sha256_of(path)
    saved = torch.load(path, map_location="cpu", weights_only=False)  # asked for: runs what it holds
    buffer = io.BytesIO()
    torch.save(plain(saved, path), buffer)
    data = buffer.getvalue()
    try:  # read back as predict reads it, before anything is replaced
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ConvertError(f"{path}: not made plain enough to load as tensors ({err}): kept as it was") from None
    atomic_write_bytes(path, data)
    after = sha256_of_bytes(data)
    if sidecar(path).is_file():
        atomic_write_text(sidecar(path), after + "\n")
    # The records that name it: the run's metrics.json, a results store's fold<k>.json.
    for record in (path.parent.parent / "metrics.json", path.parent.parent / f"{path.parent.name}.json"):
        if record.is_file() and before in record.read_text(encoding="utf-8"):
            replace_checksum(record, before, after)


def plain(value: Any, path: Path) -> Any:
    """`value` as tensors and the plain values torch's weights_only loading reads."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, enum.Enum):  # before str and int: an enum may be either too
        return plain(value.value, path)
    for base in (bool, int, float, str, bytes):  # a subclass of one as the plain value
        if isinstance(value, base):
            return base(value)
    if isinstance(value, (type(None), torch.dtype, torch.device, torch.Size)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), path) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {plain(k, path): plain(v, path) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        items = [plain(v, path) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (argparse.Namespace, types.SimpleNamespace)):
        return {k: plain(v, path) for k, v in vars(value).items()}
    raise ConvertError(f"{path}: holds a {type(value).__name__}, which has no plain form: not converted")


def replace_checksum(record: Path, before: str, after: str) -> None:
    from klue_tc.core.checksums import CHECKSUM_KEY, with_checksum
    from klue_tc.core.files import atomic_write_json

    payload = json.loads(record.read_text(encoding="utf-8"))
    own: Optional[str] = payload.pop(CHECKSUM_KEY, None) if isinstance(payload, dict) else None

    def swap(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return after if value == before else value

    payload = swap(payload)
    atomic_write_json(record, with_checksum(payload) if own is not None else payload)
