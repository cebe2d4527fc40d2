"""The stall rule of masked-LM pretraining (pretrain.stall): a pretraining it does not restart is the
pretraining without it, to the last bit; one on the token-frequency plateau at its check starts again
at the lower rate, as that rate's own pretraining would; its checks are kept in the encoder's meta;
and it moves no key while it is off."""

import json

import pytest
import torch
from test_pretraining import CPU, Killed, fold_corpus_from, tiny_pretraining

from conftest import make_headlines
from jobs import compose_job
from klue_tc.core.config import keyed_settings, validate
from klue_tc.core.errors import ConfigError
from klue_tc.pretraining import pretrain as pretraining
from klue_tc.pretraining.encoder_keys import pretrained_key
from klue_tc.pretraining.pretrain import PretrainedStore, ensure_pretrained, pretrain_encoder
from klue_tc.store.results import config_hash
from klue_tc.tokenizers import EncodedTitles, TokenizerCache, fit_tokenizer

MIDWAY_ONCE = ["pretrain.stall.max_restarts=1", "pretrain.stall.check_at=0.5"]
RULE_ON = ["pretrain.stall.max_restarts=2", "pretrain.stall.check_at=0.5"]


def fitted(run, corpus):
    tokenizer = fit_tokenizer(run.tokenizer, corpus.texts)
    return tokenizer, EncodedTitles.from_lists(tokenizer.encode(corpus.texts))


def pretrained_with_losses(run, tokenizer, encoded, state, on_step=None):
    losses = []

    def hook(step, total, loss, batch):
        losses.append((step, total, float(loss)))
        if on_step is not None:
            on_step(step, total, loss, batch)

    return pretrain_encoder(run, CPU, tokenizer, encoded, state, hook), losses


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.integration
def test_a_pretraining_the_rule_never_restarts_is_the_same_to_the_last_bit(tmp_path, monkeypatch):
    """The rule on (two restarts allowed) over a corpus whose plateau the loss is far below: the same
    loss at every step and the same weights as with the rule off, the check recorded beside them."""
    off, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=8")
    on, _ = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=8", *RULE_ON)
    tokenizer, encoded = fitted(off, corpus)
    # A plateau far above any loss these steps reach: the check reads the loss and lets it go on.
    monkeypatch.setattr(pretraining, "token_entropy", lambda ids, hidden: 100.0)
    without, losses_without = pretrained_with_losses(off, tokenizer, encoded, tmp_path / "off.pt")
    with_rule, losses_with = pretrained_with_losses(on, tokenizer, encoded, tmp_path / "on.pt")
    assert losses_with == losses_without and len(losses_with) == 8
    assert_same_weights(with_rule.weights, without.weights)
    assert (with_rule.steps, with_rule.loss) == (without.steps, without.loss)
    (check,) = with_rule.stall["checks"]
    assert (check["step"], check["restarted"], with_rule.stall["restarts"], with_rule.stall["lr"]) == (
        4,
        False,
        0,
        1e-3,
    )
    assert check["loss"] == pytest.approx(sum(loss for _, _, loss in losses_with[:4]) / 4, rel=1e-5)
    assert (check["plateau"], check["margin"]) == (100.0, 0.5)
    assert not list(tmp_path.glob("*.stall.json"))  # the running file is gone once the meta holds it


@pytest.mark.integration
def test_a_pretraining_on_the_plateau_restarts_from_its_start_at_half_the_rate(tmp_path):
    """Two steps of eight cannot leave the plateau of a tiny corpus: with one restart allowed, the rule
    restarts at step 4 and the restart is, step for step, the pretraining at half the rate."""
    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=8", *MIDWAY_ONCE)
    half, _ = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain.max_steps=8", "pretrain.lr=5e-4")
    tokenizer, encoded = fitted(run, corpus)
    restarted, losses = pretrained_with_losses(run, tokenizer, encoded, tmp_path / "rule.pt")
    at_half, half_losses = pretrained_with_losses(half, tokenizer, encoded, tmp_path / "half.pt")

    first, second = restarted.stall["checks"]
    assert (first["attempt"], first["step"], first["lr"], first["restarted"]) == (0, 4, 1e-3, True)
    assert first["loss"] > first["plateau"] - first["margin"]
    assert (second["attempt"], second["lr"], second["restarted"]) == (1, 5e-4, False)  # no restart left
    assert (restarted.stall["restarts"], restarted.stall["lr"]) == (1, 5e-4)
    assert_same_weights(restarted.weights, at_half.weights)
    # The progress hook counts on across the restart (W&B's steps only grow): 3 steps, then 8 more.
    assert [s for s, _, _ in losses] == [1, 2, 3, *range(5, 13)] and {t for _, t, _ in losses[3:]} == {12}
    assert [loss for _, _, loss in losses[3:]] == [loss for _, _, loss in half_losses]
    assert restarted.steps == 8 and restarted.seconds > first["seconds"]
    assert second["loss"] > second["plateau"] - second["margin"]  # still on it: a second restart, had one been left


@pytest.mark.integration
def test_a_job_killed_after_a_restart_resumes_the_restarted_attempt(tmp_path):
    run, corpus = tiny_pretraining(
        tmp_path,
        "+experiment=transformer",
        "pretrain.max_steps=8",
        "pretrain.save_every_steps=2",
        *MIDWAY_ONCE,
    )
    tokenizer, encoded = fitted(run, corpus)
    whole = pretrain_encoder(run, CPU, tokenizer, encoded, tmp_path / "whole" / "resume.pt")

    def kill_in_the_restart(step, total, loss, batch):
        if step == 4 + 5:  # the restart's fifth step (the first attempt stopped at its fourth)
            raise Killed

    state = tmp_path / "killed" / "resume.pt"
    state.parent.mkdir()
    with pytest.raises(Killed):
        pretrain_encoder(run, CPU, tokenizer, encoded, state, kill_in_the_restart)
    assert not state.is_file()  # the stalled attempt's state is gone; the restart's is beside it
    assert torch.load(state.with_name("resume.restart1.pt"), weights_only=False)["step"] == 4
    assert json.loads(state.with_name("resume.stall.json").read_text())[0]["restarted"] is True
    resumed = pretrain_encoder(run, CPU, tokenizer, encoded, state)
    assert resumed.stall["restarts"] == 1 and len(resumed.stall["checks"]) == 2
    assert_same_weights(resumed.weights, whole.weights)
    assert resumed.loss == pytest.approx(whole.loss)  # the last steps' losses were saved with the state


@pytest.mark.integration
def test_the_stored_encoder_and_its_folds_record_the_rule(tmp_path):
    run, corpus = tiny_pretraining(
        tmp_path, "+experiment=transformer", "pretrain.max_steps=4", "pretrain.stall.max_restarts=1"
    )
    stored = ensure_pretrained(
        run, CPU, corpus, PretrainedStore(tmp_path / "store"), TokenizerCache(tmp_path / "cache"), None
    )
    assert stored.meta["stall"]["restarts"] == 1 and stored.record()["stall"] == stored.meta["stall"]
    assert json.loads((stored.path / pretraining.META_FILE).read_text())["stall"]["lr"] == 5e-4
    assert not list(stored.path.glob("resume*"))


@pytest.mark.integration
def test_electra_has_no_plateau_to_check(tmp_path):
    run, corpus = tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain=electra", "pretrain.max_steps=2")
    tokenizer, encoded = fitted(run, corpus)
    assert pretrain_encoder(run, CPU, tokenizer, encoded, tmp_path / "s.pt").stall is None
    with pytest.raises(ConfigError, match="pretrain.stall watches the masked-LM loss"):
        tiny_pretraining(tmp_path, "+experiment=transformer", "pretrain=electra", *RULE_ON)


@pytest.mark.parametrize(
    "setting, message",
    [
        ("max_restarts=-1", "pretrain.stall.max_restarts must be >= 0"),
        ("check_at=0", r"pretrain.stall.check_at must be in \(0, 1\]"),
        ("margin=-1", "pretrain.stall.margin must be >= 0"),
        ("lr_factor=1", r"pretrain.stall.lr_factor must be in \(0, 1\)"),
    ],
)
def test_a_bad_stall_setting_is_one_line(tmp_path, setting, message):
    with pytest.raises(ConfigError, match=message):
        tiny_pretraining(tmp_path, "+experiment=transformer", f"pretrain.stall.{setting}")


def test_the_rule_moves_the_keys_only_while_it_may_act(tmp_path):
    """Off (the default, whatever its check settings), every results key and pretrained-encoder key is as
    it was; on, both move, and each of its settings moves them: a restart changes the weights."""
    job = ["+experiment=transformer", "data.limit=10000", "cv.folds=3", "pretrain=mlm"]
    default = validate(compose_job(job, tmp_path / "a"))
    assert config_hash(default, "data", "32-true", None, "corpus") == "5954c1bfd4af"  # the committed study's
    assert "stall" not in keyed_settings(default.pretrain)
    corpus = fold_corpus_from([t for _, t in make_headlines(per_class=3)])
    base_store_key = pretrained_key(default, CPU, corpus, None)
    checked_off = validate(
        compose_job([*job, "pretrain.stall.check_at=0.25", "pretrain.stall.margin=1"], tmp_path / "b")
    )
    assert config_hash(checked_off, "data", "32-true", None, "corpus") == "5954c1bfd4af"
    assert pretrained_key(checked_off, CPU, corpus, None) == base_store_key
    hashes, store_keys = set(), set()
    for extra in (
        [],
        ["pretrain.stall.check_at=0.25"],
        ["pretrain.stall.lr_factor=0.25"],
        ["pretrain.stall.max_restarts=1"],
    ):
        on = validate(compose_job([*job, *RULE_ON, *extra], tmp_path / "c"))
        hashes.add(config_hash(on, "data", "32-true", None, "corpus"))
        store_keys.add(pretrained_key(on, CPU, corpus, None))
    assert len(hashes) == 4 and "5954c1bfd4af" not in hashes
    assert len(store_keys) == 4 and base_store_key not in store_keys


def test_the_rule_s_plateau_is_the_one_the_report_marks():
    from klue_tc.core.config import StallConfig
    from klue_tc.pretraining.frequency_plateau import PLATEAU_NATS

    assert StallConfig().margin == PLATEAU_NATS and StallConfig().check_at == 1.0 and not StallConfig().on


def test_the_pretraining_study_declares_the_rule_for_its_mlm_cells():
    from klue_tc.jobs.sweeps import compose_sweep, sweep_jobs

    jobs = sweep_jobs("study-pretrain")
    mlm = next(job for job in jobs if "pretrain=mlm" in job)
    none = next(job for job in jobs if "pretrain=none" in job)
    stall = validate(compose_sweep("study-pretrain", mlm)).pretrain.stall
    assert (stall.max_restarts, stall.check_at, stall.margin, stall.lr_factor) == (2, 1.0, 0.5, 0.5)
    scratch = validate(compose_sweep("study-pretrain", none))
    assert config_hash(scratch, "data", "32-true") == config_hash(
        validate(compose_sweep("study-pretrain", [*none, "pretrain.stall.max_restarts=0"])), "data", "32-true"
    )  # from scratch the rule changes nothing, and no key
