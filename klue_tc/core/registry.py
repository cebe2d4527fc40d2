"""Variants found by name: encoder blocks, heads, tokenizers and pretraining objectives register here
with their typed config.

A variant module says `@ENCODERS.register("name", NameConfig)` above what it builds. One discovery
finds them the first time a registry is read: every module of the registry's package, then every
module named by an installed distribution's `klue_tc.variants` entry point (e.g. in its
pyproject.toml, `[project.entry-points."klue_tc.variants"] gated = "my_package.gated"`). So a new
variant is one new module (and, to run it as `+experiment=name`, one experiment YAML). The order is
fixed whatever imported what first: the built-ins in the study's order, then the others by name.
Nothing else lists variants: the config groups, the sweeps, the report's order and the tests read
them from here.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Optional

from klue_tc.core.errors import ConfigError

ENTRY_POINT_GROUP = "klue_tc.variants"


@dataclass(frozen=True)
class Variant:
    name: str
    config: type  # its dataclass: the variant's keys and their defaults
    build: Any  # what the variant makes (a class or a factory function)

    @property
    def source(self) -> Optional[Path]:
        """The file of the module that registered it."""
        file = getattr(sys.modules.get(self.build.__module__), "__file__", None)
        return Path(file).resolve() if file else None


class Registry:
    def __init__(self, group: str, package: str, built_ins: tuple[str, ...], check: Optional[str] = None):
        """`built_ins`: the package's own variants in the study's order (the report's rows and
        panels follow it); `check`: "module:function" called with each new Variant, which raises a
        ConfigError naming what the variant lacks."""
        self.group, self.package, self.built_ins, self.check = group, package, built_ins, check
        self._variants: dict[str, Variant] = {}
        self._loaded = False

    def register(self, name: str, config: type) -> Callable:
        def add(build):
            if name in self._variants and self._variants[name].build is not build:
                modules = f"{self._variants[name].build.__module__} and {build.__module__}"
                raise ConfigError(f"{self.group} {name!r} is registered twice, by {modules}")
            variant = Variant(name, config, build)
            if self.check:
                module, _, function = self.check.partition(":")
                getattr(importlib.import_module(module), function)(variant)
            self._variants[name] = variant
            return build

        return add

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(getattr(package, "__path__", [])):
            importlib.import_module(f"{self.package}.{module.name}")
        load_external_variants()

    def names(self) -> list[str]:
        """The built-ins in the study's order, then every other variant sorted by name."""
        self._load()
        added = sorted(name for name in self._variants if name not in self.built_ins)
        return [name for name in self.built_ins if name in self._variants] + added

    def variants(self) -> list[Variant]:
        return [self._variants[name] for name in self.names()]

    def __getitem__(self, name: str) -> Variant:
        self._load()
        if name not in self._variants:
            raise ConfigError(f"unknown {self.group} {name!r}; valid choices: {', '.join(self.names())}")
        return self._variants[name]

    def config_for(self, name: str, **values):
        """The variant's typed config; `values` for its keys, others ignored where it has none
        (tests and benchmarks give one set of sizes to every encoder)."""
        config = self[name].config
        known = {f.name for f in dataclasses.fields(config)}
        return config(name=name, **{k: v for k, v in values.items() if k in known})

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._variants


_external_loaded = False


def load_external_variants() -> None:
    """Import the modules of every `klue_tc.variants` entry point, sorted by entry-point name."""
    global _external_loaded
    if _external_loaded:
        return
    _external_loaded = True
    for entry in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        try:
            importlib.import_module(entry.module)
        except ImportError as err:
            where = f"variant module {entry.value} (entry point {entry.name!r})"
            raise ConfigError(f"{where} cannot be imported: {err}") from None


ENCODERS = Registry(
    "encoder",
    "klue_tc.models.encoders",
    built_ins=("transformer", "trans_blstm", "trans_blstm_parallel", "cnn"),
    check="klue_tc.models.encoder:check_encoder_variant",
)
HEADS = Registry("head", "klue_tc.models.heads", built_ins=("cls", "mean", "blstm"))
TOKENIZERS = Registry("tokenizer", "klue_tc.tokenizers", built_ins=("sentencepiece", "mecab", "kobert"))
VARIANT_GROUPS = {"tokenizer": TOKENIZERS, "encoder": ENCODERS, "head": HEADS}
# Pretraining objectives: chosen by pretrain.objective (or none), their dataclasses PretrainConfigs.
OBJECTIVES = Registry(
    "objective",
    "klue_tc.pretraining.objectives",
    built_ins=("mlm", "electra"),
    check="klue_tc.pretraining.objectives:check_objective_variant",
)
