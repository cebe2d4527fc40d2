"""Variants found by name: encoder blocks, heads and tokenizers register here with their typed config.

A variant module says `@ENCODERS.register("name", NameConfig)` above what it builds; every module of
the registry's package is imported the first time the registry is read, so a new variant is one new
module (and, to run it as `+experiment=name`, one experiment YAML). Nothing else lists variants:
the config groups, the sweeps' checks, the report's order and the tests read them from here.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from klue_tc.errors import ConfigError


@dataclass(frozen=True)
class Variant:
    name: str
    config: type  # its dataclass: the variant's keys and their defaults
    build: Any  # what the variant makes (a class or a factory function)


class Registry:
    def __init__(self, group: str, package: str):
        self.group, self.package = group, package
        self._variants: dict[str, Variant] = {}
        self._loaded = False

    def register(self, name: str, config: type) -> Callable:
        def add(build):
            if name in self._variants and self._variants[name].build is not build:
                raise ValueError(f"{self.group} {name!r} is registered twice")
            self._variants[name] = Variant(name, config, build)
            return build

        return add

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(getattr(package, "__path__", [])):
            importlib.import_module(f"{self.package}.{module.name}")

    def names(self) -> list[str]:
        """Registration order: the study's order for the built-in variants, then any added ones."""
        self._load()
        return list(self._variants)

    def __getitem__(self, name: str) -> Variant:
        self._load()
        if name not in self._variants:
            raise ConfigError(f"unknown {self.group} {name!r}; valid choices: {', '.join(self._variants)}")
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


ENCODERS = Registry("encoder", "klue_tc.models.encoders")
HEADS = Registry("head", "klue_tc.models.heads")
TOKENIZERS = Registry("tokenizer", "klue_tc.tokenizers")
VARIANT_GROUPS = {"tokenizer": TOKENIZERS, "encoder": ENCODERS, "head": HEADS}
