"""A run a user can trust: fail fast, never serve stale results, self-contained run directories,
files a team can read (a new encoder in one module and one YAML: test_variants.py)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import REPO, TINY_MODEL, make_headlines, write_tsv
from jobs import run_cli, run_in_process
from klue_tc.core.config import validate
from klue_tc.core.registry import ENCODERS, OBJECTIVES
from klue_tc.store import fingerprint
from klue_tc.store.fingerprint import Choices
from klue_tc.store.records import FROM_SCRATCH, RECORD_SCHEMA, SELECTED_ON_SCORED_FOLD, CodeVersion, FoldResult
from klue_tc.store.results import ResultsStore


def tiny_job(tmp_path: Path, data: Path, *extra: str) -> list[str]:
    return [
        "+experiment=transformer",
        f"data.path={data}",
        "cv.folds=2",
        "trainer.max_epochs=1",
        "encoder.layers=1",
        f"results.dir={tmp_path / 'results'}",
        "logger=none",
        "trainer.progress_bar=none",
        *TINY_MODEL,
        *extra,
    ]


# --- the code fingerprint ---------------------------------------------------------------------------

SCRATCH = [Choices("mecab", encoder, "cls") for encoder in ENCODERS.names()]
PRETRAINED = [Choices("mecab", "transformer", "cls", objective) for objective in OBJECTIVES.names()]


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    root = tmp_path / "klue_tc"
    shutil.copytree(fingerprint.PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "resources"))
    return root


def versions_of(root: Path) -> dict[Choices, str]:
    """The code version of each configuration, read from the package at `root`."""
    return {c: fingerprint.source_fingerprint(fingerprint.numeric_sources(c, root)) for c in SCRATCH + PRETRAINED}


def changed(before: dict[Choices, str], after: dict[Choices, str]) -> set[Choices]:
    return {c for c in before if before[c] != after[c]}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_the_code_version_covers_the_numeric_modules_and_the_chosen_variants_only():
    def names(choices: Choices) -> set[str]:
        return {str(p.relative_to(fingerprint.PACKAGE_ROOT)) for p in fingerprint.numeric_sources(choices)}

    cnn = names(Choices("mecab", "cnn", "cls"))
    assert {
        "data/titles.py",
        "training/fold.py",
        "training/module.py",
        "models/blocks.py",
        "tokenizers/mecab.py",
    } <= cnn
    assert {"models/encoders/cnn.py", "models/encoders/transformer.py"} <= cnn  # cnn's config extends it
    elsewhere = {
        "jobs/run.py",
        "report/loading.py",
        "jobs/cli_errors.py",
        "core/files.py",
        "core/config.py",
        "store/fingerprint.py",
    }
    other_variants = {"models/encoders/trans_blstm.py", "tokenizers/sentencepiece.py", "pretraining/objectives/mlm.py"}
    assert not cnn & (elsewhere | other_variants | {"pretraining/pretrain.py", "data/corpus.py"})
    electra = names(Choices("mecab", "trans_blstm", "blstm", "electra"))
    assert {
        "pretraining/pretrain.py",
        "pretraining/objectives/electra.py",
        "pretraining/replaced_token_detection.py",
    } <= electra
    assert "models/encoders/transformer.py" in electra  # its generator is a Transformer
    assert "pretraining/objectives/mlm.py" not in electra
    assert fingerprint.unplaced_modules() == []


def test_log_lines_messages_the_report_and_other_variants_keep_every_code_version(package_copy: Path):
    before = versions_of(package_copy)
    training, data = package_copy / "training" / "fold.py", package_copy / "data" / "titles.py"
    edit(training, '"fold %d diverged: %s; its record', '"fold %d stopped: its loss diverged (%s); its record')
    edit(training, "    diverged = fit(", '    log.info("fold %d: training", fold)\n    diverged = fit(')
    edit(data, 'f"{name}: damaged {codec.upper()} text at byte', 'f"{name}: broken {codec.upper()} text at byte')
    edit(package_copy / "report" / "loading.py", "def fold_frame", "def fold_frame_renamed")
    edit(package_copy / "jobs" / "cli_errors.py", "did you mean", "perhaps")
    edit(package_copy / "models" / "blocks.py", '"""Sub-layers of the encoder', '"""The sub-layers of the encoder')
    edit(package_copy / "models" / "blocks.py", "# On CPU, SDPA's", "#   On CPU, SDPA's")
    assert versions_of(package_copy) == before

    edit(
        package_copy / "models" / "encoders" / "trans_blstm.py",
        "BLSTMSublayer(cfg.d_model)",
        "BLSTMSublayer(cfg.d_model * 2)",
    )
    assert changed(before, versions_of(package_copy)) == {Choices("mecab", "trans_blstm", "cls")}
    before = versions_of(package_copy)
    edit(package_copy / "pretraining" / "pretrain.py", "CLIP_NORM = 1.0", "CLIP_NORM = 0.5")
    assert changed(before, versions_of(package_copy)) == set(PRETRAINED)  # from scratch: no pretraining ran


def test_changing_a_loss_changes_every_code_version(package_copy: Path):
    before = versions_of(package_copy)
    edit(
        package_copy / "training" / "module.py",
        "loss = self.loss(logits, batch",
        "loss = 1.01 * self.loss(logits, batch",
    )
    assert changed(before, versions_of(package_copy)) == set(before)


def test_every_configuration_keeps_the_shared_code_beside_its_own_version(package_copy: Path, tmp_path: Path):
    """Configurations of other variants differ in their code version by design; the numeric code they
    all run has one fingerprint, which a saved record keeps beside its version. An edit to a variant
    leaves it, an edit to the shared code moves it; a record of older code, which lacks it, still
    counts for the code that has it."""
    versions = [fingerprint.version_of(c) for c in SCRATCH + PRETRAINED]
    assert len({v.fingerprint for v in versions}) > 1
    assert {v.shared for v in versions} == {fingerprint.shared_fingerprint()}
    assert fingerprint.shared_fingerprint(package_copy) == fingerprint.shared_fingerprint()
    edit(package_copy / "models" / "encoders" / "trans_blstm.py", "BLSTMSublayer(cfg.d_model)", "BLSTMSublayer(2)")
    assert fingerprint.shared_fingerprint(package_copy) == fingerprint.shared_fingerprint()
    edit(package_copy / "training" / "module.py", "loss = self.loss(logits,", "loss = 2 * self.loss(logits,")
    assert fingerprint.shared_fingerprint(package_copy) != fingerprint.shared_fingerprint()

    (path,) = sorted((REPO / "docs" / "study-pretrain" / "results").glob("*/fold1.json"))[:1]
    older = FoldResult.load(path)
    assert older.code.shared is None
    made_now = CodeVersion(older.code.fingerprint, older.code.versions, fingerprint.shared_fingerprint())
    assert fingerprint.counts_for(older.code, made_now)
    older.code = made_now
    older.save(tmp_path / "fold1.json")
    saved = json.loads((tmp_path / "fold1.json").read_text())
    assert saved["shared_code"] == made_now.shared and set(saved["code"]) == {"fingerprint", "versions"}
    assert FoldResult.load(tmp_path / "fold1.json").code.shared == made_now.shared


def test_a_module_moved_or_its_imports_rewritten_keeps_every_code_version(package_copy: Path, tmp_path: Path):
    before = versions_of(package_copy)
    edit(
        package_copy / "training" / "module.py",
        "from klue_tc.models.schedule import lr_lambda, warmup_steps",
        "import klue_tc.models.schedule\nfrom klue_tc.models.schedule import lr_lambda\n"
        "from klue_tc.models.schedule import warmup_steps",
    )
    assert versions_of(package_copy) == before

    choice = Choices("mecab", "transformer", "cls", "electra")
    files = fingerprint.numeric_sources(choice, package_copy)
    moved = []
    for number, path in enumerate(reversed(files)):  # each in a folder of its own, listed in another order
        moved.append(tmp_path / "moved" / f"room{number}" / path.name)
        moved[-1].parent.mkdir(parents=True)
        shutil.copy(path, moved[-1])
    assert fingerprint.source_fingerprint(moved) == before[choice]


def test_a_module_the_numeric_code_imports_must_be_placed(package_copy: Path):
    (package_copy / "smoothing.py").write_text("FACTOR = 1.0\n")
    edit(
        package_copy / "training" / "module.py",
        "from klue_tc.pretraining.masking import",
        "from klue_tc.smoothing import FACTOR\nfrom klue_tc.pretraining.masking import",
    )
    assert fingerprint.unplaced_modules(package_copy) == ["smoothing.py"]


def test_a_type_only_import_is_not_followed_into_a_variants_code(package_copy: Path):
    cnn = package_copy / "models" / "encoders" / "cnn.py"
    edit(
        cnn,
        "from klue_tc.core.registry import ENCODERS\n",
        "from klue_tc.core.registry import ENCODERS\n\nif TYPE_CHECKING:\n"
        "    from klue_tc.models.encoders import trans_blstm\n",
    )
    edit(cnn, "from dataclasses import", "from typing import TYPE_CHECKING\nfrom dataclasses import")
    choice = Choices("mecab", "cnn", "cls")
    files = {p.name for p in fingerprint.numeric_sources(choice, package_copy)}
    assert "cnn.py" in files and "trans_blstm.py" not in files
    edit(cnn, "if TYPE_CHECKING:", "if True:")
    assert "trans_blstm.py" in {p.name for p in fingerprint.numeric_sources(choice, package_copy)}


def test_the_studys_from_scratch_records_count_for_this_code(tmp_path):
    """docs/study-pretrain's first records were made by commit a50fd66 (16deab157f02): its
    from-scratch cells are made to the last digit by this code (fingerprint.SAME_NUMBERS_AS), its
    pretrained ones are not; the records later code added (the stall rule's re-runs, the second
    pretraining seed) count as this code's."""
    first_code = "16deab157f02"
    for path in sorted((REPO / "docs" / "study-pretrain" / "results").glob("*/fold*.json")):
        record = FoldResult.load(path)
        run = validate(OmegaConf.to_container(OmegaConf.load(path.parent / "config.yaml")))
        code = fingerprint.code_version(run)
        made_by = CodeVersion(record.code.fingerprint, code.versions)  # the libraries: this machine's
        counts = record.describe.pretrain == "none" or record.code.fingerprint != first_code
        assert fingerprint.counts_for(made_by, code) == counts, (
            f"{path.parent.name} ({record.describe}, made by {record.code.fingerprint}): this code's version "
            f"is {code.fingerprint}. Where the pinned numbers (tests/test_pinned_numbers.py) did not move, "
            "the record still holds this code's numbers: add it to fingerprint.SAME_NUMBERS_AS"
            if counts
            else f"{path.parent.name}: a pretrained record of the study's first code counts for this code"
        )


def test_every_same_numbers_entry_names_a_fingerprint_of_this_code():
    """An entry keyed by a fingerprint this code no longer has maps nothing: after an edit to code
    that makes numbers, its records either still hold this code's numbers (the pinned numbers did
    not move: re-key the entry) or they do not (drop it)."""
    from klue_tc.core.registry import ENCODERS, OBJECTIVES, TOKENIZERS

    heads = {"transformer": "cls", "cnn": "cls", "trans_blstm": "blstm", "trans_blstm_parallel": "blstm"}
    current = {
        fingerprint.version_of(
            fingerprint.Choices(tokenizer, encoder, heads.get(encoder, "cls"), objective)
        ).fingerprint
        for tokenizer in TOKENIZERS.names()
        for encoder in ENCODERS.names()
        for objective in (None, *OBJECTIVES.names())
    }
    stale = sorted(set(fingerprint.SAME_NUMBERS_AS) - current)
    assert not stale, f"fingerprint.SAME_NUMBERS_AS keys no configuration of this code has: {stale}"


def test_a_record_of_older_code_reads_as_this_schema(tmp_path):
    """docs/study's records predate self-pretraining and the inner split: read, they say so in this
    schema's terms (from scratch, chosen on the scored fold); a record saved now names its schema."""
    (path,) = sorted((REPO / "docs" / "study" / "results").glob("*/fold1.json"))[:1]  # fold 0 holds its migrated size
    assert "schema" not in json.loads(path.read_text())
    record = FoldResult.load(path)
    assert record.schema == RECORD_SCHEMA and record.describe.pretrain == FROM_SCRATCH
    assert record.selected_on == SELECTED_ON_SCORED_FOLD and record.inner_f1 is None
    record.save(tmp_path / "fold0.json")
    assert json.loads((tmp_path / "fold0.json").read_text())["schema"] == RECORD_SCHEMA
    assert FoldResult.load(tmp_path / "fold0.json") == record


@pytest.mark.parametrize("cell, found", [("a4558ebfc128", True), ("1233b6f0303d", False)])
def test_the_store_finds_the_studys_from_scratch_record_as_finished(tmp_path, cell, found):
    """Transformer pre-LN 2 layers, fold 0: from scratch it is finished for this code; pretrained
    (its encoder pretrained by the study's code, with other rounding) it trains again."""
    shutil.copytree(REPO / "docs" / "study-pretrain" / "results" / cell, tmp_path / cell)
    run = validate(OmegaConf.to_container(OmegaConf.load(tmp_path / cell / "config.yaml")))
    made_by = FoldResult.load(tmp_path / cell / "fold0.json").code
    code = CodeVersion(fingerprint.code_version(run).fingerprint, made_by.versions)
    lookup = ResultsStore(tmp_path).find(cell, 0, code, reuse_any=False)
    assert (lookup.record is not None) == found and not lookup.reused_other_code


@pytest.mark.integration
def test_a_rerun_after_a_code_change_trains_again_unless_told_to_reuse(tmp_path, tiny_tsv, monkeypatch, caplog):
    from klue_tc.jobs import job_setup

    run_in_process(tiny_job(tmp_path, tiny_tsv, "cv.fold=0"), tmp_path / "first")
    first = json.loads((tmp_path / "first" / "metrics.json").read_text())
    other_code = CodeVersion("0123456789ab", fingerprint.library_versions())
    monkeypatch.setattr(job_setup, "code_version", lambda run: other_code)

    with caplog.at_level("INFO"):
        run_in_process(tiny_job(tmp_path, tiny_tsv, "cv.fold=0"), tmp_path / "second")
    assert any("made by other code" in r.getMessage() for r in caplog.records)
    second = json.loads((tmp_path / "second" / "metrics.json").read_text())
    assert second["folds"][0]["code"]["fingerprint"] == "0123456789ab" and not second["reused_folds"]

    monkeypatch.setattr(job_setup, "code_version", lambda run: CodeVersion("fedcba987654", {}))
    caplog.clear()
    with caplog.at_level("INFO"):
        run_in_process(tiny_job(tmp_path, tiny_tsv, "cv.fold=0", "results.reuse=any"), tmp_path / "third")
    third = json.loads((tmp_path / "third" / "metrics.json").read_text())
    assert third["reused_folds"] == [0] and third["cv_f1_mean"] == second["cv_f1_mean"]
    assert any("reusing the record of other code" in r.getMessage() for r in caplog.records)
    assert third["reused_from_other_code"] == [0] and second["reused_from_other_code"] == []
    assert first["config_hash"] == second["config_hash"] == third["config_hash"]


# --- fail fast -------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(
    "extra, expected",
    [
        (["data.validation_path={missing}"], "validation.tsv: file not found"),
        (["cv.folds=20"], "cv.folds=20 needs at least 20 titles of every class present; "),
        (["data.limit=5000"], "data.limit=5000 is above the 84 titles of"),
        (["data.path={folder}"], "is a directory; pass the file inside it"),
        (["tokenizer=kobert", "tokenizer.model_path={missing}"], "tokenizer.model_path="),
        (["results.dir={file}"], "the results store (results.dir)"),
    ],
)
def test_every_input_is_checked_before_the_first_step(tmp_path, tiny_tsv, extra, expected):
    (tmp_path / "folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    values = {"missing": tmp_path / "validation.tsv", "folder": tmp_path / "folder", "file": tmp_path / "a-file" / "r"}
    replaced = {e.split("=")[0] for e in extra} | ({"tokenizer.vocab_size"} if "tokenizer=kobert" in extra else set())
    args = [a for a in tiny_job(tmp_path, tiny_tsv) if a.split("=")[0] not in replaced]
    start = time.monotonic()
    done = run_cli([*args, *(a.format(**values) for a in extra), f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 2 and time.monotonic() - start < 60
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert "epoch" not in done.stdout  # nothing trained


# --- the results store -------------------------------------------------------------------------------


@pytest.mark.integration
def test_damaged_records_and_caches_are_reported_and_rebuilt(tmp_path, tiny_tsv, caplog):
    args = tiny_job(tmp_path, tiny_tsv, "cv.fold=0")
    run_in_process(args, tmp_path / "first")
    record = next((tmp_path / "results").glob("*/fold0.json"))
    record.write_text(record.read_text()[:40])  # cut short, as a full disk leaves it
    for cached in (tmp_path / "cache" / "encoded").glob("*.npz"):
        cached.write_bytes(cached.read_bytes()[:100])
    with caplog.at_level("WARNING"):
        run_in_process(args, tmp_path / "second")
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("damaged results record" in m for m in messages)
    assert any("cached encoding" in m and "damaged" in m for m in messages)
    assert json.loads(record.read_text())["fold"] == 0  # a complete record again


@pytest.mark.integration
@pytest.mark.slow  # two processes training at once: the better part of a minute on 2 busy cores
def test_two_identical_jobs_at_once_both_finish_with_one_record(tmp_path, tiny_tsv):
    env = {**os.environ, "PYTHONPATH": str(REPO), "KLUE_TC_CACHE": str(tmp_path / "cache")}
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "klue_tc",
                *tiny_job(tmp_path, tiny_tsv, "cv.fold=0"),
                f"hydra.run.dir={tmp_path / f'run{i}'}",
            ],
            cwd=tmp_path,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    outputs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    records = list((tmp_path / "results").glob("*/fold0.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["fold"] == 0
    finals = [json.loads((tmp_path / f"run{i}" / "metrics.json").read_text())["cv_f1_mean"] for i in range(2)]
    assert finals[0] == finals[1]


@pytest.mark.integration
def test_written_files_follow_the_users_umask(tmp_path, tiny_tsv):
    old = os.umask(0o022)
    try:
        run_in_process(tiny_job(tmp_path, tiny_tsv, "cv.fold=0"), tmp_path / "run")
    finally:
        os.umask(old)
    for path in [tmp_path / "run" / "metrics.json", *(tmp_path / "results").glob("*/fold0.json")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


# --- what a job says ---------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow  # a whole job as a process (Lightning's notices are a process's): half a minute
def test_progress_lines_count_from_one_and_the_end_names_the_run_directory(tmp_path, tiny_tsv):
    run_dir = tmp_path / "run"
    done = run_cli([*tiny_job(tmp_path, tiny_tsv, "trainer.max_epochs=2"), f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    for fold_number, fold in ((1, 0), (2, 1)):
        for epoch in (1, 2):
            assert out.count(f"fold {fold_number}/2 (fold {fold}) epoch {epoch}/2: val macro-F1") == 1
    assert "epoch 0/" not in out and "ETA" in out
    assert "TPU available" not in out and "litlogger" not in out  # Lightning's notices, once printed twice
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == f"run directory: {run_dir}"


@pytest.mark.integration
def test_a_key_of_another_variant_is_one_line_naming_who_has_it(tmp_path):
    done = run_cli(
        ["+experiment=transformer", "encoder.conv_kernel=5", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: unknown config key encoder.conv_kernel: only encoder=cnn has conv_kernel"


def test_headlines_written_as_windows_users_do_train(tmp_path):
    rows = make_headlines(per_class=12)
    text = "\r\n".join(["label\ttext", *(f"{label} \t{title}" for label, title in rows)])
    path = tmp_path / "windows.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    plain = write_tsv(tmp_path / "plain.tsv", rows)
    from klue_tc.data.titles import read_labelled_file

    assert read_labelled_file(path).fingerprint() == read_labelled_file(plain).fingerprint()


def test_a_folds_files_linked_where_they_already_are_stay_and_concurrent_links_end_whole(tmp_path):
    """A second job of the same run directory links the fold's files from the store where the first
    left them: they stay in place (a job reading them is never without them); jobs linking other
    files there at once leave one whole set."""
    import threading

    from klue_tc.core.files import link_or_copy, link_or_copy_tree

    sources = []
    for name in ("a", "b"):
        source = tmp_path / "store" / name / "tokenizer"
        source.mkdir(parents=True)
        (source / "spiece.model").write_bytes(name.encode() * 1000)
        (source / "tokenizer.json").write_text(f'{{"from": "{name}"}}', encoding="utf-8")
        sources.append(source)
    fold = tmp_path / "run" / "fold0"
    fold.mkdir(parents=True)
    link_or_copy(sources[0] / "spiece.model", fold / "best.ckpt")
    link_or_copy_tree(sources[0], fold / "tokenizer")
    stamps = {p: p.stat().st_ctime_ns for p in (fold / "best.ckpt", fold / "tokenizer")}
    time.sleep(0.01)
    link_or_copy(sources[0] / "spiece.model", fold / "best.ckpt")
    link_or_copy_tree(sources[0], fold / "tokenizer")
    assert {p: p.stat().st_ctime_ns for p in stamps} == stamps  # untouched

    failures = []

    def link_in_turn(offset: int) -> None:
        try:
            for i in range(30):
                link_or_copy_tree(sources[(i + offset) % 2], fold / "tokenizer")
                link_or_copy(sources[(i + offset) % 2] / "spiece.model", fold / "best.ckpt")
        except Exception as err:  # whatever a thread met, reported below
            failures.append(err)

    threads = [threading.Thread(target=link_in_turn, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    held = json.loads((fold / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))["from"]
    assert (fold / "tokenizer" / "spiece.model").read_bytes() == held.encode() * 1000
    assert sorted(p.name for p in fold.iterdir()) == ["best.ckpt", "tokenizer"]  # nothing left beside them
