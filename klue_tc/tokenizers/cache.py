"""Tokenizers and encoded id arrays on disk, so each (data, tokenizer, fold) is fitted once."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import uuid
import zipfile
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from klue_tc.core.config import TokenizerConfig
from klue_tc.core.errors import DamagedFileError
from klue_tc.core.files import atomic_write, disk_full_error, is_disk_full, make_dirs, share_tree
from klue_tc.core.registry import TOKENIZERS
from klue_tc.tokenizers.base import META_FILE, EncodedTitles, Tokenizer, fit_tokenizer, load_tokenizer
from klue_tc.tokenizers.normalisation import TEXT_NORMALISATION

log = logging.getLogger(__name__)


def tokenizer_key(cfg: TokenizerConfig, train_fingerprint: str) -> str:
    """The fitted tokenizer's and its encodings' cache key: its settings, its training titles and
    the Unicode form titles are brought to before tokenising (a change of it changes every id)."""
    settings = TOKENIZERS[cfg.name].build.fit_settings(cfg, train_fingerprint)
    payload = {**settings, "name": cfg.name, "normalisation": TEXT_NORMALISATION}
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


class TokenizerCache:
    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser()

    def tokenizer(
        self, cfg: TokenizerConfig, train_texts: Sequence[str], train_fingerprint: str
    ) -> tuple[Tokenizer, str]:
        key = tokenizer_key(cfg, train_fingerprint)
        directory = self.root / "tokenizers" / key
        if (directory / META_FILE).is_file():
            try:
                return load_tokenizer(directory), key
            except Exception as err:  # cut short by a crash or a full disk, or not matching its checksum: fitted again
                why = str(err) if isinstance(err, DamagedFileError) else type(err).__name__
                log.warning("cached tokenizer %s is damaged (%s); fitting it again", directory, why)
                shutil.rmtree(directory, ignore_errors=True)
        tokenizer = fit_tokenizer(cfg, train_texts)
        _atomic_dir_write(directory, tokenizer.save)
        return tokenizer, key

    def encoded(self, tokenizer: Tokenizer, key: str, texts: Sequence[str], fingerprint: str) -> EncodedTitles:
        path = self.root / "encoded" / f"{key}-{fingerprint}.npz"
        if path.is_file():
            try:
                with np.load(path) as stored:
                    encoded = EncodedTitles(stored["ids"], stored["offsets"])
                if len(encoded) == len(texts):
                    return encoded
                raise ValueError(f"{len(encoded)} titles, expected {len(texts)}")
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
                log.warning("cached encoding %s is damaged (%s); encoding again", path, type(err).__name__)
        encoded = EncodedTitles.from_lists(tokenizer.encode(texts))
        atomic_write(path, lambda tmp: np.savez(tmp, ids=encoded.ids, offsets=encoded.offsets), suffix=".npz")
        return encoded


def _atomic_dir_write(directory: Path, writer) -> None:
    """Write into a temporary sibling then rename, so parallel jobs never see half a tokenizer; a
    failed write (a full disk: one DiskFullError line) leaves no half of it behind."""
    tmp = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}.tmp")
    try:
        make_dirs(directory.parent)
        writer(tmp)
        share_tree(tmp)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(err):
            raise disk_full_error(directory) from None
        raise
    try:
        tmp.rename(directory)
    except OSError:  # another job finished the same tokenizer first
        shutil.rmtree(tmp, ignore_errors=True)
