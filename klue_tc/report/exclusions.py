"""Configurations left out of the report's comparisons: only by rules the runs' configs declare.

A sweep file declares them under `report.exclude` (klue_tc/core/config.py ExclusionConfig: named rules with
their parameters, none by default); every job writes its resolved config, the declaration with it,
into its run directory and (once per configuration, when its first fold is stored) into the results
store, and the report reads them there. No declaration: nothing is left out. Declarations that
disagree between the runs: none is applied, and the report says so. Wherever an exclusion changes a
verdict, the report shows it both ways (klue_tc/report/write.py).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pandas as pd
import yaml
from omegaconf import OmegaConf

from klue_tc.core.config import ExclusionConfig, ReportConfig
from klue_tc.report.labels import configuration_label

log = logging.getLogger(__name__)


def chance_f1(folds: pd.DataFrame) -> float:
    """The macro-F1 a classifier ignoring its input reaches at most (about 1/K for K classes)."""
    return 1 / int(folds["classes"].max())


def near_chance(folds: pd.DataFrame, z: float, metric: str = "f1") -> pd.Series:
    """Per config_hash: is its fold mean within `z` standard errors of chance (the larger of its
    folds' spread and the sampling noise of F1 on the titles it was scored on)?"""
    chance = chance_f1(folds)
    scored = folds.dropna(subset=[metric])
    by_config = scored.groupby("config_hash").agg(
        mean=(metric, "mean"), std=(metric, "std"), n=(metric, "size"), titles=("val_size", "sum")
    )
    sampling = (chance * (1 - chance) / by_config["titles"].clip(lower=1)) ** 0.5
    spread = (by_config["std"] / by_config["n"] ** 0.5).fillna(0.0)
    return ~(by_config["mean"] - z * pd.concat([sampling, spread], axis=1).max(axis=1) > chance)


def stalled_inner_loss(folds: pd.DataFrame, share: float) -> pd.Series:
    """Per config_hash: is the median over its folds of their lowest inner-split loss at or above
    `share` x ln K? Records without learning curves are never named."""
    loss = folds.groupby("config_hash")["best_inner_loss"].median() if "best_inner_loss" in folds else None
    if loss is None:
        return pd.Series(False, index=folds["config_hash"].unique())
    return loss >= share * math.log(folds["classes"].max())  # NaN (no curve) compares False


RULES: dict[str, Callable[[pd.DataFrame, float], pd.Series]] = {
    "near_chance": near_chance,
    "stalled_inner_loss": stalled_inner_loss,
}
WORDS = {
    "near_chance": lambda z: f"near_chance (CV macro-F1 within {z:g} standard errors of 1/K)",
    "stalled_inner_loss": lambda share: f"stalled_inner_loss (lowest inner-split loss at or above {share:g} ln K)",
}


@dataclass(frozen=True)
class Declared:
    """The exclusion rules the runs declared, and where the report found them."""

    rules: ExclusionConfig = field(default_factory=ExclusionConfig)
    conflict: Optional[str] = None  # the runs declare different rules: none applied

    def text(self) -> str:
        return "; ".join(WORDS[name](rule) for name, rule in self.rules.rules.items())


def read_declaration(path: Path) -> Optional[ExclusionConfig]:
    """A config.yaml's report.exclude, typed (the default, none, where it has no report section; None
    where the file is not a run's config)."""
    from klue_tc.report.loading import run_config

    if (config := run_config(path)) is None:
        return None
    report = config.get("report") or {}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ReportConfig), report)).exclude
    except Exception as err:  # a declaration this code cannot read excludes nothing, in one line
        log.warning("%s: report.exclude unreadable (%s): not applied", path, str(err).splitlines()[0])
        return None


def declared_exclusions(directory: Path) -> Declared:
    """The rules every run below `directory` declared (their config.yaml files agree), else none."""
    found: dict[str, tuple[ExclusionConfig, Path]] = {}
    for path in sorted(Path(directory).rglob("config.yaml")):
        rules = read_declaration(path)
        if rules is not None:
            found.setdefault(yaml.safe_dump(asdict(rules), sort_keys=True), (rules, path))
    if len(found) > 1:
        (a, first), (b, second) = list(found.values())[:2]
        conflict = (
            f"the runs declare different exclusion rules ({first}: {Declared(a).text() or 'none'}; {second}: "
            f"{Declared(b).text() or 'none'}): none applied"
        )
        log.warning(conflict)
        return Declared(conflict=conflict)
    return Declared(next(iter(found.values()))[0]) if found else Declared()


@dataclass(frozen=True)
class Exclusion:
    """The declared rules applied to the records: the folds the comparisons read and who is left out."""

    folds: pd.DataFrame  # every fold but those of the left-out configurations
    left_out: list[str] = field(default_factory=list)  # each as 'label (CV macro-F1): the rules naming it'
    kept_in: tuple[str, ...] = ()  # factors whose comparisons keep them
    rules: str = ""  # the declared rules in words
    note: Optional[str] = None  # why declared rules left nothing out, where they could not apply

    def keeps(self, factor: str) -> bool:
        """Whether the comparisons of `factor` read every configuration (nothing left out, or kept_in)."""
        return not self.left_out or factor in self.kept_in

    def line(self) -> Optional[str]:
        if self.note:
            return self.note
        if not self.left_out:
            return None
        kept = f" but {', '.join(self.kept_in)}'s" if self.kept_in else ""
        return (
            f"{len(self.left_out)} configuration(s) left out of every comparison{kept} by the exclusion rules the "
            f"runs' configs declare (report.exclude: {self.rules}): {', '.join(self.left_out)}; every verdict this "
            "changes is shown both ways"
        )


def none_excluded(folds: pd.DataFrame) -> Exclusion:
    return Exclusion(folds)


def apply_exclusions(folds: pd.DataFrame, declared: Declared) -> Exclusion:
    """The folds the comparisons read under the declared rules; where the rules would leave out every
    configuration, none is left out (the questions then say that nothing learnt)."""
    if declared.conflict:
        return Exclusion(folds, note=declared.conflict)
    named: dict[str, list[str]] = {}
    for name, rule in declared.rules.rules.items():
        for config in RULES[name](folds, rule).pipe(lambda s: s[s]).index:
            named.setdefault(config, []).append(name)
    if not named:
        return Exclusion(folds)
    if set(named) >= set(folds["config_hash"]):
        return Exclusion(
            folds, note=f"the declared exclusion rules ({declared.text()}) name every configuration: none left out"
        )
    rows = folds[folds["config_hash"].isin(list(named))].groupby("config_hash", sort=False)
    labels = [
        f"{configuration_label(part.iloc[0].to_dict())} ({part['f1'].mean():.3f}): {', '.join(named[key])}"
        for key, part in rows
    ]
    return Exclusion(
        folds[~folds["config_hash"].isin(list(named))],
        sorted(labels),
        tuple(declared.rules.kept_in),
        declared.text(),
    )
