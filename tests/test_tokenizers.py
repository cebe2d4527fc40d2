import numpy as np
import pytest

from conftest import SHARED_KOBERT, make_headlines
from klue_tc import tokenizers as tk
from klue_tc.core.errors import ResourceError
from klue_tc.core.registry import TOKENIZERS
from klue_tc.tokenizers import cache as tokenizer_cache

TRAIN = [t for _, t in make_headlines(per_class=10)]
UNSEEN = "뷁똠 퓽꿻"  # words and syllables that never occur in TRAIN


def config(kind: str = "sentencepiece", **kw):
    return TOKENIZERS.config_for(kind, **kw)


def fitted(kind: str, **kw) -> tk.Tokenizer:
    return tk.fit_tokenizer(config(kind, vocab_size=400, **kw), TRAIN)


@pytest.mark.parametrize("kind", ["sentencepiece", "mecab"])
def test_trained_tokenizers_frame_with_cls_sep_and_use_the_shared_specials(kind):
    tok = fitted(kind)
    assert tok.specials == tk.SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    ids = tok.encode(["손흥민 결승골 폭발"])[0]
    assert ids[0] == 2 and ids[-1] == 3 and len(ids) > 3
    assert tok.specials.unk not in ids  # seen words are in the vocabulary
    assert max(ids) < tok.vocab_size


@pytest.mark.parametrize("kind", ["sentencepiece", "mecab"])
def test_vocabulary_comes_from_training_titles_only(kind):
    tok = fitted(kind)
    ids = tok.encode([UNSEEN])[0][1:-1]
    word_boundary = {tok.processor.piece_to_id("▁")} if kind == "sentencepiece" else set()
    assert set(ids) - word_boundary == {1}  # every piece of an unseen title is [UNK]


def test_sentencepiece_round_trip_and_model_types():
    tok = fitted("sentencepiece")
    ids = tok.encode(["코스피 상승 마감"])[0]
    assert tok.processor.decode(ids[1:-1]) == "코스피 상승 마감"
    char = fitted("sentencepiece", model_type="char")
    pieces = [char.processor.id_to_piece(i) for i in char.encode(["코스피"])[0][1:-1]]
    assert pieces == ["▁", "코", "스", "피"]  # one piece per syllable


def test_mecab_splits_morphemes():
    assert tk.MecabTokenizer.morphemes(["유튜브 내달 2일까지 운영"])[0] == ["유튜브", "내달", "2", "일", "까지", "운영"]


@pytest.mark.parametrize("kind", ["sentencepiece", "mecab"])
def test_save_and_load_encode_identically(kind, tmp_path):
    tok = fitted(kind)
    again = tk.load_tokenizer(tok.save(tmp_path / "tok"))
    assert again.encode(TRAIN[:20]) == tok.encode(TRAIN[:20])
    assert again.vocab_size == tok.vocab_size and again.specials == tok.specials


def test_truncation_keeps_the_framing():
    tok = tk.fit_tokenizer(config(vocab_size=400, max_length=5), TRAIN)
    ids = tok.encode([" ".join(TRAIN[:5])])[0]
    assert len(ids) == 5 and ids[0] == 2 and ids[-1] == 3


def test_cache_fits_once_per_training_fold_and_reuses_encodings(tmp_path, monkeypatch):
    cache = tk.TokenizerCache(tmp_path)
    cfg = config(vocab_size=400)
    tok, key = cache.tokenizer(cfg, TRAIN, "fold0")
    encoded = cache.encoded(tok, key, TRAIN, "all")
    _, other_fold_key = cache.tokenizer(cfg, TRAIN[:40], "fold1")
    assert other_fold_key != key

    def must_not_fit(*args, **kwargs):
        raise AssertionError("a cached tokenizer was fitted again")

    monkeypatch.setattr(tokenizer_cache, "fit_tokenizer", must_not_fit)
    monkeypatch.setattr(tk.Tokenizer, "encode", must_not_fit)
    tok2, key2 = cache.tokenizer(cfg, TRAIN, "fold0")
    assert key2 == key
    again = cache.encoded(tok2, key2, TRAIN, "all")
    assert np.array_equal(again.ids, encoded.ids) and np.array_equal(again.offsets, encoded.offsets)


def test_encoded_titles_take_matches_python_slicing():
    seqs = [[2, 5, 3], [2, 3], [2, 7, 8, 9, 3], [2, 6, 3]]
    enc = tk.EncodedTitles.from_lists(seqs)
    taken = enc.take(np.array([2, 0]))
    assert taken.lengths.tolist() == [5, 3]
    assert taken.ids.tolist() == [2, 7, 8, 9, 3, 2, 5, 3]


def test_kobert_without_hub_or_path_says_what_to_pass():
    with pytest.raises(ResourceError, match="tokenizer.model_path="):
        tk.kobert_model_file(config("kobert"))


@pytest.mark.skipif(not SHARED_KOBERT.exists(), reason="../shared/models/kobert-base-v1/spiece.model is not present")
def test_kobert_ids_match_the_published_model():
    tok = tk.fit_tokenizer(config("kobert", model_path=str(SHARED_KOBERT)), [])
    assert tok.specials == tk.SpecialIds(pad=1, unk=0, cls=2, sep=3, mask=4)
    assert tok.vocab_size == 8002
    assert tok.encode(["한국어 모델을 공유합니다."])[0] == [2, 4958, 6855, 2046, 7088, 1050, 7843, 54, 3]


def test_too_small_sentencepiece_vocabulary_is_a_config_error():
    from klue_tc.core.errors import ConfigError

    with pytest.raises(ConfigError, match="raise tokenizer.vocab_size"):
        tk.fit_tokenizer(config(vocab_size=20), TRAIN)


def test_sampled_segmentations_vary_by_seed_and_keep_the_text():
    tok = fitted("sentencepiece")
    titles = TRAIN * 10  # enough for SentencePiece to spread a batch over threads
    first, again, other = (tok.encode_sampled(titles, 0.2, seed) for seed in (1, 1, 2))
    assert first == again  # seeded: reproducible
    assert first != other and first != tok.encode(titles)  # another segmentation of the same titles
    for ids, plain in zip(other, tok.encode(titles)):  # (decoded: NFKC-normalised like the plain pieces)
        assert ids[0] == tok.specials.cls and ids[-1] == tok.specials.sep
        assert tok.processor.decode(ids[1:-1]) == tok.processor.decode(plain[1:-1])


def test_sampling_leaves_the_tokenizer_cache_key_alone():
    plain, sampled = config(), config(sampling_alpha=0.2)
    assert tokenizer_cache.tokenizer_key(plain, "data") == tokenizer_cache.tokenizer_key(sampled, "data")


@pytest.mark.parametrize("kind", ["sentencepiece", "mecab"])
def test_a_headline_typed_on_macos_gets_the_same_ids(kind):
    """Decomposed Hangul jamo (NFD, as macOS gives it) and composed syllables are one title."""
    import unicodedata

    tok = fitted(kind)
    composed = TRAIN[:10] + ["女 배구 결승"]
    assert tok.encode([unicodedata.normalize("NFD", t) for t in composed]) == tok.encode(composed)
    assert tok.encode(["女 배구 결승"]) == tok.encode(["\uf981 배구 결승"])  # a KS X 1001 duplicate Hanja


def test_the_text_normalisation_is_part_of_the_tokenizer_cache_key(monkeypatch):
    key = tokenizer_cache.tokenizer_key(config(), "data")
    monkeypatch.setattr(tokenizer_cache, "TEXT_NORMALISATION", "NFKC")
    assert tokenizer_cache.tokenizer_key(config(), "data") != key
