"""How the report names one configuration in a line of text: one function, so that a conflict, an
exclusion and a re-check name the same cell the same way."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Union

from klue_tc.store.records import Describe


def configuration_label(describe: Union[Describe, Mapping[str, object]], *, exact: bool = False) -> str:
    """'tokenizer / encoder / ln / L<layers> / pretrain'. `exact` adds what tells apart two
    configurations that share those (the experiment where it is not the encoder's name, the head),
    for a label used as a key."""
    values = dataclasses.asdict(describe) if isinstance(describe, Describe) else dict(describe)
    parts = [values.get("tokenizer"), values.get("encoder"), values.get("ln")]
    if exact:
        if values.get("experiment") not in (None, values.get("encoder")):
            parts.insert(0, values["experiment"])
        parts.append(values.get("head"))
    parts += [f"L{values.get('layers')}", values.get("pretrain")]
    return " / ".join(str(p) for p in parts if p is not None)
