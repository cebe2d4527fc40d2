"""Self-pretraining: its config keeps old results keys, the masked-LM and ELECTRA objectives, the
corpus that never holds a scored title, the store that trains a key once and resumes it, and
fine-tuning from it."""

import io
import json
import logging
import math
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SHARED_KOBERT, TINY_MODEL, make_headlines, write_tsv
from jobs import compose_job, run_cli, run_in_process
from klue_tc.core import registry
from klue_tc.core.config import job_config, keyed_settings, validate
from klue_tc.core.errors import ConfigError, DataError
from klue_tc.core.hardware import Device
from klue_tc.data.corpus import Corpus, PretrainSources, fold_corpus, gather_sources, normalised, text_fingerprint
from klue_tc.data.titles import LabelledTitles, read_unlabelled_file
from klue_tc.pretraining import encoder_keys
from klue_tc.pretraining import pretrain as pretraining
from klue_tc.pretraining.encoder_keys import pretrained_key, pretrained_keys
from klue_tc.pretraining.frequency_plateau import plateau_warning, token_entropy
from klue_tc.pretraining.masking import corrupt_picked, never_hidden, pick_tokens, pick_whole_words
from klue_tc.pretraining.objectives import word_start_table
from klue_tc.pretraining.objectives.electra import Electra
from klue_tc.pretraining.objectives.mlm import MaskedLanguageModel, MaskedLM
from klue_tc.pretraining.pretrain import (
    HEAD_ROW_BUCKET,
    MaskedBatch,
    PretrainedStore,
    ensure_pretrained,
    load_pretrained_encoder,
    pretrain_encoder,
)
from klue_tc.pretraining.replaced_token_detection import (
    ReplacedTokenDetection,
    generator_config,
    replaced_token_labels,
    sample_tokens,
)
from klue_tc.store.results import config_hash
from klue_tc.tokenizers import EncodedTitles, SpecialIds, TokenizerCache, fit_tokenizer
from klue_tc.training.module import TopicClassifierModule

SPECIALS = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
# The tests train on the CPU, in fp32 (TINY_MODEL asks for the CPU).
CPU = Device(gpu=False, precision="32-true", name="cpu")
ENCODERS = list(registry.ENCODERS.built_ins)  # each has an experiment of its name


def run_config(tmp_path, *overrides):
    tiny = TINY_MODEL
    if any(o.startswith("tokenizer=") and o != "tokenizer=sentencepiece" for o in overrides):
        tiny = [o for o in TINY_MODEL if not o.startswith("tokenizer.vocab_size")]  # a fitted vocabulary's key
    return validate(compose_job([*tiny, "logger=none", *overrides], tmp_path / "run"))


def fold_corpus_from(texts):
    return Corpus(list(texts), text_fingerprint(texts), 0, False)


@pytest.mark.parametrize("experiment", ["cnn", "trans_blstm", "transformer"])
def test_pretrain_none_keeps_the_results_key_and_mlm_changes_it(tmp_path, experiment):
    """With pretrain=none its section is left out of the key (records from before it existed still
    count): none of its settings moves the key, and choosing an objective does."""
    job = [f"+experiment={experiment}", "data.limit=300"]
    default = validate(compose_job(job, tmp_path / "a"))
    assert default.pretrain.objective == "none"
    unused = validate(compose_job([*job, "pretrain.epochs=99", "pretrain.mask_p=0.3"], tmp_path / "b"))
    assert config_hash(unused, "data", "32-true") == config_hash(default, "data", "32-true")
    mlm = validate(compose_job([*job, "pretrain=mlm"], tmp_path / "c"))
    assert config_hash(mlm, "data", "32-true") != config_hash(default, "data", "32-true")


@pytest.mark.parametrize(
    "experiment, key", [("transformer", "5954c1bfd4af"), ("trans_blstm", "bce0c8695d41"), ("cnn", "025463d507a6")]
)
def test_electra_settings_leave_the_keys_of_mlm_jobs_as_they_were(tmp_path, experiment, key):
    """The keys of pretrain=mlm jobs made before pretrain=electra existed (as the committed study's
    records have them); electra's own settings are in electra's key only, and each moves it."""
    job = [f"+experiment={experiment}", "data.limit=10000", "cv.folds=3"]
    mlm = validate(compose_job([*job, "pretrain=mlm"], tmp_path / "a"))
    assert config_hash(mlm, "data", "32-true", None, "corpus") == key
    assert "electra" not in keyed_settings(mlm.pretrain)
    electra = validate(compose_job([*job, "pretrain=electra"], tmp_path / "b"))
    assert config_hash(electra, "data", "32-true", None, "corpus") != key
    hashes = {config_hash(electra, "data", "32-true", None, "corpus")}
    for setting in ("generator_layers=2", "generator_size=0.5", "discriminator_weight=20"):
        other = validate(compose_job([*job, "pretrain=electra", f"pretrain.electra.{setting}"], tmp_path / "c"))
        hashes.add(config_hash(other, "data", "32-true", None, "corpus"))
    assert len(hashes) == 4


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["pretrain=electra", "pretrain.electra.generator_size=0"], "pretrain.electra.generator_size must be in"),
        (["pretrain=electra", "pretrain.electra.generator_layers=0"], "pretrain.electra.generator_layers must be >="),
        (["pretrain=electra", "pretrain.electra.discriminator_weight=-1"], "discriminator_weight must be > 0"),
    ],
)
def test_a_bad_electra_value_is_one_line(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as raised:
        run_config(tmp_path, "+experiment=transformer", *overrides)
    assert "\n" not in str(raised.value)


def test_a_config_written_when_every_objective_held_electras_section_still_validates(tmp_path):
    """Stored configs of older code (config.yaml beside the records, read by the report and
    diagnose) held pretrain.electra at its defaults under every objective: it changes nothing there."""
    stored = job_config(compose_job(["+experiment=transformer", "pretrain=mlm"], tmp_path / "run"))
    defaults = {"generator_layers": 1, "generator_size": 0.25, "discriminator_weight": 50.0}
    older = {**stored, "pretrain": {**stored["pretrain"], "electra": defaults}}
    assert validate(older) == validate(stored)
    changed = {**stored, "pretrain": {**stored["pretrain"], "electra": {**defaults, "generator_layers": 2}}}
    with pytest.raises(ConfigError, match="pretrain.electra"):
        validate(changed)


def test_a_bad_pretrain_value_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="pretrain.mask_p must be in"):
        run_config(tmp_path, "pretrain=mlm", "pretrain.mask_p=1.5")


def titles_as_ids(rows: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (rows, length), generator=generator)
    ids[:, 0], ids[:, -1] = SPECIALS.cls, SPECIALS.sep
    return ids


def test_mlm_corruption_follows_bert_80_10_10_on_a_large_draw():
    ids = titles_as_ids(2000, 40, 30000)
    generator = torch.Generator().manual_seed(1)
    picked = pick_tokens(ids, SPECIALS, 0.15, 0, generator)
    shown = corrupt_picked(ids, picked, SPECIALS, 30000, 0.1, 0.1, generator)
    real = ids.ne(SPECIALS.cls) & ids.ne(SPECIALS.sep)
    assert not picked[~real].any()
    assert picked[real].float().mean().item() == pytest.approx(0.15, abs=0.005)
    assert torch.equal(shown[~picked], ids[~picked])  # only picked tokens change
    masked = shown[picked].eq(SPECIALS.mask).float().mean().item()
    kept = shown[picked].eq(ids[picked]).float().mean().item()
    replaced = 1.0 - masked - kept
    assert (masked, replaced, kept) == pytest.approx((0.8, 0.1, 0.1), abs=0.01)


def test_the_masked_lm_loss_is_computed_at_the_picked_positions_only(tmp_path, monkeypatch):
    run = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm")
    tokenizer = fit_tokenizer(run.tokenizer, [t for _, t in make_headlines(per_class=20)])
    torch.manual_seed(0)
    model = MaskedLM.model(run, tokenizer).eval()
    ids = titles_as_ids(64, 20, tokenizer.vocab_size)
    picked = pick_tokens(ids, tokenizer.specials, 0.15, 0, torch.Generator().manual_seed(0))
    rows_seen = []
    head_forward = model.head.forward

    def spy(states, embedding):
        rows_seen.append(states)
        return head_forward(states, embedding)

    monkeypatch.setattr(model.head, "forward", spy)
    loss = model(ids, ids, picked)
    masked = int(picked.sum())
    # The vocabulary projection runs on the masked rows, their count rounded up to a small bucket
    # (what the benchmark counts as the head's rows), not on every position.
    (rows,) = rows_seen
    assert len(rows) == int(MaskedBatch(ids, picked).head_rows()) == -(-masked // HEAD_ROW_BUCKET) * HEAD_ROW_BUCKET
    assert masked <= len(rows) < masked + HEAD_ROW_BUCKET and len(rows) < ids.numel() / 4
    states = model.encoder(ids, ids.eq(model.pad_id))
    torch.testing.assert_close(rows[:masked], states[picked])  # the rows are the masked positions' states
    scores = head_forward(states[picked], model.encoder.embeddings.tokens.weight)
    expected = torch.nn.functional.cross_entropy(scores.float(), ids[picked])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_whole_word_masking_picks_every_piece_of_a_word_together(tmp_path):
    run = run_config(tmp_path, "+experiment=transformer")
    tokenizer = fit_tokenizer(run.tokenizer, [t for _, t in make_headlines(per_class=20)])
    starts = word_start_table(tokenizer)
    encoded = tokenizer.encode([t for _, t in make_headlines(per_class=40, seed=5)])
    width = max(map(len, encoded))
    ids = torch.tensor([e + [tokenizer.specials.pad] * (width - len(e)) for e in encoded])
    picked = pick_whole_words(ids, tokenizer.specials, starts, 0.3, torch.Generator().manual_seed(0))
    assert picked.any()
    continuation = ~starts[ids] & ids.ne(tokenizer.specials.pad)
    # A piece inside a word is picked exactly when the piece before it is.
    inside = continuation[:, 1:]
    assert torch.equal(picked[:, 1:][inside], picked[:, :-1][inside])


def test_whole_word_masking_needs_word_marks(tmp_path):
    run = run_config(tmp_path, "+experiment=transformer", "tokenizer=mecab")
    tokenizer = fit_tokenizer(run.tokenizer, [t for _, t in make_headlines(per_class=5)])
    with pytest.raises(ConfigError, match="whole_word"):
        word_start_table(tokenizer)


def labelled(texts):
    return LabelledTitles(list(texts), np.arange(len(texts)) % 7, "test")


def test_the_corpus_never_holds_a_scored_title_unless_asked(tmp_path):
    rows = [f"제목 {i} 소식" for i in range(40)]
    job = labelled(rows[:20])  # data.limit's labelled subsample; rows[20:] are the file's unlabelled rest
    validation = ["검증 제목 하나", "제목 25 소식"]  # the second is also in the training file
    sources = PretrainSources(rows, ["추가 말뭉치 제목"], validation)
    held_out = np.arange(0, 20, 4)
    run = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm")
    corpus = fold_corpus(run, sources, job, held_out)
    scored = {normalised(job.texts[i]) for i in held_out} | {normalised(v) for v in validation}
    assert scored.isdisjoint(normalised(t) for t in corpus.texts)
    assert "제목 1 소식" in corpus.texts and "제목 30 소식" in corpus.texts and "추가 말뭉치 제목" in corpus.texts
    # Matched by normalised text: other spacing or width is the same title.
    spaced = PretrainSources(["제목  0   소식", "ＡＢＣ 뉴스"], [], ["abc 뉴스"])
    with pytest.raises(ConfigError, match="corpus is empty"):
        fold_corpus(run, spaced, job, held_out)
    opted_in = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm", "pretrain.include_scored_titles=true")
    everything = fold_corpus(opted_in, sources, job, held_out)
    assert everything.include_scored_titles and scored <= {normalised(t) for t in everything.texts}


def test_one_corpus_for_every_fold_leaves_out_every_labelled_title(tmp_path):
    rows = [f"제목 {i} 소식" for i in range(40)]
    job = labelled(rows[:20])
    sources = PretrainSources(rows, [], [])
    run = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm", "pretrain.same_corpus_every_fold=true")
    corpora = [fold_corpus(run, sources, job, np.arange(k, 20, 3)) for k in range(3)]
    assert corpora[0].fingerprint == corpora[1].fingerprint == corpora[2].fingerprint
    assert corpora[0].texts == rows[20:]


def test_held_out_titles_in_the_corpus_share_one_encoder_and_never_let_the_validation_titles_in(tmp_path):
    """pretrain.include_held_out_titles: every fold of all of train reads one corpus (its held-out
    titles as unlabelled text), the validation file's titles stay out; unset, no key moves."""
    rows = [f"제목 {i} 소식" for i in range(30)]
    job = labelled(rows)
    validation = ["검증 제목 하나", "제목 25 소식"]  # the second is also a training title
    sources = PretrainSources(rows, [], validation)
    run = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm", "pretrain.include_held_out_titles=true")
    corpora = [fold_corpus(run, sources, job, np.arange(k, 30, 3)) for k in range(3)]
    assert corpora[0].fingerprint == corpora[1].fingerprint == corpora[2].fingerprint
    assert corpora[0].include_held_out_titles and not corpora[0].include_scored_titles
    assert "제목 0 소식" in corpora[0].texts  # fold 0's held-out title
    assert {normalised(v) for v in validation}.isdisjoint(normalised(t) for t in corpora[0].texts)
    assert len(corpora[0].texts) == 29 and corpora[0].left_out == 1
    assert pretrained_key(run, CPU, corpora[0], None) == pretrained_key(run, CPU, corpora[2], None)
    default = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm")
    assert "include_held_out_titles" not in keyed_settings(default.pretrain)
    assert keyed_settings(run.pretrain)["include_held_out_titles"] is True
    with pytest.raises(ConfigError, match="set one of them"):
        run_config(
            tmp_path,
            "+experiment=transformer",
            "pretrain=mlm",
            "pretrain.include_held_out_titles=true",
            "pretrain.same_corpus_every_fold=true",
        )
    # A final model on the same titles (cv.folds=1: nothing held out) reads the same corpus, so a
    # student distilled later starts from the members' encoder (sweeps/distill.yaml).
    final = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm", "cv.folds=1")
    final_corpus = fold_corpus(final, sources, job, np.array([], dtype=np.int64))
    assert pretrained_key(final, CPU, final_corpus, None) == pretrained_key(run, CPU, corpora[0], None)


def test_gather_sources_reads_the_rest_of_the_file_and_the_corpus_files(tmp_path):
    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=10))
    extra = tmp_path / "extra.txt"
    extra.write_text("첫째 제목\n\n둘째 제목\n", encoding="utf-8")
    run = run_config(
        tmp_path,
        "+experiment=transformer",
        "pretrain=mlm",
        f"data.path={data}",
        "data.limit=21",
        f"pretrain.corpus=[{extra}]",
    )
    sources = gather_sources(run, labelled(["x"] * 21), None)
    assert len(sources.file_titles) == 70 and sources.extra_titles == ["첫째 제목", "둘째 제목"]


def test_a_bad_corpus_file_is_one_line(tmp_path):
    with pytest.raises(DataError, match="missing.txt: file not found"):
        read_unlabelled_file(tmp_path / "missing.txt")
    (tmp_path / "blank.txt").write_text("\n \n")
    with pytest.raises(DataError, match="blank.txt: file is empty"):
        read_unlabelled_file(tmp_path / "blank.txt")


def tiny_pretraining(tmp_path, *overrides):
    run = run_config(
        tmp_path, "pretrain=mlm", "pretrain.batch_size=16", "encoder.layers=1", "trainer.precision=32-true", *overrides
    )
    texts = [t for _, t in make_headlines(per_class=10)]
    return run, fold_corpus_from(texts)


@pytest.mark.integration
def test_a_second_job_with_the_same_key_trains_nothing(tmp_path, monkeypatch):
    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=2")
    store, cache = PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "cache")
    first = ensure_pretrained(run, CPU, corpus, store, cache, None)
    assert first.meta["steps"] == 2 and first.weights.is_file()
    assert (first.meta["device"], first.meta["threads"]) == (CPU.name, torch.get_num_threads())  # what ran it
    assert first.meta["final_loss_steps"] == 2  # the loss averages both steps

    def must_not_train(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(pretraining, "pretrain_encoder", must_not_train)
    again = ensure_pretrained(run, CPU, corpus, store, cache, None)
    assert again.key == first.key and again.path == first.path
    other_seed = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm", "seed=7")
    assert pretrained_key(other_seed, CPU, corpus, None) != first.key


@pytest.mark.integration
def test_a_job_that_wants_an_encoder_being_trained_waits_then_reuses_it(tmp_path, monkeypatch):
    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=2")
    store, cache = PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "cache")
    key = pretrained_key(run, CPU, corpus, None)
    train_and_store = pretraining._train_and_store
    trained = []

    def counted(*args, **kwargs):
        trained.append(threading.current_thread().name)
        return train_and_store(*args, **kwargs)

    monkeypatch.setattr(pretraining, "_train_and_store", counted)
    found = {}
    second = threading.Thread(
        target=lambda: found.setdefault("encoder", ensure_pretrained(run, CPU, corpus, store, cache, None)),
        name="second",
    )
    with store.claim(key):  # the first job holds the key while it trains
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive()  # waiting for the lock, not training
        first = pretraining._train_and_store(run, CPU, corpus, key, store, cache, None)
    second.join(timeout=60)
    assert not second.is_alive() and trained == ["MainThread"]
    assert found["encoder"].key == first.key and found["encoder"].meta == first.meta


class Killed(Exception):
    pass


@pytest.mark.integration
@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_a_killed_pretraining_resumes_from_its_last_saved_step(tmp_path, caplog, objective):
    run, corpus = tiny_pretraining(
        tmp_path,
        "+experiment=transformer",
        f"pretrain={objective}",
        "pretrain.max_steps=6",
        "pretrain.save_every_steps=2",
    )
    tokenizer = fit_tokenizer(run.tokenizer, corpus.texts)
    encoded = EncodedTitles.from_lists(tokenizer.encode(corpus.texts))
    whole = pretrain_encoder(run, CPU, tokenizer, encoded, tmp_path / "uninterrupted.pt").weights

    def kill_after_step_3(step, total, loss, batch):
        if step == 3:
            raise Killed

    state = tmp_path / "resume.pt"
    with pytest.raises(Killed):
        pretrain_encoder(run, CPU, tokenizer, encoded, state, kill_after_step_3)
    assert torch.load(state, weights_only=False)["step"] == 2
    before = torch.load(state, weights_only=False)["seconds"]
    taken = []
    with caplog.at_level(logging.INFO, logger="klue_tc.pretraining.pretrain"):
        resumed = pretrain_encoder(
            run, CPU, tokenizer, encoded, state, lambda step, total, loss, batch: taken.append(step)
        )
    assert "resumes after step 2" in caplog.text and taken == [3, 4, 5, 6] and resumed.steps == 6
    assert before > 0 and resumed.seconds > before  # the first sitting's seconds count too
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed.weights[name], tensor, msg=name)


@pytest.mark.integration
@pytest.mark.parametrize("save_every, killed_at", [(5, 7), (3, 8)])  # saved at an epoch's end; part-way through
def test_a_pretraining_resumed_from_lightnings_checkpoint_ends_with_the_same_bits(tmp_path, save_every, killed_at):
    run, corpus = tiny_pretraining(
        tmp_path, "+experiment=transformer", "pretrain.max_steps=12", f"pretrain.save_every_steps={save_every}"
    )
    tokenizer = fit_tokenizer(run.tokenizer, corpus.texts)
    encoded = EncodedTitles.from_lists(tokenizer.encode(corpus.texts))
    assert pretraining.total_steps(run, len(encoded))[0] == 5  # 70 titles in batches of 16
    whole = pretrain_encoder(run, CPU, tokenizer, encoded, tmp_path / "uninterrupted.pt")

    def kill(step, total, loss, batch):
        if step == killed_at:
            raise Killed

    state = tmp_path / "resume.pt"
    with pytest.raises(Killed):
        pretrain_encoder(run, CPU, tokenizer, encoded, state, kill)
    saved = torch.load(state, weights_only=False)
    assert "pytorch-lightning_version" in saved and "loops" in saved  # the Trainer's own checkpoint
    assert saved["step"] == saved["global_step"] == killed_at // save_every * save_every
    resumed = pretrain_encoder(run, CPU, tokenizer, encoded, state)
    assert (resumed.steps, resumed.loss, resumed.loss_steps) == (whole.steps, whole.loss, whole.loss_steps)
    assert all(torch.equal(resumed.weights[name], tensor) for name, tensor in whole.weights.items())


@pytest.mark.integration
def test_a_state_left_by_the_earlier_hand_written_loop_is_pretrained_from_the_start(tmp_path, caplog):
    from klue_tc.core.checksums import write_with_sidecar

    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=2")
    tokenizer = fit_tokenizer(run.tokenizer, corpus.texts)
    encoded = EncodedTitles.from_lists(tokenizer.encode(corpus.texts))
    state = tmp_path / "resume.pt"
    buffer = io.BytesIO()
    torch.save({"step": 1, "seconds": 1.0, "recent_losses": [5.0]}, buffer)
    write_with_sidecar(state, buffer.getvalue())
    with caplog.at_level(logging.WARNING, logger="klue_tc.pretraining"):
        outcome = pretrain_encoder(run, CPU, tokenizer, encoded, state)
    assert "written by older code; pretraining from the start" in caplog.text
    assert outcome.steps == 2 and outcome.loss_steps == 2


@pytest.mark.integration
def test_a_stop_signal_saves_pretraining_at_that_step_and_the_rerun_goes_on_from_it(tmp_path, monkeypatch):
    import signal

    from klue_tc.core import interrupts

    monkeypatch.setattr(interrupts._state, "signum", None)
    monkeypatch.setattr(interrupts._state, "at_step_boundary", False)
    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=6")
    assert run.pretrain.save_every_steps > 6  # no periodic save: the signal alone writes the state
    tokenizer = fit_tokenizer(run.tokenizer, corpus.texts)
    encoded = EncodedTitles.from_lists(tokenizer.encode(corpus.texts))
    whole = pretrain_encoder(run, CPU, tokenizer, encoded, tmp_path / "uninterrupted.pt").weights

    def sigterm_during_step_3(step, total, loss, batch):
        if step == 3:
            interrupts._handle(signal.SIGTERM, None)  # what the handler does when a scheduler stops the job

    state = tmp_path / "resume.pt"
    with pytest.raises(interrupts.JobInterrupted, match=r"in pretraining, at step 3 of 6: its state is saved"):
        pretrain_encoder(run, CPU, tokenizer, encoded, state, sigterm_during_step_3)
    assert torch.load(state, weights_only=False)["step"] == 3
    monkeypatch.setattr(interrupts._state, "signum", None)  # the rerun is a new process
    resumed = pretrain_encoder(run, CPU, tokenizer, encoded, state)
    assert resumed.steps == 6
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed.weights[name], tensor, msg=name)


def assert_every_sublayer_learned_and_loads_into_the_classifier(run, stored, weights, initial) -> None:
    changed = [name for name in weights if not torch.equal(weights[name], initial[name])]
    assert any("sublayers.1" in name for name in changed)  # the FFN / BLSTM / conv sublayer learned too
    module = TopicClassifierModule.from_configs(
        stored.tokenizer.vocab_size, stored.tokenizer.specials, run.encoder, run.head, run.optim, run.augment
    )
    load_pretrained_encoder(module.model, stored)
    loaded = module.model.encoder.state_dict()
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[name], weights[name]) for name in weights)


@pytest.mark.integration
@pytest.mark.parametrize("encoder", ENCODERS)
def test_every_encoder_pretrains_and_its_weights_load_into_the_classifier(tmp_path, encoder):
    run, corpus = tiny_pretraining(tmp_path, f"+experiment={encoder}", "pretrain.max_steps=3")
    store, cache = PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "cache")
    stored = ensure_pretrained(run, CPU, corpus, store, cache, None)
    weights = torch.load(stored.weights, weights_only=True)
    torch.manual_seed(run.seed)
    initial = MaskedLM.model(run, stored.tokenizer).encoder.state_dict()
    assert_every_sublayer_learned_and_loads_into_the_classifier(run, stored, weights, initial)


@pytest.mark.integration
@pytest.mark.parametrize("tokenizer", ["mecab", "kobert"])
def test_every_tokenizer_pretrains(tmp_path, tokenizer):
    extra = []
    if tokenizer == "kobert":
        if not SHARED_KOBERT.exists():
            pytest.skip("../shared/models/kobert-base-v1/spiece.model is not present")
        extra = [f"tokenizer.model_path={SHARED_KOBERT}"]
    run, corpus = tiny_pretraining(
        tmp_path, "+experiment=transformer", f"tokenizer={tokenizer}", *extra, "pretrain.max_steps=2"
    )
    stored = ensure_pretrained(
        run, CPU, corpus, PretrainedStore(tmp_path / "p"), TokenizerCache(tmp_path / "cache"), None
    )
    assert stored.meta["steps"] == 2 and stored.tokenizer.kind == tokenizer


def test_masked_language_model_keeps_the_classifier_encoder_init(tmp_path):
    """The pretraining encoder starts where a from-scratch classifier's would."""
    run = run_config(tmp_path, "+experiment=transformer")
    tokenizer = fit_tokenizer(run.tokenizer, [t for _, t in make_headlines(per_class=5)])
    torch.manual_seed(run.seed)
    model = MaskedLM.model(run, tokenizer)
    torch.manual_seed(run.seed)
    module = TopicClassifierModule.from_configs(
        tokenizer.vocab_size, tokenizer.specials, run.encoder, run.head, run.optim, run.augment
    )
    assert isinstance(model, MaskedLanguageModel)
    for name, tensor in model.encoder.state_dict().items():
        assert torch.equal(tensor, module.model.encoder.state_dict()[name])


def test_the_pretrained_store_lies_inside_results_dir_and_one_beside_it_is_still_read(tmp_path, monkeypatch):
    """By default the store is <results.dir>/pretrained, inside the folder the user named; an encoder
    that earlier code stored beside it (<results.dir>/../pretrained) is found there, not pretrained again."""
    run, results = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm"), tmp_path / "results"
    assert run.pretrain.store_dir(results) == results / "pretrained"
    assert pretraining.store_for(run, results, "k").root == results / "pretrained"  # nothing stored yet
    earlier = tmp_path / "pretrained" / "k"
    earlier.mkdir(parents=True)
    (earlier / pretraining.META_FILE).write_text(json.dumps({"tokenizer_key": "t"}), encoding="utf-8")
    monkeypatch.setattr(pretraining, "load_tokenizer", lambda path: object())
    assert pretraining.store_for(run, results, "k").root == tmp_path / "pretrained"
    assert pretraining.store_for(run, results, "other").root == results / "pretrained"
    mine = run_config(tmp_path, "+experiment=transformer", "pretrain=mlm", f"pretrain.dir={tmp_path / 'mine'}")
    assert pretraining.store_for(mine, results, "k").root == tmp_path / "mine"  # pretrain.dir as named


@pytest.mark.integration
@pytest.mark.slow
def test_a_three_fold_job_with_one_corpus_pretrains_once_and_records_it(tmp_path, monkeypatch):
    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14))
    validation = write_tsv(tmp_path / "val.tsv", make_headlines(per_class=3, seed=9))
    run_dir = tmp_path / "run"
    common = [
        "+experiment=transformer",
        f"data.path={data}",
        f"data.validation_path={validation}",
        "data.limit=63",
        f"results.dir={tmp_path / 'results'}",
        "logger=none",
        *TINY_MODEL,
        "encoder.layers=1",
        "cv.folds=3",
        "trainer.max_epochs=1",
        "pretrain=mlm",
        "pretrain.same_corpus_every_fold=true",
        "pretrain.max_steps=3",
        "pretrain.batch_size=16",
    ]
    run_in_process(common, run_dir)
    stored = list((tmp_path / "results" / "pretrained").iterdir())  # inside the results.dir named
    assert len(stored) == 1  # three folds, one corpus: one pretrained encoder
    assert not (tmp_path / "pretrained").exists()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    records = [fold["pretrained"] for fold in metrics["folds"]]
    assert {r["key"] for r in records} == {stored[0].name} and not records[0]["include_scored_titles"]
    assert records[0]["corpus_titles"] == 98 - 63  # the file's titles that are not labelled (none repeat one)
    assert records[0]["device"] == metrics["folds"][0]["device"] and records[0]["threads"] >= 1  # what ran it
    # A second sweep over the same key: the results are found and nothing trains.
    run_in_process([*common, "results.resume=false"], tmp_path / "run2")
    assert len(list((tmp_path / "results" / "pretrained").iterdir())) == 1
    # An encoder where earlier code stored it, beside the results store, is found there, not pretrained again.
    (tmp_path / "results" / "pretrained").rename(tmp_path / "pretrained")
    monkeypatch.setattr(pretraining, "pretrain_encoder", lambda *a, **k: pytest.fail("pretrained again"))
    run_in_process([*common, "results.resume=false"], tmp_path / "run3")
    metrics = json.loads((tmp_path / "run3" / "metrics.json").read_text())
    assert {Path(fold["pretrained"]["path"]).parent for fold in metrics["folds"]} == {tmp_path / "pretrained"}


@pytest.mark.integration
@pytest.mark.slow
def test_the_command_line_pretrains_then_fine_tunes_and_logs_pretraining_as_its_own_run(tmp_path, tiny_tsv):
    validation = write_tsv(tmp_path / "val.tsv", make_headlines(per_class=3, seed=7))
    run_dir = tmp_path / "run"
    done = run_cli(
        [
            "+experiment=trans_blstm",
            f"data.path={tiny_tsv}",
            f"data.validation_path={validation}",
            "cv.folds=2",
            "cv.fold=0",
            "trainer.max_epochs=1",
            "encoder.layers=1",
            f"results.dir={tmp_path / 'results'}",
            *TINY_MODEL,
            "pretrain=mlm",
            "pretrain.epochs=2",
            "pretrain.batch_size=16",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"pretraining step (\d+)/\1: MLM loss \d+\.\d{3} \| elapsed", done.stdout + done.stderr)
    fold = json.loads((run_dir / "metrics.json").read_text())["folds"][0]
    stored = Path(fold["pretrained"]["path"])
    assert stored.parent == tmp_path / "results" / "pretrained" and (stored / "encoder.pt").is_file()
    assert fold["pretrained"]["steps"] == 2 * -(-fold["pretrained"]["corpus_titles"] // 16)
    payloads = [p.read_bytes() for p in run_dir.glob("wandb/offline-run-*/*.wandb")]
    pretrain_runs = [p for p in payloads if b"pretrain/mlm_loss" in p]
    assert len(pretrain_runs) == 1 and f"trans_blstm-{fold['config_hash']}".encode() in pretrain_runs[0]


def test_a_sample_equal_to_the_original_token_counts_as_original():
    """ELECTRA's labels: replaced where the discriminator's input differs from the original, so a
    picked position whose sample is the original token is labelled original."""
    original = torch.tensor([[2, 10, 11, 12, 3, 0], [2, 20, 21, 3, 0, 0]])
    picked = torch.tensor([[0, 1, 0, 1, 0, 0], [0, 1, 1, 0, 0, 0]], dtype=torch.bool)
    sampled = torch.tensor([10, 99, 77, 21])  # in row order: same, other, other, same
    shown, replaced = replaced_token_labels(original, picked, sampled)
    assert shown.tolist() == [[2, 10, 11, 99, 3, 0], [2, 77, 21, 3, 0, 0]]
    assert replaced.tolist() == [[False, False, False, True, False, False], [False, True, False, False, False, False]]


def test_the_generator_never_samples_a_special_token_and_follows_its_scores():
    scores = torch.zeros(4000, 8)
    scores[:, 0] = scores[:, 2] = 50.0  # padding and [CLS] would win every draw if allowed
    scores[:, 6] = 1.0
    drawn = sample_tokens(scores, (0, 2, 3, 4), torch.Generator().manual_seed(0))
    assert not np.isin(drawn.numpy(), [0, 2, 3, 4]).any()
    share_of_6 = drawn.eq(6).float().mean().item()  # e / (e + 3) among ids 1, 5, 6, 7
    assert share_of_6 == pytest.approx(np.e / (np.e + 3), abs=0.03)


def test_the_generator_is_a_narrow_transformer_on_the_encoders_token_embedding(tmp_path):
    run = run_config(tmp_path, "+experiment=trans_blstm", "pretrain=electra", "encoder.d_model=64", "encoder.heads=4")
    config = generator_config(run.encoder, run.pretrain.electra)
    assert (config.name, config.layers, config.d_model, config.heads) == ("transformer", 1, 16, 1)
    tokenizer = fit_tokenizer(run.tokenizer, [t for _, t in make_headlines(per_class=10)])
    torch.manual_seed(run.seed)
    model = Electra.model(run, tokenizer)
    assert isinstance(model, ReplacedTokenDetection)
    embedding = model.encoder.embeddings.tokens.weight
    assert not any(p is embedding for p in model.generator.parameters())  # read, not held twice
    shown = titles_as_ids(4, 10, tokenizer.vocab_size)
    picked = pick_tokens(shown, tokenizer.specials, 0.3, 0, torch.Generator().manual_seed(0))
    model(shown, shown, picked, torch.Generator().manual_seed(0)).backward()
    assert embedding.grad is not None and embedding.grad.abs().sum() > 0
    # The encoder starts where a from-scratch classifier's would, as with the masked LM.
    torch.manual_seed(run.seed)
    masked_lm_encoder = MaskedLM.model(run, tokenizer).encoder.state_dict()
    for name, tensor in model.encoder.state_dict().items():
        assert torch.equal(tensor, masked_lm_encoder[name]), name


def test_the_electra_loss_is_the_generators_plus_lambda_times_the_detection_loss(tmp_path, monkeypatch):
    run = run_config(tmp_path, "+experiment=transformer", "pretrain=electra", "pretrain.electra.discriminator_weight=7")
    tokenizer = fit_tokenizer(run.tokenizer, [t for _, t in make_headlines(per_class=10)])
    model = Electra.model(run, tokenizer).eval()
    ids = titles_as_ids(6, 12, tokenizer.vocab_size)
    picked = pick_tokens(ids, tokenizer.specials, 0.3, 0, torch.Generator().manual_seed(1))
    detections = []
    bce = torch.nn.functional.binary_cross_entropy_with_logits

    def spy(logits, labels):
        detections.append((logits.detach(), labels))
        return bce(logits, labels)

    monkeypatch.setattr("klue_tc.pretraining.replaced_token_detection.F.binary_cross_entropy_with_logits", spy)
    head_rows = []
    model.generator_head.register_forward_hook(lambda head, args, out: head_rows.append(len(args[0])))
    loss = model(ids, ids, picked, torch.Generator().manual_seed(2))
    [(logits, labels)] = detections
    assert head_rows == [int(MaskedBatch(ids, picked).head_rows())]  # the masked LM's bucket, not fine-tuning's
    assert len(logits) == ids.ne(SPECIALS.cls).logical_and(ids.ne(SPECIALS.sep)).sum()  # every real token
    assert labels.sum() <= picked.sum()  # only picked positions can be replaced
    states = model.generator(ids, ids.eq(tokenizer.specials.pad))
    scores = model.generator_head(states[picked], model.encoder.embeddings.tokens.weight)
    generator_loss = torch.nn.functional.cross_entropy(scores.float(), ids[picked])
    assert loss.item() == pytest.approx(generator_loss.item() + 7 * bce(logits, labels).item(), rel=1e-5)


@pytest.mark.integration
@pytest.mark.parametrize("encoder", ENCODERS + ["trans_blstm_parallel_pre"])
def test_every_encoder_pretrains_with_electra_and_only_its_encoder_is_stored(tmp_path, encoder):
    extra = ["encoder.ln=pre"] if encoder.endswith("_pre") else []
    run, corpus = tiny_pretraining(
        tmp_path, f"+experiment={encoder.removesuffix('_pre')}", *extra, "pretrain=electra", "pretrain.max_steps=3"
    )
    losses = []
    store, cache = PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "cache")
    stored = ensure_pretrained(
        run, CPU, corpus, store, cache, None, lambda step, total, loss, batch: losses.append(float(loss))
    )
    assert len(losses) == 3 and all(np.isfinite(losses)) and stored.meta["objective"] == "electra"
    weights = torch.load(stored.weights, weights_only=True)
    torch.manual_seed(run.seed)
    initial = Electra.model(run, stored.tokenizer).encoder.state_dict()
    assert weights.keys() == initial.keys()  # the discriminator's encoder alone: no generator, no detector
    assert_every_sublayer_learned_and_loads_into_the_classifier(run, stored, weights, initial)


def test_the_token_entropy_counts_only_what_masking_can_hide():
    # ids 0-3 never hidden; 4 and 5 equally often, so ln 2, however many specials surround them
    ids = np.array([0, 1, 4, 5, 2, 1, 4, 5, 2, 3, 3, 3], dtype=np.int32)
    assert token_entropy(ids, (0, 1, 2, 3)) == pytest.approx(math.log(2))
    assert token_entropy(np.array([7, 7, 7]), (0, 1, 2, 3)) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "meta, warned",
    [
        ({"objective": "mlm", "final_loss": 7.52, "token_entropy": 7.79}, True),  # the study's 4-layer TRANS-BLSTM
        ({"objective": "mlm", "final_loss": 6.80, "token_entropy": 7.79}, False),  # its 2-layer one learnt context
        ({"objective": "mlm", "final_loss": 7.52}, False),  # older code: no entropy stored, nothing claimed
        ({"objective": "electra", "final_loss": 9.0, "token_entropy": 7.79}, False),  # not a masked-LM loss
    ],
)
def test_a_masked_lm_loss_near_the_token_frequency_entropy_is_named(meta, warned):
    line = plateau_warning(meta)
    assert (line is not None) == warned
    if warned:
        assert "7.52" in line and "7.79" in line and "pretrain.epochs" in line


@pytest.mark.integration
def test_a_stored_pretraining_records_its_token_entropy_and_warns_on_the_plateau(tmp_path, caplog):
    """Two steps cannot leave the plateau: the job's log says so in one line, beside the entropy it stored."""
    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=2")
    with caplog.at_level(logging.WARNING, logger="klue_tc.pretraining.pretrain"):
        found = ensure_pretrained(
            run, CPU, corpus, PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "c"), None
        )
    ids = found.tokenizer.encode(corpus.texts)
    flat = np.array([i for title in ids for i in title])
    assert found.meta["token_entropy"] == pytest.approx(
        token_entropy(flat, never_hidden(found.tokenizer.specials)), abs=1e-3
    )
    assert found.meta["final_loss"] > found.meta["token_entropy"] - 0.5
    assert [r.message for r in caplog.records if "token frequencies" in r.message]


@pytest.mark.integration
def test_a_second_pretraining_seed_is_a_new_encoder_on_the_same_titles_and_folds(tmp_path):
    """pretrain.seed draws other initial weights and batches, keyed as its own encoder and results;
    unset, it is the run's seed: every key made before it is as it was."""
    job = ["+experiment=transformer", "data.limit=10000", "cv.folds=3", "pretrain=mlm"]
    default = validate(compose_job(job, tmp_path / "a"))
    same = validate(compose_job([*job, "pretrain.seed=42"], tmp_path / "b"))
    second = validate(compose_job([*job, "pretrain.seed=43"], tmp_path / "c"))
    assert config_hash(default, "data", "32-true", None, "corpus") == "5954c1bfd4af"  # the committed study's
    assert "seed" not in keyed_settings(default.pretrain)
    corpus = fold_corpus_from([t for _, t in make_headlines(per_class=3)])
    assert pretrained_key(default, CPU, corpus, None) != pretrained_key(second, CPU, corpus, None)
    assert config_hash(second, "data", "32-true", None, "corpus") not in {
        "5954c1bfd4af",
        config_hash(same, "data", "32-true", None, "corpus"),
    }
    # The fine-tuning's titles are drawn by the run's seed, which a second pretraining leaves alone.
    assert second.seed == default.seed

    run, corpus = tiny_pretraining(tmp_path / "d", "+experiment=transformer", "pretrain.max_steps=3")
    reseeded, _ = tiny_pretraining(tmp_path / "e", "+experiment=transformer", "pretrain.max_steps=3", "pretrain.seed=7")
    explicit, _ = tiny_pretraining(
        tmp_path / "f", "+experiment=transformer", "pretrain.max_steps=3", f"pretrain.seed={run.seed}"
    )
    tokenizer = fit_tokenizer(run.tokenizer, corpus.texts)
    encoded = EncodedTitles.from_lists(tokenizer.encode(corpus.texts))
    weights = [
        pretrain_encoder(r, CPU, tokenizer, encoded, tmp_path / f"{i}.pt", None).weights
        for i, r in enumerate((run, explicit, reseeded))
    ]
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])
    assert not all(torch.equal(weights[0][n], weights[2][n]) for n in weights[0])


def test_the_shared_code_in_the_code_version_keeps_every_stored_encoders_key(tmp_path, monkeypatch):
    """The code version now keeps the shared code's fingerprint beside its own, which holds it: an
    encoder stored by code whose version lacked it is found under the same key."""
    from klue_tc.store import fingerprint
    from klue_tc.store.records import CodeVersion

    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer")
    code = fingerprint.code_version(run)
    assert code.shared is not None
    keys = pretrained_keys(run, CPU, corpus, None)
    monkeypatch.setattr(encoder_keys, "version_of", lambda choices: CodeVersion(code.fingerprint, code.versions))
    assert pretrained_keys(run, CPU, corpus, None) == keys


@pytest.mark.integration
def test_an_encoder_stored_by_earlier_code_that_makes_the_same_numbers_is_not_pretrained_again(tmp_path, monkeypatch):
    """SAME_NUMBERS_AS covers the pretrained encoders as it covers the fold records: an encoder
    stored under the key of an earlier code version it names is found; without the entry, this code
    pretrains anew under its own key."""
    from klue_tc.store import fingerprint
    from klue_tc.store.records import CodeVersion

    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=2")
    store, cache = PretrainedStore(tmp_path / "pretrained"), TokenizerCache(tmp_path / "cache")
    earlier = ensure_pretrained(run, CPU, corpus, store, cache, None)
    made_by = fingerprint.code_version(run)
    later = CodeVersion("0123456789ab", made_by.versions)  # this code after an edit that moves no number
    monkeypatch.setattr(encoder_keys, "version_of", lambda choices: later)
    monkeypatch.setattr(encoder_keys, "SAME_NUMBERS_AS", {later.fingerprint: (made_by.fingerprint,)})
    keys = pretrained_keys(run, CPU, corpus, None)
    assert keys[1] == earlier.key != keys[0]
    monkeypatch.setattr(pretraining, "_train_and_store", lambda *args: pytest.fail("pretrained again"))
    assert ensure_pretrained(run, CPU, corpus, store, cache, None).key == earlier.key
    monkeypatch.setattr(encoder_keys, "SAME_NUMBERS_AS", {})
    assert pretrained_keys(run, CPU, corpus, None) == [keys[0]]
