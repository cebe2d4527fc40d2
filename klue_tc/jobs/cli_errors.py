"""One-line errors for bad overrides.

Hydra reports a bad override as several lines (search paths, a hint about HYDRA_FULL_ERROR) and
lists the internal `_schema` entries among the choices. Users of a sweep tool want one line that
names the override and the valid choices, so Hydra's reporter is wrapped here. Real bugs keep
their traceback, and HYDRA_FULL_ERROR=1 still shows Hydra's own report.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import sys

from hydra._internal import utils as hydra_utils
from hydra.errors import CompactHydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

from klue_tc.core.errors import USER_ERROR_EXIT, KlueTcError
from klue_tc.core.files import DISK_FULL_ERRNOS

# A folder that cannot be written: read-only, not the user's, under a file, or on a full disk.
UNWRITABLE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, *DISK_FULL_ERRNOS)


def one_line(err: BaseException) -> str | None:
    """The user-facing line for an input or override error, or None for anything else."""
    if isinstance(err, KlueTcError):
        return str(err)
    # Hydra makes the run (or sweep) folder and writes its files there before any klue_tc code runs.
    if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
        return (
            f"{err.filename or 'the run folder'}: no space left on the device; free some space (or raise the "
            "quota), or point the run folder (hydra.run.dir=, or hydra.sweep.dir= with -m) at another disk"
        )
    if isinstance(err, OSError) and err.errno in UNWRITABLE_ERRNOS and err.filename:
        return (
            f"{err.filename}: cannot be written ({err.strerror}); the run folder (hydra.run.dir=, or "
            "hydra.sweep.dir= with -m) and the stores (results.dir=, data.cache_dir=) must be folders you can write"
        )
    if isinstance(err, MissingConfigException) and err.options is not None:
        group = os.path.dirname(err.missing_cfg_file or "") or "config"
        choice = os.path.basename(err.missing_cfg_file or "")
        valid = [o for o in err.options if not o.startswith("_")]
        return f"unknown choice {group}={choice}{did_you_mean(choice, valid)}; valid choices: {', '.join(valid)}"
    if isinstance(err, CompactHydraException):
        text = f"{err}\n{err.__cause__ or ''}"
        override = re.search(r"Could not override '([^']+)'", text)
        if override and "No match in the defaults list" in text:
            key = override.group(1)
            given = next((a for a in sys.argv[1:] if a.startswith(f"{key}=")), f"{key}=...")
            return f"{given}: {key} is not in the defaults list, so it is added with a +: write +{given}"
        missing_key = re.search(r"Key '([^']+)' not in '([^']+)'", text)
        if override and missing_key:
            return unknown_key_line(override.group(1), missing_key.group(2))
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if "LexerNoViableAltException" in text or "mismatched input" in text:
            return quoting_line(text)
        cause = err.__cause__
        if isinstance(cause, OmegaConfBaseException):
            lines = lines[:1] + [str(cause).splitlines()[0]]
        return " ".join(ln for ln in lines if not ln.startswith("To append"))
    return None


def quoting_line(text: str) -> str:
    """Hydra's grammar error names a position, not the fix: the override it could not read, and
    the same override quoted as the grammar and the shell need it."""
    override = next((a for a in sys.argv[1:] if "=" in a and a in text), None)
    if override is None:
        first = text.splitlines()[0].split(" See https://")[0]
        return f"{first}: a value with symbols Hydra's override grammar reserves must be quoted: 'key=\"value\"'"
    key, _, value = override.partition("=")
    return (
        f"{override}: Hydra's override grammar cannot read this value; quote it, the whole override in "
        f"""single quotes for the shell: '{key}="{value}"'"""
    )


# A run of characters that holds a non-ASCII one and none that Hydra's grammar gives a meaning to.
_NON_ASCII_WORD = re.compile(r"""[^,\[\]{}()'"=:$\\]*[^\x00-\x7f][^,\[\]{}()'"=:$\\]*""")


def _quoted(word: str) -> str:
    """The word in double quotes, spaces around it left outside (Hydra trims them there)."""
    stripped = word.strip()
    start = word.index(stripped)
    return f'{word[:start]}"{stripped}"{word[start + len(stripped) :]}'


def quote_non_ascii_values(args: list[str]) -> list[str]:
    """`data.title_column=제목` as Hydra's grammar needs it, `data.title_column="제목"`: its unquoted
    values may hold ASCII letters and digits only, so Korean column names, labels and paths work as
    written. Values with quotes of their own are left as the user wrote them."""
    quoted = []
    for arg in args:
        key, equals, value = arg.partition("=")
        if arg.startswith("-") or not equals or "'" in value or '"' in value:
            quoted.append(arg)
            continue
        quoted.append(key + equals + _NON_ASCII_WORD.sub(lambda m: _quoted(m.group(0)), value))
    return quoted


def did_you_mean(word: str, choices, prefix: str = "") -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def unknown_key_line(key: str, schema_name: str) -> str:
    """`encoder.layerz` -> the nearest key of that section's schema; a key that only other variants
    of the group have says which."""
    from dataclasses import fields

    from klue_tc.core.config import RunConfig
    from klue_tc.core.registry import OBJECTIVES, VARIANT_GROUPS

    section, _, leaf = key.rpartition(".")
    groups = {**VARIANT_GROUPS, "pretrain": OBJECTIVES}
    schemas = [
        RunConfig,
        *(f.default_factory for f in fields(RunConfig) if callable(getattr(f, "default_factory", None))),
    ]
    schemas += [registry[name].config for registry in groups.values() for name in registry.names()]
    schema = next((s for s in schemas if s.__name__ == schema_name), None)
    own = {f.name for f in fields(schema)} if schema else set()
    group_name, _, group_key = key.partition(".")
    group = groups.get(group_name)
    if group is not None and group_key:
        setting = group_key.split(".")[0]  # pretrain.electra.generator_layers: the electra section
        others = [name for name in group.names() if setting in {f.name for f in fields(group[name].config)}]
        if others:
            return f"unknown config key {key}: only {group_name}={' or '.join(others)} has {setting}"
    return f"unknown config key {key}{did_you_mean(leaf, own, prefix=f'{section}.' if section else '')}"


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
