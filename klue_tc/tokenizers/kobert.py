"""KoBERT's published SentencePiece model (skt/kobert-base-v1), with KoBERT's own ids."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from klue_tc.core.config import TokenizerConfig, outside_results_key, share
from klue_tc.core.errors import ResourceError
from klue_tc.core.registry import TOKENIZERS
from klue_tc.tokenizers.sentencepiece import SentencePieceModel


@dataclass
class KoBERTConfig(TokenizerConfig):
    # null: skt/kobert-base-v1's spiece.model from the Hugging Face hub (cached). Also read from
    # $KLUE_TC_KOBERT_MODEL, so a sweep over tokenizers can name it once for the kobert jobs. The
    # results key holds the model file's content, not where it is.
    model_path: Optional[str] = outside_results_key("${oc.env:KLUE_TC_KOBERT_MODEL,null}")
    hub_repo: str = outside_results_key("skt/kobert-base-v1")
    sampling_alpha: float = 0.0  # > 0: subword regularization, as for sentencepiece

    def checks(self):
        return [*super().checks(), share("tokenizer.sampling_alpha", self.sampling_alpha, closed_top=True)]


def kobert_model_file(cfg: KoBERTConfig) -> Path:
    """`tokenizer.model_path` when given, else KoBERT's spiece.model from the hub (cached)."""
    return _kobert_model_file(cfg.model_path, cfg.hub_repo)


@functools.cache  # asked for at start-up, then per fold for the key and the fit
def _kobert_model_file(model_path: Optional[str], hub_repo: str) -> Path:
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
            f"({type(err).__name__}); pass tokenizer.model_path=/path/to/spiece.model or set KLUE_TC_KOBERT_MODEL"
        ) from None


@functools.cache
def _file_sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


@TOKENIZERS.register("kobert", KoBERTConfig)
class KoBERTTokenizer(SentencePieceModel):
    kind = "kobert"

    @classmethod
    def fit(cls, cfg: KoBERTConfig, train_texts: Sequence[str]) -> KoBERTTokenizer:
        return cls(kobert_model_file(cfg).read_bytes(), cfg.max_length)

    @classmethod
    def fit_settings(cls, cfg, train_fingerprint):
        # The published model does not depend on the fold's titles.
        return {"kobert": cls.content_identity(cfg), "max_length": cfg.max_length}

    @classmethod
    def content_identity(cls, cfg: KoBERTConfig) -> str:
        return _file_sha1(kobert_model_file(cfg))
