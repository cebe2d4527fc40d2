"""The self-pretraining corpus: unlabelled titles that are never scored.

By default a fold's corpus is every title of the training file (data.limit's unlabelled rest
included) and of the `pretrain.corpus` files, minus every title that is scored: the fold's held-out
titles and the validation file's, matched by normalised text. `pretrain.same_corpus_every_fold`
leaves out every labelled title of the job instead, so all folds share one corpus (and one
pretrained encoder); `pretrain.include_held_out_titles` keeps the held-out titles of the training
file (so all folds of all of train share one corpus) and still leaves out the validation file's;
`pretrain.include_scored_titles` is the named opt-in that lets every scored text in.
No torch here: the corpus is known, and keyed, before anything trains.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from klue_tc.core.config import RunConfig
from klue_tc.core.errors import ConfigError
from klue_tc.data.titles import LabelledTitles, read_unlabelled_file, training_titles


def normalised(text: str) -> str:
    """The form titles are matched in: NFKC, case-folded, runs of white space as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_fingerprint(texts: Iterable[str]) -> str:
    digest = hashlib.sha1()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class PretrainSources:
    """The text a job's corpora are cut from, read once per job."""

    file_titles: list[str]  # every title of the training file, before data.limit's subsample
    extra_titles: list[str]  # the pretrain.corpus files' titles
    validation_titles: list[str]  # the scored validation file's titles

    def fingerprint(self) -> str:
        """What the corpus reads besides the job's labelled titles (for the results key)."""
        parts = (self.file_titles, self.extra_titles, self.validation_titles)
        return text_fingerprint(f"{len(part)}:{text_fingerprint(part)}" for part in parts)


def gather_sources(run: RunConfig, labelled: LabelledTitles, validation: Optional[LabelledTitles]) -> PretrainSources:
    file_titles = labelled.texts if run.data.limit is None else training_titles(run.data).texts
    extra = [title for path in run.pretrain.corpus for title in read_unlabelled_file(path)]
    return PretrainSources(file_titles, extra, validation.texts if validation is not None else [])


@dataclass(frozen=True)
class Corpus:
    texts: list[str]
    fingerprint: str
    left_out: int  # titles of the sources kept out because they are scored (or labelled)
    include_scored_titles: bool
    include_held_out_titles: bool = False  # the held-out fold's text is in it (the validation file's never)


def fold_corpus(run: RunConfig, sources: PretrainSources, labelled: LabelledTitles, held_out: np.ndarray) -> Corpus:
    """The corpus of the fold whose scored titles are `held_out` (indices into `labelled`)."""
    cfg = run.pretrain
    candidates = sources.file_titles + sources.extra_titles
    if cfg.include_scored_titles:
        # Transductive, and said so in every record: the scored titles are unlabelled text too.
        texts = candidates + sources.validation_titles
        return Corpus(texts, text_fingerprint(texts), 0, True)
    kept_out = {normalised(t) for t in sources.validation_titles}
    if cfg.same_corpus_every_fold:
        kept_out |= {normalised(t) for t in labelled.texts}
    elif not cfg.include_held_out_titles:
        kept_out |= {normalised(labelled.texts[i]) for i in held_out}
    texts = [t for t in candidates if normalised(t) not in kept_out]
    if not texts:
        raise ConfigError(
            "the pretraining corpus is empty: every title is scored or labelled; add unlabelled text with "
            "pretrain.corpus=[file.txt] or set pretrain.same_corpus_every_fold=false"
        )
    return Corpus(texts, text_fingerprint(texts), len(candidates) - len(texts), False, cfg.include_held_out_titles)
