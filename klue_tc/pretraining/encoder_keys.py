"""The key a pretrained encoder is stored and found under: everything that changes its weights, and
the code that makes them, under this code's version and every earlier one that makes the same numbers.
Kept apart from the pretraining steps, so that how encoders are found can change without the
pretraining code's version, and every stored encoder's key, moving."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Optional, Protocol

from klue_tc.core.config import RunConfig, keyed_settings
from klue_tc.core.hardware import Device
from klue_tc.data.corpus import Corpus
from klue_tc.store.fingerprint import SAME_NUMBERS_AS, Choices, version_of
from klue_tc.store.records import CodeVersion
from klue_tc.tokenizers.cache import tokenizer_key


class EncoderStore(Protocol):
    """Where pretrained encoders are kept (klue_tc.pretraining.pretrain.PretrainedStore)."""

    def find(self, key: str) -> Optional[object]: ...


# How the corpus was chosen is not keyed: the corpus's fingerprint is, so folds whose corpora hold
# the same titles share one encoder whichever setting chose them.
CORPUS_CHOICES = ("same_corpus_every_fold", "include_scored_titles", "include_held_out_titles")


def pretrained_keys(run: RunConfig, device: Device, corpus: Corpus, tokenizer_identity: Optional[str]) -> list[str]:
    """The encoder's key under this code, then under each earlier code version that makes the same
    numbers (SAME_NUMBERS_AS): an encoder such code stored is this code's encoder. Everything that
    changes the pretrained weights is in it; where the corpus came from is not."""
    settings = keyed_settings(run.pretrain)
    for how_the_corpus_was_chosen in CORPUS_CHOICES:
        settings.pop(how_the_corpus_was_chosen, None)
    payload = {
        "pretrain": settings,
        "encoder": keyed_settings(run.encoder),
        "tokenizer": tokenizer_key(run.tokenizer, corpus.fingerprint),
        "tokenizer_model": tokenizer_identity,
        "corpus": corpus.fingerprint,
        "pad_multiple": run.data.pad_multiple,
        "seed": run.seed,
        "precision": device.precision,
    }
    # The code of the configuration less its wide path, which trains after the pretraining: an
    # encoder is the same encoder with the wide path on or off.
    code = version_of(replace(Choices.of(run), wide=None))
    versions = [code, *(CodeVersion(earlier, code.versions) for earlier in SAME_NUMBERS_AS.get(code.fingerprint, ()))]
    # The code as the key has always read it: the shared part is inside the fingerprint already.
    keyed = [{"fingerprint": version.fingerprint, "versions": version.versions} for version in versions]
    return [
        hashlib.sha1(json.dumps({**payload, "code": made_by}, sort_keys=True).encode()).hexdigest()[:12]
        for made_by in keyed
    ]


def pretrained_key(run: RunConfig, device: Device, corpus: Corpus, tokenizer_identity: Optional[str]) -> str:
    """This code's key for the encoder."""
    return pretrained_keys(run, device, corpus, tokenizer_identity)[0]


def stored_key(store: EncoderStore, keys: list[str]) -> str:
    """The key to pretrain under or find: an earlier code version's (keys[1:]) where the store holds
    its encoder, else this code's (keys[0])."""
    return next((key for key in keys[1:] if store.find(key) is not None), keys[0])
