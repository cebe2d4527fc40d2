"""The research statistics beside scripts/tfidf_baseline.py, and the baseline script itself."""

import re
import sys

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, f1_score

from conftest import REPO, make_headlines, write_tsv
from jobs import run_python

sys.path.insert(0, str(REPO / "scripts"))
from research_stats import (  # noqa: E402  (scripts/ is not a package)
    agreement_shares,
    macro_f1_by_quantile,
    macro_f1_from_counts,
    nearest_title_similarity,
    paired_bootstrap_f1_difference,
)


def predictions(truth: np.ndarray, wrong_share: float, seed: int) -> np.ndarray:
    """`truth` with a random `wrong_share` of the labels moved to the next class."""
    rng = np.random.default_rng(seed)
    wrong = rng.random(len(truth)) < wrong_share
    return np.where(wrong, (truth + 1) % 7, truth)


def test_the_interval_excludes_zero_only_when_one_model_is_clearly_better():
    truth = np.random.default_rng(0).integers(0, 7, 2000)
    better, worse = predictions(truth, 0.10, seed=1), predictions(truth, 0.20, seed=2)
    clear = paired_bootstrap_f1_difference(truth, better, worse, resamples=300)
    assert clear["difference"] > 0.05 and clear["low"] > 0 and clear["share_a_better"] == 1.0
    # Two models of the same quality: the interval spans zero.
    other = predictions(truth, 0.10, seed=3)
    tie = paired_bootstrap_f1_difference(truth, better, other, resamples=300)
    assert tie["low"] < 0 < tie["high"]
    # A model against itself: no difference at all, on every resample.
    same = paired_bootstrap_f1_difference(truth, better, better, resamples=50)
    assert same == pytest.approx({"difference": 0.0, "low": 0.0, "high": 0.0, "share_a_better": 0.0})


def test_macro_f1_from_confusion_counts_matches_scikit_learn_also_with_absent_classes():
    rng = np.random.default_rng(4)
    for size, classes in [(50, 7), (8, 7), (300, 3)]:  # 8 titles: some classes absent from both
        truth, predicted = rng.integers(0, classes, size), rng.integers(0, classes, size)
        counts = confusion_matrix(truth, predicted, labels=range(7))
        assert macro_f1_from_counts(counts) == pytest.approx(f1_score(truth, predicted, average="macro"))


def test_agreement_shares_split_the_titles_by_which_model_is_right():
    truth = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1, 2])
    run = np.array([0, 1, 2, 3, 0, 0, 1, 1, 1, 2])  # right on 0-3, 8, 9
    baseline = np.array([0, 1, 2, 0, 4, 0, 2, 1, 0, 0])  # right on 0-2, 4
    shares = agreement_shares(truth, run, baseline)
    assert shares == pytest.approx(
        {"both_right": 0.3, "only_a_right": 0.3, "only_b_right": 0.1, "both_wrong": 0.3, "both_wrong_alike": 0.2}
    )  # titles 5 and 7 alike, 6 not
    assert sum(shares[k] for k in ("both_right", "only_a_right", "only_b_right", "both_wrong")) == pytest.approx(1)


def test_nearest_title_similarity_is_one_for_a_repeat_and_falls_with_what_is_shared():
    training = ["삼성전자 반도체 실적 발표", "류현진 시즌 첫 승 달성", "국회 예산안 처리 합의"]
    similarity = nearest_title_similarity(
        training,
        [
            "류현진 시즌 첫 승 달성",  # a repeat
            "류현진 시즌 첫 패배",  # shares a name and a word with one training title
            "날씨 맑음 쌀쌀",  # shares no syllable with any (only the word-edge spaces)
        ],
    )
    assert similarity[0] == pytest.approx(1.0)
    assert 1.0 > similarity[1] > similarity[2] + 0.3


def test_macro_f1_by_quantile_scores_each_model_on_each_slice_of_the_ordered_titles():
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 7, 400)
    key = rng.random(400)
    # A model right on the lower half of the key only; another right everywhere.
    half = np.where(key < np.median(key), truth, (truth + 1) % 7)
    rows = macro_f1_by_quantile(truth, {"half": half, "all": truth}, key, quantiles=4)
    assert [r["titles"] for r in rows] == [100] * 4
    assert [r["half"] for r in rows] == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert all(r["all"] == 1.0 for r in rows)
    assert rows[0]["low"] == key.min() and rows[-1]["high"] == key.max()
    assert all(a["high"] <= b["low"] for a, b in zip(rows, rows[1:]))


# The tuned TF-IDF in the fast tests; its variants, over 10 s each on 2 busy cores, in the slow ones.
@pytest.mark.integration
@pytest.mark.parametrize(
    "option",
    ["", pytest.param("--untuned", marks=pytest.mark.slow), pytest.param("--baseline=nbsvm", marks=pytest.mark.slow)],
)
def test_tfidf_baseline_script_scores_the_fold_and_the_validation_file(tmp_path, option):
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=20, seed=0))
    validation = write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=8, seed=1))
    done = run_python(
        [
            str(REPO / "scripts" / "tfidf_baseline.py"),
            "--train",
            str(train),
            "--validation",
            str(validation),
            *([option] if option else []),
        ],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert ("(scikit-learn defaults)" in line) == (option == "--untuned")
    assert line.startswith("NB-SVM" if "nbsvm" in option else "TF-IDF")
    assert ("C/beta=" in line) == ("nbsvm" in option)  # NB-SVM chose its C and beta on the inner split
    fold_f1, validation_f1 = map(float, re.findall(r"macro-F1 (\d\.\d+)", line))
    assert fold_f1 > 0.8 and validation_f1 > 0.8  # the topic words decide the class; chance is 1/7
