"""Character n-grams of each vocabulary piece, hashed into buckets (fastText's subword idea,
Bojanowski et al. 2017, applied to the tokenizer's pieces).

A piece's embedding can then add the mean of its n-gram embeddings, so pieces that share
syllables share statistics: a rare piece such as `삼성전자` learns from `삼성`, `전자`, ...
which a plain embedding table, trained from scratch on 30k titles, cannot do.
"""
from __future__ import annotations

import zlib
from typing import Iterable, Sequence

import numpy as np

WORD_START = "▁"  # SentencePiece's word-boundary mark
NGRAMS_PER_PIECE = 32  # the index width; longer pieces keep their first 32 n-grams


def piece_ngrams(piece: str) -> list[str]:
    """Syllables and syllable bigrams; '<' marks a piece that starts a word."""
    starts_word = piece.startswith(WORD_START)
    chars = piece.lstrip(WORD_START)
    if not chars:
        return []
    marked = ("<" if starts_word else "") + chars
    return [*chars, *(marked[i:i + 2] for i in range(len(marked) - 1))]


def ngram_index(pieces: Sequence[str], skip: Iterable[int], buckets: int) -> np.ndarray:
    """(vocab, NGRAMS_PER_PIECE) bucket ids in 1..buckets, 0 where a piece has no more n-grams.
    Pieces in `skip` (the special tokens) get none."""
    skip = set(skip)
    index = np.zeros((len(pieces), NGRAMS_PER_PIECE), dtype=np.int64)
    for i, piece in enumerate(pieces):
        if i in skip:
            continue
        grams = piece_ngrams(piece)[:NGRAMS_PER_PIECE]
        index[i, :len(grams)] = [zlib.crc32(g.encode("utf-8")) % buckets + 1 for g in grams]
    return index
