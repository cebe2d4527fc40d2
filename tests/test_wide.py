"""The wide path (wide=nbsvm): NB-SVM's n-grams beside the encoder in one model. Off, no results key
or code version moves; on, it starts as the NB-SVM the baseline fits (its scores divided by a
temperature chosen on the inner split, where asked), reads the titles it trains on alone, is kept
where no trained epoch beats it on the inner split, stays frozen for its first epochs where asked,
trains, resumes to the last bit, is served by predict from a moved run directory, and is named by
the records and the report."""

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
    tuned = ["wide.dropout=0.5", "wide.svm_c=0.01", "wide.svm_beta=1", "wide.freeze_epochs=2", "wide.temperature=null"]
    tuned_off = validate(compose_job([*STUDY_JOB, *tuned], tmp_path))
    assert config_hash(tuned_off, "data", "32-true", None, "corpus") == "5954c1bfd4af"
    without = fingerprint.version_of(Choices("sentencepiece", "transformer", "cls", "mlm"))
    assert code_version(default) == code_version(tuned_off) == without

    keys = set()
    settings = (
        ["wide.dropout=0.3"],
        ["wide.weight_decay=0.1"],
        ["wide.lr=0.01"],
        ["wide.svm_c=1", "wide.svm_beta=1"],
        ["wide.freeze_epochs=1"],
        ["wide.temperature=null"],
        ["wide.temperature=2"],
    )
    for extra in ([], *settings):
        on = validate(compose_job([*STUDY_JOB, WIDE, *extra], tmp_path / "on"))
        assert keyed_settings(on)["wide"]["name"] == "nbsvm"
        keys.add(config_hash(on, "data", "32-true", None, "corpus"))
    assert len(keys) == 8 and "5954c1bfd4af" not in keys
    on = validate(compose_job([*STUDY_JOB, WIDE], tmp_path / "on"))
    assert code_version(on).fingerprint != code_version(default).fingerprint
    assert code_version(on).shared == code_version(default).shared  # the code every configuration runs


def test_the_wide_modules_are_in_the_code_version_only_while_it_is_on():
    def names(choices: Choices) -> set[str]:
        return {str(p.relative_to(fingerprint.PACKAGE_ROOT)) for p in fingerprint.numeric_sources(choices)}

    wide = {
        "data/ngrams.py",
        "models/wide.py",
        "training/wide.py",
        "training/baseline.py",
        "training/nbsvm.py",
        "training/calibration.py",
    }
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
        ("wide.freeze_epochs=-1", "wide.freeze_epochs"),
        ("wide.temperature=0", "wide.temperature must be > 0"),
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
    module.model.wide.start(features.ratios, features.svm_coef, features.intercept, features.temperature)
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


def test_the_starting_temperature_is_chosen_on_the_inner_split_and_divides_nbsvms_scores(tmp_path):
    """wide.temperature=null: the temperature of least log-loss of the starting NB-SVM's scores on
    the inner split (the split that chose its setting), by the ensemble's own calibration code; the
    NB-SVM is the same as with the default (1: its scores as they are), the model at its start
    gives its scores divided by it (the same classes), and the files keep it."""
    from klue_tc.core.config import WideConfig
    from klue_tc.training.calibration import fit_temperature
    from klue_tc.training.wide import fit_ngram_features
    from klue_tc.training.wide_files import load_ngram_features, save_ngram_features

    train, unseen = labelled(make_headlines(per_class=30)), labelled(make_headlines(per_class=10, seed=3))
    plain = fit_ngram_features(train.texts, train.labels, 7, WideConfig(name="nbsvm"), 0.1, 42)
    chosen = fit_ngram_features(train.texts, train.labels, 7, WideConfig(name="nbsvm", temperature=None), 0.1, 42)
    assert plain.temperature == 1.0 and chosen.setting == plain.setting
    np.testing.assert_allclose(chosen.svm_coef, plain.svm_coef, rtol=1e-3)  # the SVM's own shuffles aside
    fit, inner = inner_split(train.labels, 0.1, 42)

    def least_log_loss(rows):
        return fit_temperature(chosen.decision_function([train.texts[i] for i in rows]), train.labels[rows])

    assert chosen.temperature == least_log_loss(inner) and chosen.temperature != pytest.approx(1.0)
    assert least_log_loss(fit) != pytest.approx(chosen.temperature)  # the titles NB-SVM fitted would give another
    fixed = fit_ngram_features(train.texts, train.labels, 7, WideConfig(name="nbsvm", temperature=2.5), 0.1, 42)
    assert fixed.temperature == 2.5

    bags = chosen.rows(unseen.texts).bags(np.arange(len(unseen)))
    with torch.no_grad():
        logits = tiny_wide_module(chosen)(torch.randint(5, 60, (len(unseen), 9)), bags).numpy()
    scores = chosen.decision_function(unseen.texts)
    np.testing.assert_allclose(logits, scores / chosen.temperature, rtol=1e-5, atol=1e-4)
    assert (logits.argmax(1) == scores.argmax(1)).all()
    save_ngram_features(chosen, tmp_path)
    assert load_ngram_features(tmp_path).temperature == chosen.temperature


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


# --- on: the start as a candidate, the frozen path ---------------------------------------------------


def tiny_wide_data(tmp_path: Path) -> tuple[Path, Path]:
    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14))
    return data, write_tsv(tmp_path / "valid.tsv", make_headlines(per_class=4, seed=1))


def the_fold(tmp_path: Path, run: str = "run"):
    from klue_tc.store.results import ResultsStore

    (record_path,) = (tmp_path / "results").glob("*/fold0.json")
    return ResultsStore.load(record_path), json.loads((tmp_path / run / "metrics.json").read_text())


@pytest.mark.integration
def test_the_start_is_kept_where_no_trained_epoch_beats_it_on_the_inner_split(tmp_path):
    """A learning rate so high that training wrecks the model: the model before its first step,
    scored as epoch 0 (the first point of the learning curve), stays the fold's model. Its record
    says epoch 0 and the start's inner-split scores; the checkpoint holds the start's weights (the
    wide path NB-SVM's, the head's last layer at zero), and the fold is scored with them: NB-SVM's
    classes for the held-out titles."""
    from klue_tc.training.wide_files import load_ngram_features

    data, validation = tiny_wide_data(tmp_path)
    run_in_process(wide_job(tmp_path, data, validation, "optim.lr=3", "trainer.max_epochs=2"), tmp_path / "run")
    record, metrics = the_fold(tmp_path)
    curve = record.learning_curve
    assert [p.epoch for p in curve] == [0, 1, 2] and record.epochs_run == 2
    assert max(p.inner_f1 for p in curve[1:]) < curve[0].inner_f1  # training cannot beat it (the check can fail)
    assert record.best_epoch == 0 and metrics["folds"][0]["best_epoch"] == 0
    assert (record.inner_f1, record.inner_accuracy) == (curve[0].inner_f1, curve[0].inner_accuracy)
    assert record.f1 == pytest.approx(curve[0].f1, abs=1e-6)  # scored after fit as the check scored it

    weights = torch.load(tmp_path / "run" / "fold0" / "best.ckpt")["state_dict"]
    features = load_ngram_features(tmp_path / "run" / "fold0" / "tokenizer")
    np.testing.assert_array_equal(weights["model.wide.weights.weight"].numpy(), features.svm_coef.T.astype(np.float32))
    np.testing.assert_array_equal(weights["model.wide.bias"].numpy(), features.intercept.astype(np.float32))
    last = [k for k in weights if k.startswith("model.deep.head") and k.endswith("weight")][-1]
    assert not weights[last].any()
    titles = labelled(make_headlines(per_class=14))
    held_out = [titles.texts[i] for i in record.predictions.scored.index]
    assert (record.predictions.scored.predicted == features.decision_function(held_out).argmax(1)).all()


@pytest.mark.integration
def test_a_trained_epoch_that_beats_the_start_is_chosen(tmp_path, monkeypatch):
    """A planted bad start (the wide path's weights at zero, one class's bias ahead: one class for
    every title): the epochs that beat it on the inner split are chosen among, as without it."""
    from klue_tc.training import wide

    fitted = wide.fit_ngram_features

    def one_class(*args, **kwargs):
        features = fitted(*args, **kwargs)
        features.svm_coef[:] = 0.0
        features.intercept[:] = np.eye(len(features.intercept))[0] * 0.5
        return features

    monkeypatch.setattr(wide, "fit_ngram_features", one_class)
    data, validation = tiny_wide_data(tmp_path)
    run_in_process(wide_job(tmp_path, data, validation, "trainer.max_epochs=4", "optim.lr=1e-2"), tmp_path / "run")
    record, _ = the_fold(tmp_path)
    curve = record.learning_curve
    assert curve[0].epoch == 0 and curve[0].inner_f1 < 0.1  # one class for every title
    best = max(curve, key=lambda p: (p.inner_f1, -p.epoch))  # the first of equal epochs
    assert best.epoch >= 1 and record.best_epoch == best.epoch and record.inner_f1 == best.inner_f1
    trained = torch.load(tmp_path / "run" / "fold0" / "best.ckpt")["state_dict"]["model.wide.weights.weight"]
    assert trained.any()  # not the start's


@pytest.mark.integration
def test_the_frozen_wide_path_keeps_its_start_for_its_epochs_and_trains_after(tmp_path, monkeypatch):
    """wide.freeze_epochs=1: after epoch 1 the wide path's weights and bias are the start's, bit
    for bit, while the encoder has trained; after epoch 2 they have trained too. Without it they
    train from the first epoch."""
    from klue_tc.training import callbacks

    seen: list[dict] = []

    def keep(self, trainer, pl_module):
        wide, deep = pl_module.model.wide, pl_module.model.deep
        embedding = next(p for n, p in deep.named_parameters() if "embeddings" in n)
        named = (("w", wide.weights.weight), ("b", wide.bias), ("e", embedding))
        seen.append({n: p.detach().clone() for n, p in named})

    monkeypatch.setattr(callbacks.FoldMonitor, "on_train_start", keep, raising=False)
    monkeypatch.setattr(callbacks.FoldMonitor, "on_train_epoch_end", keep, raising=False)
    data, validation = tiny_wide_data(tmp_path)
    for name, extra in (("frozen", ["wide.freeze_epochs=1"]), ("free", [])):
        seen.clear()
        args = wide_job(tmp_path / name, data, validation, "trainer.max_epochs=2", *extra)
        run_in_process(args, tmp_path / name / "run")
        start, first, second = seen
        assert not torch.equal(first["e"], start["e"])  # the encoder trains in every case
        if name == "frozen":
            assert torch.equal(first["w"], start["w"]) and torch.equal(first["b"], start["b"])
        else:
            assert not torch.equal(first["w"], start["w"]) and not torch.equal(first["b"], start["b"])
        assert not torch.equal(second["w"], first["w"]) and not torch.equal(second["b"], first["b"])


# --- the records and the report name the wide path -----------------------------------------------------


def test_records_and_report_labels_name_the_wide_path_and_leave_the_others_as_they_were(tmp_path):
    """Describe.wide is in a record's JSON and metrics.json only where the path is on (the others'
    bytes are as before); the report reads the head with the path beside it ("cls + nbsvm"), so a
    configuration with it and one without are two cells with two labels."""
    from dataclasses import replace

    from klue_tc.report.labels import configuration_label
    from klue_tc.report.loading import fold_frame
    from klue_tc.report.plots import row_labels
    from klue_tc.report.sections import configurations
    from klue_tc.store.records import Describe, FoldResult, RunResult

    off = Describe("transformer", "transformer", "post", 3, "cls", "sentencepiece", "mlm")
    on = replace(off, wide="nbsvm")
    assert "wide" not in off.to_dict() and on.to_dict()["wide"] == "nbsvm"
    assert configuration_label(off) == "sentencepiece / transformer / post / L3 / mlm"
    assert configuration_label(on) == "sentencepiece / transformer / post / cls + nbsvm / L3 / mlm"
    assert configuration_label(on, exact=True) == configuration_label(on)

    def fold(describe, key):
        return FoldResult(
            fold=0, f1=0.8, accuracy=0.8, best_epoch=0, epochs_run=2, train_samples_per_s=1.0,
            time_to_first_step_s=0.0, train_seconds=1.0, train_size=10, val_size=5, checkpoint=None,
            tokenizer_dir="", describe=describe, config_hash=key,
        )  # fmt: skip

    for describe, key in ((off, "offkey"), (on, "onkey")):
        record = fold(describe, key)
        assert ("wide" in record.to_dict()["describe"]) == (describe is on)
        assert FoldResult.from_dict(record.to_dict()).describe == describe
        run = RunResult(describe, key, "s", 2, [record, replace(record, fold=1)])
        assert ("wide" in run.to_dict()) == (describe is on)
        assert RunResult.from_dict(run.to_dict()).describe == describe
        (tmp_path / key).mkdir()
        run.save(tmp_path / key / "metrics.json")

    frame = fold_frame(tmp_path)
    assert sorted(set(frame["head"])) == ["cls", "cls + nbsvm"] and "wide" not in frame
    assert sorted(row_labels(frame.drop_duplicates("config_hash"))) == [
        "transformer / post / cls",
        "transformer / post / cls + nbsvm",
    ]
    designs = configurations([fold(off, "offkey"), fold(on, "onkey")])
    assert dict(designs["label"]) == {
        "offkey": "sentencepiece / transformer / post / cls / L3",
        "onkey": "sentencepiece / transformer / post / cls + nbsvm / L3",
    }
    # With the path on alone, the label still shows it.
    assert configurations([fold(on, "onkey")]).at["onkey", "label"].endswith("cls + nbsvm / L3")
