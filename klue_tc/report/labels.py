"""How the report names one configuration in a line of text: one function, so that a conflict, an
exclusion and a re-check name the same cell the same way."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Union

from klue_tc.store.records import NO_WIDE_PATH, Describe

# Between a head and the wide path beside it, as the report names the two ("cls + nbsvm").
WIDE_MARK = " + "


def shown_design(describe: Union[Describe, Mapping[str, object]]) -> dict:
    """A configuration's Describe as the report's frames, tables and labels read it: the head with
    the wide path beside it where that is on ("cls + nbsvm"), so that a configuration with it and
    one without are two cells, rows and labels; no `wide` of its own."""
    values = dataclasses.asdict(describe) if isinstance(describe, Describe) else dict(describe)
    wide = values.pop("wide", NO_WIDE_PATH)
    if isinstance(wide, str) and wide != NO_WIDE_PATH:
        values["head"] = f"{values.get('head')}{WIDE_MARK}{wide}"
    return values


def has_wide_path(head: object) -> bool:
    """Whether a head as shown_design names it has the wide path beside it."""
    return WIDE_MARK in str(head)


def configuration_label(describe: Union[Describe, Mapping[str, object]], *, exact: bool = False) -> str:
    """'tokenizer / encoder / ln / L<layers> / pretrain', with the head where the wide path is
    beside it ('... / cls + nbsvm / L3 / ...'). `exact` adds what tells apart two configurations
    that share those (the experiment where it is not the encoder's name, the head), for a label
    used as a key."""
    values = shown_design(describe)
    parts = [values.get("tokenizer"), values.get("encoder"), values.get("ln")]
    if exact:
        if values.get("experiment") not in (None, values.get("encoder")):
            parts.insert(0, values["experiment"])
    if exact or has_wide_path(values.get("head")):
        parts.append(values.get("head"))
    parts += [f"L{values.get('layers')}", values.get("pretrain")]
    return " / ".join(str(p) for p in parts if p is not None)
