import re

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, f1_score

from conftest import REPO, make_headlines, write_tsv
from jobs import run_python
from klue_tc.evaluate import agreement_shares, macro_f1_from_counts, paired_bootstrap_f1_difference


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
    run = np.array([0, 1, 2, 3, 0, 0, 1, 1, 1, 2])       # right on 0-3, 8, 9
    baseline = np.array([0, 1, 2, 0, 4, 0, 2, 1, 0, 0])  # right on 0-2, 4
    shares = agreement_shares(truth, run, baseline)
    assert shares == pytest.approx({"both_right": 0.3, "only_a_right": 0.3, "only_b_right": 0.1,
                                    "both_wrong": 0.3, "both_wrong_alike": 0.2})  # titles 5 and 7 alike, 6 not
    assert sum(shares[k] for k in ("both_right", "only_a_right", "only_b_right", "both_wrong")) == pytest.approx(1)


@pytest.mark.parametrize("untuned", [False, True])
def test_tfidf_baseline_script_scores_the_fold_and_the_validation_file(tmp_path, untuned):
    train = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=20, seed=0))
    validation = write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=8, seed=1))
    done = run_python([str(REPO / "scripts" / "tfidf_baseline.py"), "--train", str(train),
                       "--validation", str(validation), *(["--untuned"] if untuned else [])], timeout=120)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert ("(scikit-learn defaults)" in line) == untuned
    fold_f1, validation_f1 = map(float, re.findall(r"macro-F1 (\d\.\d+)", line))
    assert fold_f1 > 0.8 and validation_f1 > 0.8  # the topic words decide the class; chance is 1/7
