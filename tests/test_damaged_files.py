"""Damaged files a later run would trust: a record, checkpoint, pretrained encoder, cached tokenizer,
training state or predictions file cut short or with a changed byte is found (by its checksum where
it loads anyway) and either built again or refused in one line naming it; nothing damaged is read."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_headlines
from jobs import one_tiny_fold, run_in_process
from klue_tc.core.errors import DamagedFileError


def flip_a_byte(path: Path, at: float = 0.6) -> None:
    """One byte changed in place, as a bad disk or copy leaves it: the file still loads."""
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x55
    path.write_bytes(bytes(data))


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def change_a_score(path: Path) -> None:
    """Valid JSON with another number in it: an edit by hand, or a bad block of the disk."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["f1"] = 0.999
    path.write_text(json.dumps(payload), encoding="utf-8")


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- a fold's record and its checkpoint in the results store ---------------------------------------


def tiny_job(tmp_path: Path, data: Path) -> list[str]:
    return one_tiny_fold(data, tmp_path / "results", "logger=none")


@pytest.mark.integration
@pytest.mark.parametrize(
    "part, damage, named",
    [
        ("fold0.json", change_a_score, "fold0.json: damaged (its content does not match its checksum)"),
        ("fold0/best.ckpt", flip_a_byte, "best.ckpt: damaged (its SHA-256 differs from the one fold0.json keeps)"),
        pytest.param(
            "fold0/best.ckpt",
            cut_short,
            "best.ckpt: damaged (its SHA-256 differs from the one fold0.json keeps)",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_damaged_record_or_checkpoint_in_the_store_is_named_and_the_fold_trains_again(
    tmp_path, tiny_tsv, caplog, part, damage, named
):
    args = tiny_job(tmp_path, tiny_tsv)
    run_in_process(args, tmp_path / "first")
    record = next((tmp_path / "results").glob("*/fold0.json"))
    checkpoint = record.with_suffix("") / "best.ckpt"
    trained = json.loads(record.read_text(encoding="utf-8"))
    damage(record.parent / part)
    with caplog.at_level(logging.WARNING):
        run_in_process(args, tmp_path / "second")
    said = [m for m in warnings_of(caplog) if "appear more than once" not in m]  # the generated titles repeat
    assert len(said) == 1 and named in said[0] and said[0].endswith("; the fold trains again"), said
    again = json.loads(record.read_text(encoding="utf-8"))
    assert again["f1"] == trained["f1"] and again["checkpoint_sha256"] == trained["checkpoint_sha256"]
    from klue_tc.core.checksums import sha256_of

    assert sha256_of(checkpoint) == again["checkpoint_sha256"]  # whole again, and the record says so


@pytest.mark.integration
def test_predict_refuses_a_damaged_checkpoint_or_tokenizer_in_one_line(tmp_path, tiny_tsv, capsys):
    from klue_tc.predict import main

    run_dir = tmp_path / "run"
    run_in_process(tiny_job(tmp_path, tiny_tsv), run_dir)
    capsys.readouterr()
    for damaged, keeper in (
        (run_dir / "fold0" / "best.ckpt", "the fold's record"),
        (run_dir / "fold0" / "tokenizer" / "spiece.model", "tokenizer.json"),
    ):
        whole = damaged.read_bytes()
        flip_a_byte(damaged)
        assert main([str(run_dir), "손흥민 결승골"]) == 2
        assert (
            capsys.readouterr().err == f"error: {damaged}: damaged (its SHA-256 differs from the one {keeper} keeps)\n"
        )
        damaged.write_bytes(whole)
    assert main([str(run_dir), "손흥민 결승골"]) == 0


# --- what the caches and the pretrained-encoder store keep -----------------------------------------


def test_a_cached_tokenizer_with_a_changed_byte_is_fitted_again(tmp_path, caplog):
    from klue_tc.core.registry import TOKENIZERS
    from klue_tc.tokenizers import TokenizerCache

    cache = TokenizerCache(tmp_path / "cache")
    cfg = TOKENIZERS.config_for("sentencepiece", vocab_size=200)
    titles = [t for _, t in make_headlines(per_class=10)]
    first, key = cache.tokenizer(cfg, titles, "fold0")
    model = tmp_path / "cache" / "tokenizers" / key / "spiece.model"
    flip_a_byte(model, at=0.9)
    with caplog.at_level(logging.WARNING):
        again, _ = cache.tokenizer(cfg, titles, "fold0")
    assert warnings_of(caplog) == [
        f"cached tokenizer {model.parent} is damaged ({model}: damaged (its SHA-256 differs from the one "
        "tokenizer.json keeps)); fitting it again"
    ]
    assert again.encode(titles) == first.encode(titles)
    caplog.clear()
    cache.tokenizer(cfg, titles, "fold0")  # whole again: read without a word
    assert warnings_of(caplog) == []


@pytest.mark.integration
@pytest.mark.parametrize(
    "part, damage, named",
    [
        ("encoder.pt", flip_a_byte, "encoder.pt: damaged (its SHA-256 differs from the one pretrained.json keeps)"),
        pytest.param("encoder.pt", cut_short, "encoder.pt: damaged (its SHA-256 differs", marks=pytest.mark.slow),
        ("pretrained.json", change_a_score, "pretrained.json: damaged (its content does not match its checksum)"),
        pytest.param("pretrained.json", cut_short, "damaged (JSONDecodeError", marks=pytest.mark.slow),
        ("tokenizer/tokenizer.json", cut_short, "damaged (JSONDecodeError"),
    ],
)
def test_a_damaged_pretrained_encoder_is_named_once_and_pretrained_again(tmp_path, caplog, part, damage, named):
    from test_pretraining import CPU, tiny_pretraining

    from klue_tc.pretraining.pretrain import PretrainedStore, ensure_pretrained
    from klue_tc.tokenizers import TokenizerCache

    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=2")
    store, cache = PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "cache")
    first = ensure_pretrained(run, CPU, corpus, store, cache, None)
    weights = torch.load(first.weights, weights_only=True)
    damage(first.path / part)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = ensure_pretrained(run, CPU, corpus, store, cache, None)
    said = [m for m in warnings_of(caplog) if "plateau" not in m]  # two steps learn little: said too
    assert len(said) == 1 and named in said[0] and said[0].endswith("; pretraining it again"), said
    assert said[0].startswith(f"pretrained encoder {first.key}: ")
    assert again.key == first.key and store.load(first.key) is not None  # whole again
    for name, tensor in torch.load(again.weights, weights_only=True).items():
        assert torch.equal(tensor, weights[name]), name  # the same steps give the same weights


def test_a_training_state_with_a_changed_byte_is_not_resumed_from(tmp_path, caplog):
    from klue_tc.engine.checkpoints import AtomicCheckpointIO, resume_point

    state = tmp_path / "fold0.training"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 3, "state_dict": {"w": torch.randn(256, 256)}}, state / "last.ckpt")
    io.save_checkpoint({"state_dict": {"w": torch.randn(256, 256)}}, state / "best.ckpt")
    assert resume_point(0, state, resume=True) == state / "last.ckpt"
    flip_a_byte(state / "best.ckpt")  # loads, with other weights: the fold's best would be wrong
    with caplog.at_level(logging.WARNING):
        assert resume_point(0, state, resume=True) is None
    assert warnings_of(caplog) == [
        f"fold 0: {state / 'best.ckpt'}: damaged (its SHA-256 differs from the one best.ckpt.sha256 keeps); "
        "training the fold from the start"
    ]
    assert not state.exists()
    io.save_checkpoint({"epoch": 1}, state / "last.ckpt")
    flip_a_byte(state / "last.ckpt")
    with pytest.raises(DamagedFileError, match="last.ckpt: damaged"):  # nor by Lightning, whoever asks
        io.load_checkpoint(state / "last.ckpt")


def test_a_pretraining_state_with_a_changed_byte_starts_again(tmp_path, caplog):
    from klue_tc.engine.checkpoints import AtomicCheckpointIO
    from klue_tc.pretraining.pretrain import _resume_point

    path = tmp_path / "resume.pt"
    AtomicCheckpointIO().save_checkpoint({"step": 4, "loops": {}, "state_dict": {"w": torch.randn(64, 64)}}, path)
    assert _resume_point(path) == path
    flip_a_byte(path, at=0.5)
    with caplog.at_level(logging.WARNING):
        assert _resume_point(path) is None
    assert warnings_of(caplog) == [
        f"pretraining state: {path}: damaged (its SHA-256 differs from the one resume.pt.sha256 keeps); "
        "pretraining from the start"
    ]


def test_damaged_predictions_or_encoded_titles_are_named_and_never_read(tmp_path, caplog):
    """Zip archives (numpy's .npz) carry a CRC-32 of each array: a changed byte fails to read."""
    from klue_tc.store.records import FoldPredictions, TitlePredictions
    from klue_tc.tokenizers import EncodedTitles, TokenizerCache

    path = tmp_path / "fold0.predictions.npz"
    probs = np.random.default_rng(0).random((400, 7))
    FoldPredictions(TitlePredictions.of(np.arange(400), np.zeros(400), probs)).save(path, with_probs=False)
    flip_a_byte(path, at=0.3)
    with caplog.at_level(logging.WARNING):
        assert FoldPredictions.read(path) is None
    said = warnings_of(caplog)  # a bad CRC-32 (BadZipFile), or compressed data that no longer decompresses
    assert len(said) == 1 and said[0].startswith(f"damaged predictions {path} skipped ("), said

    caplog.clear()
    cache = TokenizerCache(tmp_path / "cache")
    from klue_tc.core.registry import TOKENIZERS

    titles = [t for _, t in make_headlines(per_class=10)]
    tokenizer, key = cache.tokenizer(TOKENIZERS.config_for("sentencepiece", vocab_size=200), titles, "fold0")
    encoded = cache.encoded(tokenizer, key, titles, "all")
    stored = next((tmp_path / "cache" / "encoded").glob("*.npz"))
    flip_a_byte(stored, at=0.5)
    with caplog.at_level(logging.WARNING):
        again = cache.encoded(tokenizer, key, titles, "all")
    assert np.array_equal(again.ids, encoded.ids) and isinstance(again, EncodedTitles)
    assert warnings_of(caplog) == [f"cached encoding {stored} is damaged (BadZipFile); encoding again"]


def test_a_damaged_report_cache_is_named_and_built_again(tmp_path, caplog):
    """The linear baselines' scores on the runs' folds are cached beside the report; one cut short
    (a report killed while writing it with older code, a full disk) is built again, not a traceback."""
    from conftest import write_tsv
    from klue_tc.core.config import CVConfig, DataConfig
    from klue_tc.training.baseline import score_on_folds

    data = DataConfig(path=str(write_tsv(tmp_path / "train.tsv", make_headlines(per_class=10))))
    cache = tmp_path / "baseline.json"
    rows = score_on_folds(data, CVConfig(folds=2, seed=42), 42, cache)
    cut_short(cache)
    with caplog.at_level(logging.WARNING):
        again = score_on_folds(data, CVConfig(folds=2, seed=42), 42, cache)
    assert again == rows and json.loads(cache.read_text(encoding="utf-8"))["folds"] == rows
    assert warnings_of(caplog) == [f"cache {cache} is damaged (JSONDecodeError); building it again"]


def test_a_damaged_config_in_the_results_store_is_named_and_left_out_of_the_report(tmp_path, caplog):
    from klue_tc.report.loading import configs_in_store

    for key, text in (("abc", "seed: 1\ncv:\n  folds: 2\n"), ("def", "seed: 1\ncv: {folds: [2")):
        (tmp_path / key).mkdir()
        (tmp_path / key / "config.yaml").write_text(text, encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        configs = configs_in_store(tmp_path)
    assert list(configs) == ["abc"] and configs["abc"].cv.folds == 2
    assert warnings_of(caplog) == [f"{tmp_path / 'def' / 'config.yaml'} skipped: damaged (ParserError)"]
