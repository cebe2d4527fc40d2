"""A SentencePiece model trained on the fold's training titles only."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import sentencepiece as spm

from klue_tc.core.config import TokenizerConfig, at_least, one_of, share
from klue_tc.core.errors import ConfigError
from klue_tc.core.registry import TOKENIZERS
from klue_tc.tokenizers.base import SPECIALS, SpecialIds, Tokenizer, normalised


@dataclass
class SentencePieceConfig(TokenizerConfig):
    vocab_size: int = 6000
    model_type: str = "unigram"  # unigram | bpe | char | word
    character_coverage: float = 0.9995
    # > 0: subword regularization, a sampled segmentation of the training titles each epoch.
    sampling_alpha: float = 0.0

    def checks(self):
        return [
            *super().checks(),
            at_least("tokenizer.vocab_size", self.vocab_size, 1),
            (
                0.0 < self.character_coverage <= 1.0,
                f"tokenizer.character_coverage must be in (0, 1], got {self.character_coverage}",
            ),
            one_of("tokenizer.model_type", self.model_type, ("unigram", "bpe", "char", "word")),
            share("tokenizer.sampling_alpha", self.sampling_alpha, closed_top=True),
        ]


class SentencePieceModel(Tokenizer):
    """A SentencePiece model and its ids: trained here, or published (KoBERT)."""

    def __init__(self, model_proto: bytes, max_length: int):
        self.max_length, self.model_proto = max_length, model_proto
        self.processor = spm.SentencePieceProcessor(model_proto=model_proto)
        self.specials = SpecialIds(*(self.processor.piece_to_id(p) for p in SPECIALS))

    @classmethod
    def load(cls, directory: Path, meta: dict) -> SentencePieceModel:
        return cls((directory / meta["model"]).read_bytes(), meta["max_length"])

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    def _piece_ids(self, texts):
        return self.processor.encode(list(texts))

    def encode_sampled(self, texts, alpha, seed):
        spm.set_random_generator_seed(seed)
        # nbest_size=-1: sample from every segmentation of the lattice, smoothed by alpha.
        # One thread: SentencePiece seeds each worker thread alike, so with several the sample a
        # title gets depends on which thread takes it.
        return self._frame(
            self.processor.encode(normalised(texts), enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)
        )

    def _save_model(self, directory):
        (directory / "spiece.model").write_bytes(self.model_proto)
        return {"model": "spiece.model"}

    @classmethod
    def fit_settings(cls, cfg, train_fingerprint):
        settings = super().fit_settings(cfg, train_fingerprint)
        settings.pop("sampling_alpha")  # sampling happens at training time, not in the fitted model
        return settings


@TOKENIZERS.register("sentencepiece", SentencePieceConfig)
class SentencePieceTokenizer(SentencePieceModel):
    kind = "sentencepiece"

    @classmethod
    def fit(cls, cfg: SentencePieceConfig, train_texts: Sequence[str]) -> SentencePieceTokenizer:
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(train_texts),
                model_writer=model,
                vocab_size=cfg.vocab_size,
                model_type=cfg.model_type,
                character_coverage=cfg.character_coverage,
                # Small folds cannot fill a 6000-piece vocabulary; let SentencePiece shrink it.
                hard_vocab_limit=False,
                pad_id=0,
                pad_piece="[PAD]",
                unk_id=1,
                unk_piece="[UNK]",
                bos_id=-1,
                eos_id=-1,
                control_symbols="[CLS],[SEP],[MASK]",
                num_threads=1,
                minloglevel=2,
            )
        except RuntimeError as err:
            if "Vocabulary size is smaller than required_chars" in str(err):
                needed = str(err).split(" vs ")[-1].split(".")[0]
                raise ConfigError(
                    f"tokenizer.vocab_size={cfg.vocab_size} is below the {needed} characters these training titles "
                    f"need; raise tokenizer.vocab_size or lower tokenizer.character_coverage"
                ) from None
            raise
        return cls(model.getvalue(), cfg.max_length)
