"""Whether a table's records come from different code. A configuration's code version covers the
numeric code every configuration shares and its own variants' modules (klue_tc/store/fingerprint.py),
so configurations of other encoders, tokenizers or objectives differ in it by design. Records are
mixed where one configuration's folds were made by different code versions, or where the shared part
(CodeVersion.shared, with the libraries) differs between records; records of older code, which kept
no shared part, are compared within their configuration only."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from klue_tc.report.labels import configuration_label
from klue_tc.report.replicates import RECORD_KEY


@dataclass(frozen=True)
class CodeMix:
    # configuration (its label and key) -> the code versions of its folds, where they are several
    within: dict[str, list[str]]
    shared: list[str]  # the shared code's versions among the records that keep it
    without_shared: int  # records of older code that keep no shared part
    records: int

    @property
    def mixed(self) -> bool:
        return bool(self.within) or len(self.shared) > 1

    def what(self) -> str:
        """What is mixed, in one line."""
        parts = [f"{name} has folds of code {' and '.join(codes)}" for name, codes in self.within.items()]
        if len(self.shared) > 1:
            parts.append(f"the code every configuration shares differs between records: {' and '.join(self.shared)}")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """report.md's lines: the warning where the records are mixed, and which records were compared
        within their configuration only."""
        lines = []
        if self.mixed:
            lines += [
                "**Warning: this table mixes records of different code** (kept by results.reuse=any, or "
                f"configurations not trained again since the code changed): {self.what()}.",
                "",
            ]
        if self.without_shared:
            lines += [
                f"{self.without_shared} of {self.records} records predate the shared code's fingerprint: "
                "their code is compared within their configuration only.",
                "",
            ]
        return lines


def code_mix(folds: pd.DataFrame) -> CodeMix:
    """How the fold rows' code versions mix, each configuration by its own results key."""
    key = RECORD_KEY if RECORD_KEY in folds else "config_hash"
    within = {}
    for configuration, rows in folds.groupby(key, sort=True):
        codes = sorted(set(rows["code"]))
        if len(codes) > 1:
            within[f"{configuration_label(rows.iloc[0].to_dict())} ({configuration})"] = codes
    shared = folds["shared_code"] if "shared_code" in folds else pd.Series("", index=folds.index)
    return CodeMix(within, sorted(set(shared[shared != ""])), int((shared == "").sum()), len(folds))
