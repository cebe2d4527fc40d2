"""A user's own label set: read from the training file (names or ids) or fixed by data.labels,
YNAT's seven for YNAT data; the number of classes and the names follow into the model, the
records and predict."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import TINY_MODEL, make_headlines, write_tsv
from jobs import run_cli, run_in_process
from klue_tc.core.errors import DataError
from klue_tc.data.titles import LABEL_NAMES, infer_label_names, read_labelled_file
from klue_tc.jobs.cli_errors import quote_non_ascii_values

SENTIMENT_WORDS = {
    "긍정": ["최고의", "감동적인", "훌륭한", "재미있는", "멋진", "따뜻한"],
    "부정": ["지루한", "최악의", "실망스러운", "엉성한", "뻔한", "불편한"],
    "중립": ["평범한", "무난한", "그저 그런", "보통의", "적당한", "무던한"],
}
NOUNS = ["영화", "연기", "줄거리", "결말", "음악", "연출"]


def sentiment_csv(path, per_class: int = 24, seed: int = 0, as_ids: bool = False, names=tuple(SENTIMENT_WORDS)):
    rng = random.Random(seed)
    rows = ["리뷰,감정"]
    for label in names:
        for _ in range(per_class):
            value = names.index(label) if as_ids else label
            rows.append(f"{rng.choice(SENTIMENT_WORDS[label])} {rng.choice(NOUNS)} {rng.choice(NOUNS)},{value}")
    rng.shuffle(rows[1:])
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["긍정", "부정", "중립", "긍정"], ("긍정", "부정", "중립")),
        ([0, 1, 2, 1], ("0", "1", "2")),
        (["0", "2", "1"], ("0", "1", "2")),
        (["스포츠", "정치"], ("스포츠", "정치")),  # YNAT names, not all seven: the file's own two
        (list(reversed(LABEL_NAMES)), LABEL_NAMES),  # all seven: YNAT data
        ([str(i) for i in range(7)], LABEL_NAMES),
        (["스포츠", "3", "6"], LABEL_NAMES),
    ],
)
def test_label_set_is_read_from_the_column(values, expected):
    assert infer_label_names(pd.Series(values)) == expected


def test_a_named_three_class_file_reads_as_three_classes(tmp_path):
    data = read_labelled_file(sentiment_csv(tmp_path / "reviews.csv"), "리뷰", "감정")
    assert data.label_names == ("긍정", "부정", "중립")
    assert data.num_classes == 3 and set(data.labels) == {0, 1, 2}
    assert data.class_counts() == {"긍정": 24, "부정": 24, "중립": 24}


def test_ids_zero_to_two_are_three_classes_not_ynat(tmp_path):
    data = read_labelled_file(sentiment_csv(tmp_path / "reviews.csv", as_ids=True), "리뷰", "감정")
    assert data.label_names == ("0", "1", "2")


def test_data_labels_fixes_the_set_and_its_order(tmp_path):
    path = sentiment_csv(tmp_path / "reviews.csv", as_ids=True)
    data = read_labelled_file(path, "리뷰", "감정", label_names=["부정", "중립", "긍정"])
    assert data.label_names == ("부정", "중립", "긍정")
    named = read_labelled_file(
        sentiment_csv(tmp_path / "named.csv"), "리뷰", "감정", label_names=["부정", "중립", "긍정"]
    )
    assert named.class_counts() == {"부정": 24, "중립": 24, "긍정": 24}
    assert (named.labels[[i for i, t in enumerate(named.texts) if t.startswith("최고의")]] == 2).all()


def test_ynat_files_keep_ynat_names_and_fingerprint(tmp_path):
    headlines = make_headlines(per_class=3)
    by_name = read_labelled_file(write_tsv(tmp_path / "names.tsv", headlines))
    by_id = read_labelled_file(write_tsv(tmp_path / "ids.tsv", headlines, label_as_id=True))
    assert by_name.label_names == by_id.label_names == LABEL_NAMES
    assert by_name.fingerprint() == by_id.fingerprint()


@pytest.mark.integration
def test_a_file_of_three_ynat_names_trains_a_three_class_model(tmp_path, monkeypatch, caplog):
    three = ["IT과학", "스포츠", "정치"]
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=10, labels=three))
    validation = write_tsv(tmp_path / "valid.tsv", make_headlines(per_class=4, seed=1, labels=three))
    job = [f"data.path={train}", f"data.validation_path={validation}", "cv.folds=2", "cv.fold=0"]
    job += ["trainer.max_epochs=1", "logger=none", f"results.dir={tmp_path / 'results'}", *TINY_MODEL]
    with caplog.at_level("INFO", logger="klue_tc.jobs.run"):
        run_in_process(job, tmp_path / "run")
    assert f"{train}; 3 labels: IT과학, 스포츠, 정치" in caplog.text
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["label_names"] == three and list(metrics["validation_per_class_f1"]) == three
    assert len(metrics["validation_confusion_matrix"]) == 3


def test_a_ynat_file_with_a_misspelt_label_names_its_line(tmp_path):
    rows = make_headlines(per_class=2)
    path = write_tsv(tmp_path / "ynat.tsv", [*rows, ("과학", "반도체 신제품 공개")])
    with pytest.raises(DataError, match=f"line {len(rows) + 2}: unknown label '과학' in column 'label'"):
        read_labelled_file(path)


def test_a_label_outside_the_set_names_file_line_and_the_valid_labels(tmp_path):
    path = tmp_path / "val.csv"
    path.write_text("리뷰,감정\n좋은 영화,긍정\n그냥 영화,별로\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_labelled_file(path, "리뷰", "감정", label_names=("긍정", "부정", "중립"))
    assert str(err.value) == (
        f"{path}: line 3: unknown label '별로' in column '감정'; expected an id 0-2 or one of 긍정, 부정, 중립"
    )


@pytest.mark.integration
def test_data_labels_is_typed_and_checked(tmp_path):
    done = run_cli(["data.labels=[a,a]", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 2
    assert "data.labels must name two or more distinct labels" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.integration
def test_a_validation_label_outside_the_training_set_is_one_line(tmp_path):
    train = sentiment_csv(tmp_path / "reviews.csv")
    validation = tmp_path / "val.csv"
    validation.write_text("리뷰,감정\n좋은 영화,긍정\n그냥 영화,스포츠\n", encoding="utf-8")
    done = run_cli(
        [
            f"data.path={train}",
            f"data.validation_path={validation}",
            "data.title_column=리뷰",
            "data.label_column=감정",
            "logger=none",
            f"hydra.run.dir={tmp_path / 'run'}",
            f"results.dir={tmp_path / 'results'}",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].endswith(
        f"{validation}: line 3: unknown label '스포츠' in column '감정'; expected an id 0-2 or one of 긍정, 부정, 중립"
    ), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_a_three_class_run_trains_records_and_predicts_its_own_labels(tmp_path, capsys):
    from klue_tc.predict import main, predict_titles

    train = sentiment_csv(tmp_path / "reviews.csv")
    validation = sentiment_csv(tmp_path / "val.csv", per_class=4, seed=1)
    run_dir = tmp_path / "run"
    overrides = quote_non_ascii_values(
        [
            f"data.path={train}",
            f"data.validation_path={validation}",
            "data.title_column=리뷰",
            "data.label_column=감정",
            "cv.folds=2",
            "trainer.max_epochs=2",
            "encoder.layers=1",
            "logger=none",
            f"results.dir={tmp_path / 'results'}",
            *TINY_MODEL,
            "tokenizer.vocab_size=120",
        ]
    )
    run_in_process(overrides, run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["label_names"] == ["긍정", "부정", "중립"]
    assert list(metrics["validation_per_class_f1"]) == ["긍정", "부정", "중립"]
    assert len(metrics["validation_confusion_matrix"]) == 3
    checkpoint = torch.load(run_dir / metrics["folds"][0]["checkpoint"], map_location="cpu", weights_only=False)
    assert checkpoint["hyper_parameters"]["label_names"] == ["긍정", "부정", "중립"]

    predictions = predict_titles(run_dir, ["최고의 영화 연출", "지루한 결말 음악"])
    assert all(label in ("긍정", "부정", "중립") for label, _ in predictions)
    assert all(1 / 3 <= p <= 1 for _, p in predictions)
    capsys.readouterr()  # the run's own lines
    assert main([str(run_dir), "--json", "감동적인 연기 음악"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("긍정", "부정", "중립")


# --- awkward label sets: found before any training ---------------------------------------------


def job_overrides(tmp_path, data, *extra: str) -> list[str]:
    return [
        f"data.path={data}",
        "logger=none",
        f"results.dir={tmp_path / 'results'}",
        "trainer.max_epochs=1",
        "encoder.layers=1",
        *TINY_MODEL,
        *extra,
    ]


def distinct_headlines(per_class: int, labels=LABEL_NAMES) -> list[tuple[str, str]]:
    return [(label, f"{label} 소식 {i}번째 기사") for label in labels for i in range(per_class)]


@pytest.mark.integration
@pytest.mark.parametrize(
    "rows, folds, message",
    [
        (
            distinct_headlines(12, labels=("스포츠",)),
            5,
            "every title is of one class (스포츠, 12 titles); a classifier needs titles of at least two classes",
        ),
        (
            distinct_headlines(12, labels=("스포츠", "경제")) + distinct_headlines(4, labels=("정치",)),
            5,
            "cv.folds=5 needs at least 5 titles of every class present; 정치 has 4: lower cv.folds to 4 or add",
        ),
        (
            distinct_headlines(12, labels=("스포츠", "경제")) + distinct_headlines(2, labels=("정치",)),
            3,
            "정치 has 2: add titles of 정치, 3 at least",
        ),
        # Enough for the folds, not for the inner split of every training fold (it holds one title out).
        (
            distinct_headlines(12, labels=("스포츠", "경제")) + distinct_headlines(3, labels=("정치",)),
            2,
            "class 정치 keeps 1 title(s) in fold 0's training part (3 in all), and choosing the epoch needs two",
        ),
        # Copies of one title are one title to the folds.
        (
            distinct_headlines(12, labels=("스포츠", "경제")) + [("정치", "국회 본회의")] * 6,
            5,
            "정치 has 1 (6 rows: copies of a title count once): add titles of 정치, 3 at least",
        ),
    ],
)
def test_a_label_set_the_folds_cannot_hold_is_one_line_before_any_training(tmp_path, rows, folds, message):
    data = write_tsv(tmp_path / "train.tsv", rows)
    with pytest.raises(DataError) as err:
        run_in_process(job_overrides(tmp_path, data, f"cv.folds={folds}"), tmp_path / "run")
    assert str(err.value).startswith(f"{data}: ") and message in str(err.value), str(err.value)
    assert not (tmp_path / "results").exists() and not list((tmp_path / "run").rglob("*.ckpt"))  # nothing trained


def test_copies_of_a_title_sit_in_one_fold_and_conflicting_labels_are_named(tmp_path, caplog):
    from klue_tc.data.titles import duplicate_groups, title_folds
    from klue_tc.jobs.preflight import report_duplicates

    rows = distinct_headlines(10)
    rows += rows[:12] + [("정치", rows[0][1]), ("경제", rows[0][1])]  # 12 copied, one of them twice more as others
    data = read_labelled_file(write_tsv(tmp_path / "copies.tsv", rows))
    groups = duplicate_groups(data.texts)
    for train, held in title_folds(data, 5, seed=42):
        assert not set(groups[train]) & set(groups[held])
        assert np.all(np.bincount(data.labels[held], minlength=7) >= 1)  # still stratified
    with caplog.at_level("WARNING"):
        report_duplicates(data)
    assert [r.getMessage() for r in caplog.records] == [
        f"{data.source}: 12 title(s) appear more than once (26 rows); each title's rows are kept in one fold; 1 of "
        f"them carry different labels (e.g. '{rows[0][1]}': {rows[0][0]} x2, 경제 x1, 정치 x1): check those rows"
    ]


def test_titles_without_copies_keep_the_folds_every_record_was_made_on(tmp_path):
    """KLUE YNAT has no two equal titles: its folds stay scikit-learn's plain stratified ones."""
    from klue_tc.data.titles import BUNDLED_TRAIN, duplicate_groups, stratified_folds, title_folds

    data = read_labelled_file(write_tsv(tmp_path / "distinct.tsv", distinct_headlines(9)))
    assert duplicate_groups(data.texts) is None
    for (a_train, a_held), (b_train, b_held) in zip(title_folds(data, 3, 7), stratified_folds(data.labels, 3, 7)):
        assert np.array_equal(a_train, b_train) and np.array_equal(a_held, b_held)
    assert duplicate_groups(read_labelled_file(BUNDLED_TRAIN).texts) is None
