"""API keys and tokens from the environment kept out of every file a run writes.

A value reaches a config through `${oc.env:...}` or a shell-expanded override, and from there the
resolved config.yaml, the results store, W&B's config, Hydra's logged overrides and the logs. Each of
them is written through `redact`; a launcher setting (a SLURM script's setup line) that holds one is refused.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from klue_tc.core.errors import ConfigError, exit_with

# A variable, or a config key, whose name says it holds a credential (WANDB_API_KEY, HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, api_key, ...): TOKEN as a word, so TOKENIZERS_PARALLELISM is not one.
SECRET_NAME = re.compile(
    r"(^|_)(API_?KEY|TOKEN|SECRET|SECRET_ACCESS_KEY|PASSWORD|PASSWD|PASS|CREDENTIALS?|PRIVATE_KEY|AUTH_KEY)(_|$)",
    re.IGNORECASE,
)
SHORTEST_SECRET = 8  # shorter values ("true", "1") are not credentials, and would be found everywhere


def secret_values(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """{value: variable name} of the environment's credentials, longest value first."""
    environ = os.environ if environ is None else environ
    found = {
        value: name
        for name, value in environ.items()
        if SECRET_NAME.search(name) and len(value.strip()) >= SHORTEST_SECRET
    }
    return dict(sorted(found.items(), key=lambda item: -len(item[0])))


def redact_text(text: str, secrets: Optional[Mapping[str, str]] = None) -> str:
    secrets = secret_values() if secrets is None else secrets
    for value, name in secrets.items():
        if value in text:
            text = text.replace(value, f"<redacted ${name}>")
    return text


def redact(payload: Any, secrets: Optional[Mapping[str, str]] = None) -> Any:
    """`payload` (a config: dicts, lists, scalars) with every credential from the environment
    replaced by `<redacted $NAME>`, and the value of any key named like a credential by `<redacted>`."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(payload, dict):
        return {
            key: "<redacted>"
            if isinstance(key, str) and SECRET_NAME.search(key) and isinstance(value, str) and value
            else redact(value, secrets)
            for key, value in payload.items()
        }
    if isinstance(payload, (list, tuple)):
        return type(payload)(redact(value, secrets) for value in payload)
    if isinstance(payload, str):
        return redact_text(payload, secrets)
    return payload


def redact_files(paths: list[Path]) -> None:
    """Rewrite those of `paths` that hold a credential (Hydra's own record of the overrides)."""
    from klue_tc.core.files import atomic_write_text

    secrets = secret_values()
    if not secrets:
        return
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        clean = redact_text(text, secrets)
        if clean != text:
            atomic_write_text(path, clean)


class RedactingFilter(logging.Filter):
    """Log lines with the environment's credentials replaced, in every handler it is added to."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = secret_values()
        if secrets:
            message = record.getMessage()
            clean = redact_text(message, secrets)
            if clean != message:
                record.msg, record.args = clean, ()
        return True


def redact_logs() -> None:
    """Add the filter to the root logger's handlers (Hydra's job log file and console), once."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def refuse_secrets_in_launcher(launcher: Any, where: str = "hydra.launcher") -> None:
    """A launcher's settings (a SLURM script's setup lines, sbatch parameters) are written verbatim
    into scripts on a shared disk: one that holds a credential from the environment is refused."""
    secrets = secret_values()
    if isinstance(launcher, dict):
        for key, value in launcher.items():
            refuse_secrets_in_launcher(value, f"{where}.{key}")
    elif isinstance(launcher, (list, tuple)):
        for number, value in enumerate(launcher):
            refuse_secrets_in_launcher(value, f"{where}[{number}]")
    elif isinstance(launcher, str):
        for value, name in secrets.items():
            if value in launcher:
                raise ConfigError(
                    f"{where} holds the value of ${name}, and the job scripts it goes into are written to disk: "
                    "remove it (the jobs inherit the environment of the shell that starts the sweep)"
                )


class NoSecretsInScripts(Callback):
    """Checks the launcher's settings before a sweep submits a job script."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        launcher = config.hydra.get("launcher")
        if launcher is None:
            return
        try:
            refuse_secrets_in_launcher(OmegaConf.to_container(launcher, resolve=True))
        except ConfigError as err:  # Hydra turns a callback's exception into a warning and goes on
            exit_with(err)
