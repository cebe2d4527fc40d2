"""Fold-ensemble prediction from a tiny run trained end to end by the real job."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from klue_tc.data.titles import LABEL_NAMES
from klue_tc.predict import fold_records, main, predict_titles

REPO = Path(__file__).resolve().parents[1]
WORDS = {
    "IT과학": ["인공지능", "반도체", "스마트폰", "클라우드", "로봇", "데이터", "소프트웨어", "위성"],
    "스포츠": ["축구", "야구", "농구", "선수", "우승", "감독", "리그", "올림픽"],
    "정치": ["국회", "대통령", "선거", "여당", "야당", "장관", "법안", "정부"],
}
TITLES = ["축구 대표팀 감독 우승 소감", "반도체 데이터 센터 투자 발표", "국회 법안 처리 여야 합의"]


def tiny_job(tmp: Path, run: str) -> subprocess.CompletedProcess:
    overrides = [
        f"data.path={tmp / 'train.tsv'}",
        "cv.folds=2",
        "trainer.max_epochs=2",
        "trainer.accelerator=cpu",
        "logger=none",
        "encoder.d_model=32",
        "encoder.ffn_dim=64",
        "encoder.heads=2",
        "encoder.layers=1",
        "head.hidden=32",
        "tokenizer.vocab_size=200",
        "data.batch_size=16",
        f"hydra.run.dir={tmp / run}",
        f"results.dir={tmp / 'results'}",
    ]
    return subprocess.run(
        [sys.executable, "-m", "klue_tc", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KLUE_TC_CACHE": str(tmp / "cache")},
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("predict")
    rng = random.Random(0)
    rows = ["title\tlabel"] + [
        f"{' '.join(rng.sample(words, 3))} 발표\t{label}" for label, words in WORDS.items() for _ in range(20)
    ]
    (tmp / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    done = tiny_job(tmp, "run")
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "run"


@pytest.mark.integration
def test_predict_titles(run_dir: Path):
    predictions = predict_titles(run_dir, TITLES, batch_size=2)

    assert len(predictions) == len(TITLES)
    for label, prob in predictions:
        assert label in LABEL_NAMES
        assert 0.0 < prob <= 1.0
        assert prob >= 1 / len(WORDS)  # the arg-max of a distribution over the file's own labels


@pytest.mark.integration
def test_cli_json_from_a_file(run_dir: Path, tmp_path: Path, capsys):
    titles = tmp_path / "titles.txt"
    titles.write_text(f"{TITLES[0]}\n\n   \n{TITLES[1]}\n", encoding="utf-8")

    assert main([str(run_dir), "--file", str(titles), "--json", "--batch-size", "4"]) == 0

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["title"] for line in lines] == TITLES[:2]  # blank lines skipped
    assert all(line["label"] in LABEL_NAMES and 0.0 < line["probability"] <= 1.0 for line in lines)


@pytest.mark.integration
def test_cli_table(run_dir: Path, capsys):
    assert main([str(run_dir), TITLES[2], "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "probability" in out and any(name in out for name in LABEL_NAMES)


@pytest.mark.integration
def test_output_that_is_no_terminal_gets_csv(run_dir: Path, capsys):
    """`predict RUN ... > file` writes CSV a spreadsheet or pandas reads, whatever a title holds."""
    titles = [TITLES[0], '쉼표, "따옴표" 든 제목']
    assert main([str(run_dir), *titles]) == 0  # pytest's captured stdout is no terminal

    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(frame.columns) == ["title", "label", "probability"]
    assert frame["title"].tolist() == titles
    assert frame["label"].isin(LABEL_NAMES).all() and frame["probability"].between(0, 1).all()
    assert main([str(run_dir), TITLES[1], "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("title,label,probability\n")


@pytest.mark.integration
def test_missing_run_or_checkpoints_exit_2(run_dir: Path, tmp_path: Path, capsys):
    assert main([str(tmp_path / "nowhere"), "제목"]) == 2
    assert capsys.readouterr().err.startswith("error:")

    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n", encoding="utf-8")
    (sweep / "0" / "metrics.json").write_text((run_dir / "metrics.json").read_text(encoding="utf-8"), encoding="utf-8")
    assert main([str(sweep), "제목"]) == 2
    assert "sweep directory" in capsys.readouterr().err

    broken = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    for record in broken["folds"]:
        record["checkpoint"] = str(tmp_path / "gone.ckpt")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.json").write_text(json.dumps(broken), encoding="utf-8")
    assert main([str(tmp_path / "broken"), "제목"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "checkpoint" in err and len(err.strip().splitlines()) == 1


def test_a_folder_of_runs_or_a_sweep_names_what_it_holds(tmp_path: Path, capsys):
    """outputs/runs/<experiment> holds one timestamped run directory per run of the job; a sweep's
    folder holds multirun.yaml and its jobs, as deep as its sweep file nests them."""
    runs = tmp_path / "outputs" / "runs" / "trans_blstm"
    for name in ("2026-12-07_20-04-00", "2026-12-08_09-30-00"):
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.json").write_text("{}", encoding="utf-8")
    assert main([str(runs), "제목"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {runs} holds 2 run directories; pass one, e.g. {runs / '2026-12-08_09-30-00'}"
    )
    sweep = tmp_path / "outputs" / "sweeps" / "smoke"
    for design in ("transformer-post-L2", "cnn-post-L2"):
        (sweep / "mecab" / design / "fold0").mkdir(parents=True)
        (sweep / "mecab" / design / "fold0" / "metrics.json").write_text("{}", encoding="utf-8")
    (sweep / "multirun.yaml").write_text("hydra: {}\n", encoding="utf-8")
    assert main([str(sweep), "제목"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {sweep} is a sweep directory (2 jobs); pass one job's run directory, e.g. "
        f"{sweep / 'mecab' / 'cnn-post-L2' / 'fold0'}"
    )


def test_help_shows_the_whole_description(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "the average of its fold models' probabilities; or from an ensemble's folder" in shown
    assert "its members' weighted average." in shown and "--file titles.txt --json" in shown


@pytest.mark.integration
def test_cli_subprocess_error_has_no_traceback(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "klue_tc.predict", str(tmp_path), "제목"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "metrics.json" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.integration
def test_a_copy_missing_one_fold_stops_unless_told_to_use_its_other_folds(run_dir: Path, tmp_path: Path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "fold1" / "best.ckpt").unlink()
    assert main([str(copy), "손흥민 결승골 폭발"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fold 1 has no checkpoint" in err[0] and "--available-folds" in err[0]
    assert main([str(copy), "손흥민 결승골 폭발", "--available-folds", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["label"] in LABEL_NAMES
    # The copy reads its own files only, never the original run's.
    records = fold_records(copy, available_only=True)
    assert [r.fold for r in records] == [0]
    assert all(
        Path(p).resolve().is_relative_to(copy.resolve()) for p in (records[0].checkpoint, records[0].tokenizer_dir)
    )


@pytest.mark.integration
def test_a_moved_run_predicts_and_its_metrics_name_paths_inside_it(run_dir: Path, tmp_path: Path, capsys):
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert [(f["checkpoint"], f["tokenizer_dir"]) for f in metrics["folds"]] == [
        ("fold0/best.ckpt", "fold0/tokenizer"),
        ("fold1/best.ckpt", "fold1/tokenizer"),
    ]
    shutil.copytree(run_dir, tmp_path / "before")
    moved = (tmp_path / "before").rename(tmp_path / "after")
    assert main([str(moved), TITLES[0], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in LABEL_NAMES
    assert all(Path(r.checkpoint).is_relative_to(moved) for r in fold_records(moved))


@pytest.mark.integration
def test_an_older_metrics_file_with_absolute_paths_reads_the_files_of_the_run_it_lies_in(run_dir: Path, tmp_path):
    copy = tmp_path / "old"
    shutil.copytree(run_dir, copy)
    metrics = json.loads((copy / "metrics.json").read_text(encoding="utf-8"))
    for fold in metrics["folds"]:  # as earlier versions wrote them: the original run's absolute paths
        fold["checkpoint"] = str(run_dir.resolve() / fold["checkpoint"])
        fold["tokenizer_dir"] = str(run_dir.resolve() / fold["tokenizer_dir"])
    (copy / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    assert [Path(r.checkpoint) for r in fold_records(copy)] == [copy / "fold0/best.ckpt", copy / "fold1/best.ckpt"]


@pytest.mark.integration
def test_the_store_keeps_its_models_so_a_rerun_after_moving_the_run_still_has_them(run_dir: Path):
    tmp = run_dir.parent
    moved = tmp / "moved-away"
    shutil.copytree(run_dir, moved)
    shutil.rmtree(run_dir / "fold1")  # the trained run's folder is gone from where it was trained
    try:
        done = tiny_job(tmp, "rerun")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "is gone" not in done.stdout + done.stderr
        assert done.stdout.count("already finished") == 2
        assert all((tmp / "rerun" / f"fold{k}" / "best.ckpt").is_file() for k in (0, 1))
        assert len(fold_records(tmp / "rerun")) == 2
    finally:
        shutil.rmtree(run_dir / "fold1", ignore_errors=True)
        shutil.copytree(moved / "fold1", run_dir / "fold1")


@pytest.mark.integration
def test_an_empty_titles_file_says_so(run_dir: Path, tmp_path: Path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    assert main([str(run_dir), "--file", str(empty)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {empty}: the file is empty (one headline a line expected)"


@pytest.mark.integration
def test_titles_are_normalised_and_korean_windows_text_is_read(run_dir: Path, tmp_path: Path, capsys):
    """A macOS-typed (NFD) argument, one from a cp949 terminal, a cp949 file: one title, one prediction."""
    import unicodedata

    title = TITLES[0]
    from_cp949_terminal = title.encode("cp949").decode("utf-8", "surrogateescape")  # how Python gets such argv
    cp949_file = tmp_path / "titles-cp949.txt"
    cp949_file.write_bytes(f"{title}\r\n".encode("cp949"))
    argv = [str(run_dir), unicodedata.normalize("NFD", title), from_cp949_terminal, "--file", str(cp949_file)]

    assert main([*argv, "--json"]) == 0

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["title"] for line in lines] == [title] * 3
    assert len({line["label"] for line in lines}) == 1
    # The same title in three rows of one batch: its probability agrees to float32 rounding, not to the
    # bit, since a row's place in the batch changes the CPU kernels' summation order (differently on
    # Intel and AMD: 0.56406379 beside 0.56406385 on a Xeon).
    assert [line["probability"] for line in lines] == pytest.approx([lines[0]["probability"]] * 3, rel=1e-5)


@pytest.mark.integration
def test_an_empty_title_argument_says_it_cannot_be_classified(run_dir: Path, capsys):
    assert main([str(run_dir), TITLES[0], " \u200b "]) == 2
    assert (
        capsys.readouterr().err.strip() == "error: title 2 is empty (1 of 2 are): an empty title cannot be classified"
    )


@pytest.mark.integration
def test_symbol_only_titles_are_predicted_with_one_line_counting_them(run_dir: Path, capsys, caplog):
    assert main([str(run_dir), "⚽🔥", TITLES[1], "?!...", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1 and said[0].startswith(
        "2 title(s) hold no letter or digit (only emoji, punctuation or symbols"
    )


@pytest.mark.integration
def test_an_argument_in_no_readable_encoding_is_one_line(run_dir: Path, capsys):
    assert main([str(run_dir), b"\xff\xfe\xfa".decode("utf-8", "surrogateescape")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: title 1 is not UTF-8 text;")


def test_a_table_with_an_id_column_is_predicted_by_id_with_every_class_probability(run_dir: Path, tmp_path, capsys):
    """blind.tsv's layout (`id`, `title`): one row per id in the file's order, `id,label` and a
    probability column per class in the model's label order; a plain file keeps title,label,probability."""
    from klue_tc.data.predictions import read_predictions
    from klue_tc.predict import predict_probs

    ids, titles = ["b-3", "b-1", "b-2"], [TITLES[0], '쉼표, "따옴표" 든 제목', TITLES[2]]
    table = tmp_path / "blind.tsv"
    pd.DataFrame({"id": ids, "title": titles}).to_csv(table, sep="\t", index=False)

    assert main([str(run_dir), "--file", str(table)]) == 0
    out = capsys.readouterr().out
    probs, names = predict_probs(run_dir, titles)
    assert out.splitlines()[0] == ",".join(["id", "label", *names])
    (tmp_path / "out.csv").write_text(out, encoding="utf-8")
    frame = read_predictions(tmp_path / "out.csv")
    assert frame["id"].tolist() == ids
    written = frame[names].to_numpy(float)
    assert np.allclose(written, probs, atol=1e-7) and np.allclose(written.sum(axis=1), 1.0, atol=1e-6)
    assert frame["label"].tolist() == [names[k] for k in written.argmax(axis=1)]

    assert main([str(run_dir), "--file", str(table), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["id"] for line in lines] == ids and list(lines[0]["probabilities"]) == names
    assert main([str(run_dir), "--file", str(table), "--format", "table"]) == 0
    assert "b-3" in capsys.readouterr().out

    with pytest.raises(SystemExit):  # titles by id and titles without one do not mix
        main([str(run_dir), TITLES[0], "--file", str(table)])
    plain = tmp_path / "titles.tsv"  # a .tsv without an id column is one title a line, as before
    plain.write_text(f"{TITLES[0]}\n{TITLES[1]}\n", encoding="utf-8")
    assert main([str(run_dir), "--file", str(plain)]) == 0
    assert capsys.readouterr().out.startswith("title,label,probability\n")


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ("id\ttitle\na\t제목 하나\na\t제목 둘\n", "line 3: id 'a' given twice"),
        ("id\ttitle\na\t제목 하나\nb\t \n", "line 3: id 'b' has an empty title"),
        ("id\theadline\na\t제목 하나\n", "no title column (expected title or text; found id, headline)"),
        ('id\ttitle\na\t"제목" 하나\n', "line 2: bad quoting"),
    ],
)
def test_a_table_of_titles_by_id_keeps_every_row_or_says_which_it_cannot(tmp_path, rows, said, capsys):
    table = tmp_path / "blind.tsv"
    table.write_text(rows, encoding="utf-8")
    assert main([str(tmp_path), "--file", str(table)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {table}: {said}") and len(err.splitlines()) == 1, err
