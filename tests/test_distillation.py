"""Distillation (distill.*): the ensemble stage writes each training title's out-of-fold ensemble
probabilities as soft labels, a student job learns from them by title, and the stage scores the
student beside the ensemble."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from klue_tc.core.errors import ConfigError, DamagedFileError
from klue_tc.data.soft_labels import SoftLabels, teacher_targets
from klue_tc.data.titles import LABEL_NAMES


def soft_labels(texts: list[str], seed: int = 0) -> SoftLabels:
    probs = np.random.default_rng(seed).dirichlet(np.ones(len(LABEL_NAMES)), len(texts)).astype(np.float32)
    return SoftLabels(texts, probs, LABEL_NAMES)


def test_soft_labels_are_found_by_normalised_title_whatever_the_order_and_copies_are_averaged(tmp_path):
    teacher = soft_labels(["코스피 상승", "환율 급등", "코스피 상승", "야구 개막"])
    path = teacher.save(tmp_path / "soft-labels.npz")
    # Another order, a subset, and a title as a Mac exports it (decomposed jamo) with spaces around it
    import unicodedata

    student = ["야구 개막", " " + unicodedata.normalize("NFD", "코스피 상승") + " "]
    targets = teacher_targets(path, student, LABEL_NAMES)
    assert np.allclose(targets.probs[0], teacher.probs[3])
    assert np.allclose(targets.probs[1], (teacher.probs[0] + teacher.probs[2]) / 2)
    with pytest.raises(ConfigError, match="no soft label for 1 of the 2 training titles"):
        teacher_targets(path, ["야구 개막", "축구 결승"], LABEL_NAMES)
    with pytest.raises(ConfigError, match="classes"):
        teacher_targets(path, student, LABEL_NAMES[::-1])
    data = bytearray(path.read_bytes())
    data[-30] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="soft-labels.npz: damaged"):
        teacher_targets(path, student, LABEL_NAMES)


def test_the_soft_loss_is_hintons_and_alpha_zero_is_the_cross_entropy_alone():
    from klue_tc.core.config import DistillConfig
    from klue_tc.training.module import TopicClassifierModule, distillation_loss

    logits = torch.randn(6, 7)
    teacher = torch.softmax(torch.randn(6, 7), -1)
    labels = torch.arange(6)
    t = 3.0
    expected = (
        t**2
        * (
            torch.softmax(teacher.log() / t, -1)
            * (torch.log_softmax(teacher.log() / t, -1) - torch.log_softmax(logits / t, -1))
        )
        .sum(1)
        .mean()
    )
    assert distillation_loss(logits, teacher, t) == pytest.approx(expected.item(), rel=1e-5)
    assert distillation_loss(teacher.log(), teacher, t) == pytest.approx(0.0, abs=1e-6)

    module = TopicClassifierModule.__new__(TopicClassifierModule)
    torch.nn.Module.__init__(module)
    module.loss = torch.nn.CrossEntropyLoss()
    batch = {"labels": labels, "soft_targets": teacher}
    hard = torch.nn.functional.cross_entropy(logits, labels)
    module.distill_cfg = None
    assert torch.equal(module.classification_loss(logits, batch), hard)
    module.distill_cfg = DistillConfig(teacher="t.npz", temperature=t, alpha=0.0)
    assert torch.equal(module.classification_loss(logits, batch), hard)
    module.distill_cfg = DistillConfig(teacher="t.npz", temperature=t, alpha=0.25)
    assert module.classification_loss(logits, batch) == pytest.approx((0.75 * hard + 0.25 * expected).item())


def test_without_a_teacher_the_results_key_has_no_distill_section(tmp_path):
    from jobs import compose_job
    from klue_tc.core.config import keyed_settings, validate
    from klue_tc.store.results import config_hash

    plain = validate(compose_job(["+experiment=transformer"], tmp_path / "a"))
    assert "distill" not in keyed_settings(plain)
    tuned = validate(compose_job(["+experiment=transformer", "distill.alpha=0.9"], tmp_path / "b"))
    assert config_hash(tuned, "d", "32-true") == config_hash(plain, "d", "32-true")  # off: no key moves
    student = validate(compose_job(["+experiment=transformer", "distill.teacher=t.npz"], tmp_path / "c"))
    assert keyed_settings(student)["distill"] == {"temperature": 2.0, "alpha": 0.5}
    assert config_hash(student, "d", "32-true", teacher="x") != config_hash(student, "d", "32-true", teacher="y")
    with pytest.raises(ConfigError, match="distill.alpha"):
        validate(compose_job(["+experiment=transformer", "distill.alpha=1.5"], tmp_path / "d"))


# --- a tiny ensemble, its soft labels, a student distilled from them -----------------------------


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny configuration trained on 2 folds, its ensemble built by the stage (soft labels written)."""
    from jobs import tiny_trained_sweep
    from klue_tc.ensemble.cli import main

    tmp = tmp_path_factory.mktemp("teacher")
    _, _, common = tiny_trained_sweep(tmp, epochs=2)
    assert main([str(tmp / "sweep"), "--no-baselines", "--no-artefact", "--no-soft-labels"]) == 0
    assert not (tmp / "sweep" / "soft-labels.npz").exists()
    assert main([str(tmp / "sweep"), "--no-baselines", "--no-artefact"]) == 0
    return tmp, common


def student_job(tmp, common, name: str, *extra: str):
    from jobs import run_in_process
    from klue_tc.store.records import RunResult

    run_dir = tmp / "students" / name
    overrides = [*common, f"results.dir={tmp / 'students' / 'results'}", "cv.folds=1", "data.limit=56", *extra]
    run_in_process(overrides, run_dir)
    return run_dir, RunResult.load(run_dir / "metrics.json")


@pytest.mark.integration
@pytest.mark.slow
def test_a_student_learns_the_ensembles_out_of_fold_probabilities_for_exactly_its_titles(teacher, monkeypatch):
    import klue_tc.training.module as module
    from klue_tc.core.config import DataConfig
    from klue_tc.data.titles import inner_split, stratified_subsample, training_titles
    from klue_tc.ensemble.stage import build_ensemble

    tmp, common = teacher
    soft = tmp / "sweep" / "soft-labels.npz"
    assert soft.is_file() and (tmp / "sweep" / "soft-labels.npz.sha256").is_file()
    ensemble = build_ensemble(tmp / "sweep", baselines=False)
    seen = []
    real = module.distillation_loss

    def spy(logits, probs, temperature):
        seen.append(probs.numpy().copy())
        return real(logits, probs, temperature)

    monkeypatch.setattr(module, "distillation_loss", spy)
    _, distilled = student_job(tmp, common, "student", f"distill.teacher={soft}", "distill.alpha=0.5")

    # The titles it trained on: a subsample of the teacher's (another order), less its inner split.
    teacher_titles = training_titles(DataConfig(path=str(tmp / "train.tsv")))
    mine = stratified_subsample(teacher_titles, 56, 42)
    fit = inner_split(mine.labels, 0.1, 42)[0]
    oof = ensemble.oof_probs()
    rows = {text: [i for i, t in enumerate(teacher_titles.texts) if t == text] for text in mine.texts}
    expected = np.stack([oof[rows[mine.texts[i]]].mean(0) for i in fit])
    given = np.concatenate(seen)[: len(fit)]  # the first epoch: each title once
    assert given.shape == expected.shape
    # Batches come shuffled: each target given is matched to one expected row, one to one.
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    distances = cdist(given, expected)
    matched = linear_sum_assignment(distances)
    assert distances[matched].max() < 1e-7
    assert distilled.folds[0].validation is not None


@pytest.mark.integration
@pytest.mark.slow
def test_alpha_zero_gives_a_normal_jobs_numbers_and_the_student_is_reported_beside_the_ensemble(teacher):
    import pandas as pd

    from klue_tc.ensemble.cli import main

    tmp, common = teacher
    soft = tmp / "sweep" / "soft-labels.npz"
    _, normal = student_job(tmp, common, "normal")
    _, hard_only = student_job(tmp, common, "alpha0", f"distill.teacher={soft}", "distill.alpha=0")
    distilled_dir, distilled = student_job(tmp, common, "student", f"distill.teacher={soft}", "distill.alpha=0.5")
    assert len({normal.config_hash, hard_only.config_hash, distilled.config_hash}) == 3
    a, b = normal.folds[0], hard_only.folds[0]
    assert (a.validation.f1, a.best_epoch, a.inner_f1) == (b.validation.f1, b.best_epoch, b.inner_f1)
    assert np.array_equal(a.predictions.validation.predicted, b.predictions.validation.predicted)
    weights_a = torch.load(a.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    weights_b = torch.load(b.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    weights_c = torch.load(distilled.folds[0].checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert not all(torch.equal(weights_a[k], weights_c[k]) for k in weights_a)  # the soft loss does train

    sweep = tmp / "sweep"
    assert main([str(sweep), "--no-baselines", "--no-artefact", "--student", str(distilled_dir)]) == 0
    table = pd.read_csv(sweep / "ensemble.csv")
    student = table[table["role"] == "student"].iloc[0]
    assert student["validation_f1"] == pytest.approx(distilled.validation.ensemble.f1, abs=1e-6)
    comparison = table[table["versus"] == "the distilled student"].iloc[0]
    ensemble_f1 = table[table["role"] == "ensemble"].iloc[0]["validation_f1"]
    assert comparison["difference"] == pytest.approx(ensemble_f1 - student["validation_f1"], abs=1e-9)
    markdown = (sweep / "ensemble.md").read_text(encoding="utf-8")
    assert "## The distilled student" in markdown and "within 1 point" in markdown


def test_the_distill_sweep_trains_the_recommended_design_once_on_all_of_train_from_the_ensembles_soft_labels():
    from test_sweeps import sweep_jobs

    from klue_tc.core.config import validate
    from klue_tc.jobs.sweeps import compose_sweep

    jobs = sweep_jobs("distill")
    assert len(jobs) == 1
    run = validate(compose_sweep("distill", jobs[0]))
    design = (run.experiment, run.encoder.ln.value, run.encoder.layers, run.tokenizer.name, run.pretrain.objective)
    assert design == ("transformer", "post", 3, "sentencepiece", "mlm") and run.pretrain.epochs == 24
    assert run.augment.p > 0  # recipe=regularized
    assert (run.cv.folds, run.data.limit, run.distill.teacher, run.distill.alpha) == (
        1,
        None,
        "docs/ensemble/soft-labels.npz",
        0.5,
    )
    assert not run.results.dir.startswith("docs/ensemble/")  # never read as one of the ensemble's members


def test_the_student_starts_from_the_ensemble_members_encoder_of_its_design(tmp_path):
    """The distill sweep's one job reads the corpus the ensemble's member of its design pretrained on
    (all of train less the validation titles) from that sweep's store, with the same key: it finds
    that encoder instead of pretraining its own."""
    from test_sweeps import sweep_jobs

    from conftest import make_headlines
    from klue_tc.core.config import validate
    from klue_tc.core.hardware import Device
    from klue_tc.data.corpus import PretrainSources, fold_corpus
    from klue_tc.data.titles import LabelledTitles
    from klue_tc.jobs.sweeps import compose_sweep
    from klue_tc.pretraining.encoder_keys import pretrained_key

    student = validate(compose_sweep("distill", sweep_jobs("distill")[0]))
    member = next(
        validate(compose_sweep("ensemble", job))
        for job in sweep_jobs("ensemble")
        if "+ensemble_member=transformer_sentencepiece" in job and "cv.fold=0" in job
    )
    assert student.pretrain.store_dir(tmp_path) == member.pretrain.store_dir(tmp_path)
    rows = [text for _, text in make_headlines(per_class=5)]
    titles = LabelledTitles(rows, np.arange(len(rows)) % 7, "train")
    sources = PretrainSources(rows, [], rows[:3])  # three titles also in the validation file
    device = Device(gpu=False, precision="32-true", name="cpu")
    held_out = np.arange(0, len(rows), 5)
    member_corpus = fold_corpus(member, sources, titles, held_out)
    student_corpus = fold_corpus(student, sources, titles, np.array([], dtype=np.int64))
    assert pretrained_key(student, device, student_corpus, None) == pretrained_key(member, device, member_corpus, None)
