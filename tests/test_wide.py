"""The wide path (wide=nbsvm): NB-SVM's n-grams beside the encoder in one model. Off, no results key
or code version moves; on, it starts as the NB-SVM the baseline fits, reads the titles it trains on
alone, trains, resumes to the last bit, and is served by predict from a moved run directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TINY_MODEL, make_headlines, write_tsv
from jobs import compose_job, run_in_process
from klue_tc.core import interrupts
from klue_tc.core.config import AugmentConfig, OptimConfig, keyed_settings, validate
from klue_tc.core.registry import ENCODERS, HEADS
from klue_tc.data.titles import LABEL_NAMES, LabelledTitles, inner_split
from klue_tc.store import fingerprint
from klue_tc.store.fingerprint import Choices, code_version
from klue_tc.store.results import config_hash

WIDE = "wide=nbsvm"
STUDY_JOB = ["+experiment=transformer", "data.limit=10000", "cv.folds=3", "pretrain=mlm"]


def labelled(rows: list[tuple[str, str]]) -> LabelledTitles:
    return LabelledTitles(
        [t for _, t in rows], np.array([LABEL_NAMES.index(label) for label, _ in rows]), "test", tuple(LABEL_NAMES)
    )


# --- off: nothing moves --------------------------------------------------------------------------


def test_off_by_default_no_results_key_or_code_version_moves_and_on_both_do(tmp_path):
    default = validate(compose_job(STUDY_JOB, tmp_path / "a"))
    assert not default.wide.on and "wide" not in keyed_settings(default)
    assert config_hash(default, "data", "32-true", None, "corpus") == "5954c1bfd4af"  # the committed study's
    tuned_off = validate(compose_job([*STUDY_JOB, "wide.dropout=0.5", "wide.svm_c=0.01", "wide.svm_beta=1"], tmp_path))
    assert config_hash(tuned_off, "data", "32-true", None, "corpus") == "5954c1bfd4af"
    without = fingerprint.version_of(Choices("sentencepiece", "transformer", "cls", "mlm"))
    assert code_version(default) == code_version(tuned_off) == without

    keys = set()
    settings = (["wide.dropout=0.3"], ["wide.weight_decay=0.1"], ["wide.lr=0.01"], ["wide.svm_c=1", "wide.svm_beta=1"])
    for extra in ([], *settings):
        on = validate(compose_job([*STUDY_JOB, WIDE, *extra], tmp_path / "on"))
        assert keyed_settings(on)["wide"]["name"] == "nbsvm"
        keys.add(config_hash(on, "data", "32-true", None, "corpus"))
    assert len(keys) == 5 and "5954c1bfd4af" not in keys
    on = validate(compose_job([*STUDY_JOB, WIDE], tmp_path / "on"))
    assert code_version(on).fingerprint != code_version(default).fingerprint
    assert code_version(on).shared == code_version(default).shared  # the code every configuration runs


def test_the_wide_modules_are_in_the_code_version_only_while_it_is_on():
    def names(choices: Choices) -> set[str]:
        return {str(p.relative_to(fingerprint.PACKAGE_ROOT)) for p in fingerprint.numeric_sources(choices)}

    wide = {"data/ngrams.py", "models/wide.py", "training/wide.py", "training/baseline.py", "training/nbsvm.py"}
    assert not names(Choices("mecab", "transformer", "cls")) & wide
    assert wide <= names(Choices("mecab", "transformer", "cls", None, "nbsvm"))
    assert fingerprint.unplaced_modules() == []


def test_a_pretrained_encoder_is_the_same_with_the_wide_path_on_or_off(tmp_path):
    from test_pretraining import CPU, fold_corpus_from

    from klue_tc.pretraining.encoder_keys import pretrained_key

    corpus = fold_corpus_from([t for _, t in make_headlines(per_class=3)])
    off, on = (validate(compose_job([*STUDY_JOB, *extra], tmp_path / "x")) for extra in ([], [WIDE]))
    assert pretrained_key(off, CPU, corpus, None) == pretrained_key(on, CPU, corpus, None)


@pytest.mark.parametrize(
    "setting, message",
    [
        ("wide=nbsv", "unknown choice wide=nbsv"),
        ("wide.dropout=1.5", "wide.dropout"),
        ("wide.svm_c=0.01", "wide.svm_c and wide.svm_beta go together"),
    ],
)
def test_a_bad_wide_setting_is_one_line(tmp_path, setting, message):
    from klue_tc.core.errors import ConfigError

    if setting.startswith("wide="):
        from hydra.errors import MissingConfigException

        from klue_tc.jobs.cli_errors import one_line

        with pytest.raises(MissingConfigException) as err:
            compose_job(["+experiment=transformer", setting], tmp_path)
        assert message in one_line(err.value)
        return
    with pytest.raises(ConfigError, match=message):
        validate(compose_job(["+experiment=transformer", WIDE, setting], tmp_path))


# --- on: the n-grams and the model at its start -----------------------------------------------------


def tiny_wide_module(features):
    from klue_tc.training.module import _plain
    from klue_tc.training.wide import WideTopicClassifierModule

    encoder = ENCODERS.config_for("transformer", d_model=32, heads=2, layers=1)
    head = HEADS.config_for("cls", hidden=32)
    module = WideTopicClassifierModule(
        60,
        {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4},
        _plain(encoder),
        _plain(head),
        _plain(OptimConfig()),
        _plain(AugmentConfig()),
        list(LABEL_NAMES),
        {"features": features.size, "dropout": 0.1, "weight_decay": 0.01, "lr": None},
    )
    module.model.wide.start(features.ratios, features.svm_coef, features.intercept)
    return module.eval()


def test_the_model_at_its_start_decides_as_sklearns_nbsvm_and_its_files_keep_it(tmp_path):
    """Trained on the fold's titles less the inner split with the setting the inner split chose, the
    baseline's NB-SVM pipeline and the whole model at its first step (encoder and head included, the
    head's last layer at zero) give every title the same class; written and read back, the same."""
    from klue_tc.core.config import WideConfig
    from klue_tc.training.baseline import NB_SVM
    from klue_tc.training.wide import fit_ngram_features
    from klue_tc.training.wide_files import load_ngram_features, save_ngram_features

    train, unseen = labelled(make_headlines(per_class=30)), labelled(make_headlines(per_class=10, seed=3))
    features = fit_ngram_features(train.texts, train.labels, 7, WideConfig(name="nbsvm"), 0.1, 42)
    fit, _ = inner_split(train.labels, 0.1, 42)
    sklearn = NB_SVM.pipeline(tuple(features.setting)).fit([train.texts[i] for i in fit], train.labels[fit])
    assert features.vectorizer.vocabulary_ == sklearn.steps[0][1].vocabulary_

    module = tiny_wide_module(features)
    bags = features.rows(unseen.texts).bags(np.arange(len(unseen)))
    token_ids = torch.randint(5, 60, (len(unseen), 9))
    with torch.no_grad():
        logits = module(token_ids, bags).numpy()
    np.testing.assert_allclose(logits, sklearn.decision_function(unseen.texts), atol=1e-4)
    assert (logits.argmax(1) == sklearn.predict(unseen.texts)).all()

    save_ngram_features(features, tmp_path)
    again = load_ngram_features(tmp_path)
    assert again.setting == features.setting and again.size == features.size
    np.testing.assert_array_equal(again.decision_function(unseen.texts), features.decision_function(unseen.texts))


def test_a_module_without_the_titles_ngrams_is_an_error_not_the_encoder_alone():
    from klue_tc.core.config import WideConfig
    from klue_tc.training.wide import fit_ngram_features

    train = labelled(make_headlines(per_class=10))
    module = tiny_wide_module(fit_ngram_features(train.texts, train.labels, 7, WideConfig(name="nbsvm"), 0.1, 42))
    with pytest.raises(RuntimeError, match="n-grams"):
        module(torch.randint(5, 60, (2, 9)))


PLANTED = {"held_out": "뷁뷁", "inner": "똠똠", "validation": "퓽퓽", "trained": "햏햏"}


def test_the_ngrams_never_read_a_held_out_inner_or_validation_title(tmp_path):
    """Words planted in each kind of title: the one in the titles the model trains on is in the
    vocabulary (the check can fail), those in the held-out fold, the inner split that chooses the
    epoch and the validation file are not; with cv.folds=1 the validation titles are the scored ones."""
    from klue_tc.jobs.folds import job_folds
    from klue_tc.training.job_context import JobInputs
    from klue_tc.training.wide import fold_ngrams

    def planted(texts, rows, word):
        for i in rows:
            texts[i] = f"{texts[i]} {word}"

    for folds in (2, 1):
        train, validation = labelled(make_headlines(per_class=12)), labelled(make_headlines(per_class=4, seed=1))
        run = validate(compose_job(["+experiment=transformer", WIDE, f"cv.folds={folds}"], tmp_path / str(folds)))
        fold = job_folds(run, JobInputs(train, validation, None))[0]
        texts = list(fold.titles.texts)
        fit, inner = inner_split(fold.titles.labels[fold.train_idx], run.cv.inner_fraction, run.cv.seed)
        planted(texts, fold.train_idx[fit][:4], PLANTED["trained"])
        planted(texts, fold.train_idx[inner], PLANTED["inner"])
        planted(texts, fold.scored_idx, PLANTED["held_out" if folds > 1 else "validation"])
        titles = LabelledTitles(texts, fold.titles.labels, "test", fold.titles.label_names)
        features, ngrams = fold_ngrams(run, type(fold)(titles, fold.train_idx, fold.scored_idx, fold.held_out))
        vocabulary = features.vectorizer.vocabulary_
        assert PLANTED["trained"][0] in vocabulary and " 햏햏" in vocabulary
        for word in ("inner", "held_out", "validation"):
            assert not any(PLANTED[word][0] in term for term in vocabulary), word
        assert (len(ngrams.train), len(ngrams.inner), len(ngrams.val)) == (len(fit), len(inner), len(fold.scored_idx))


# --- on: a tiny job trains, resumes and is served ----------------------------------------------------


def wide_job(tmp_path: Path, data: Path, validation: Path, *extra: str) -> list[str]:
    return [
        "+experiment=transformer",
        WIDE,
        f"data.path={data}",
        f"data.validation_path={validation}",
        f"results.dir={tmp_path / 'results'}",
        "logger=none",
        "trainer.progress_bar=none",
        *TINY_MODEL,
        "encoder.layers=1",
        "cv.folds=2",
        "cv.fold=0",
        "trainer.max_epochs=2",
        "trainer.early_stopping_patience=5",
        "augment.p=0.3",
        "augment.min_len=1",
        *extra,
    ]


@pytest.fixture
def fresh_signal_state(monkeypatch):
    monkeypatch.setattr(interrupts._state, "signum", None)
    monkeypatch.setattr(interrupts._state, "at_step_boundary", False)


@pytest.mark.integration
def test_a_tiny_wide_job_trains_resumes_to_the_last_bit_and_predicts_from_a_moved_run(
    tmp_path, fresh_signal_state, monkeypatch, capsys
):
    """SIGTERM in epoch 2: the rerun trains the rest and ends with the weights, to the last bit, of a
    run never stopped; the run directory, moved, is served by predict with the n-grams beside each
    fold's tokenizer, giving the validation titles the probabilities the fold recorded."""
    from klue_tc.predict import main as predict
    from klue_tc.store.results import ResultsStore
    from klue_tc.training import callbacks

    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14))
    validation = write_tsv(tmp_path / "valid.tsv", make_headlines(per_class=4, seed=1))
    args = wide_job(tmp_path, data, validation)
    real_start, signalled = callbacks.FoldMonitor.on_train_batch_start, []

    def signal_in_epoch_2(self, trainer, pl_module, batch, batch_idx):
        if (trainer.current_epoch, batch_idx) == (1, 1) and not signalled:
            signalled.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        real_start(self, trainer, pl_module, batch, batch_idx)

    monkeypatch.setattr(callbacks.FoldMonitor, "on_train_batch_start", signal_in_epoch_2)
    with pytest.raises(interrupts.JobInterrupted), interrupts.stop_on_signal():
        run_in_process(args, tmp_path / "first")
    interrupts._state.signum = None  # a new process
    run_in_process(args, tmp_path / "second")
    run_in_process([*args, f"results.dir={tmp_path / 'straight'}"], tmp_path / "straight")
    resumed, straight = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("second", "straight"))
    assert resumed["folds"][0]["sittings"] == 2 and straight["folds"][0]["sittings"] == 1
    assert resumed["folds"][0]["f1"] == straight["folds"][0]["f1"] and "validation_f1" in resumed
    weights = [torch.load(tmp_path / r / "fold0" / "best.ckpt")["state_dict"] for r in ("second", "straight")]
    assert weights[0].keys() == weights[1].keys() and "model.wide.weights.weight" in weights[0]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])

    moved = tmp_path / "elsewhere" / "run"
    moved.parent.mkdir()
    shutil.move(tmp_path / "second", moved)
    titles = [t for _, t in make_headlines(per_class=4, seed=1)]
    (tmp_path / "titles.txt").write_text("\n".join(titles) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert predict([str(moved), "--file", str(tmp_path / "titles.txt"), "--json"]) == 0
    served = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (record_path,) = (tmp_path / "results").glob("*/fold0.json")
    recorded = ResultsStore.load(record_path).predictions.validation
    assert [row["label"] for row in served] == [LABEL_NAMES[k] for k in recorded.predicted]
    np.testing.assert_allclose([row["probability"] for row in served], recorded.probs.max(1), atol=2e-3)
    assert (moved / "fold0" / "tokenizer" / "wide.json").is_file()
