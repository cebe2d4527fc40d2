"""TF-IDF character n-gram + linear SVM baseline (or NB-SVM) on the same fold and validation file as a run.

    python scripts/tfidf_baseline.py --train TRAIN.tsv --validation VAL.tsv [--folds 5 --fold 0 --seed 42]
        [--inner-fraction 0.1] [--run RUN_DIR] [--untuned | --baseline nbsvm]

Prints fold-validation and validation macro-F1, for comparison with `python -m klue_tc` on the
same split (`cv.folds`, `cv.fold`, `cv.seed`, `cv.inner_fraction`): trained on the same titles as
the run (the training fold less its inner split), C chosen on that inner split as the run chose its
epoch (--untuned: scikit-learn's defaults, nothing chosen; --baseline nbsvm: NB-SVM on binarised
character n-grams, its C and beta chosen the same way). With --run, also scores that run's checkpoints on
the validation titles and gives the paired bootstrap interval of (run - baseline) macro-F1 (on a
few thousand titles one model's F1 moves by about half a point from sampling alone), how the
titles split by which model is right, and both models' F1 on each quarter of the titles ordered by
how alike the nearest training title is (novel titles first).
"""

import argparse

from sklearn.metrics import f1_score

from klue_tc.core.errors import KlueTcError, exit_with
from klue_tc.data.titles import inner_split, read_labelled_file, title_folds
from klue_tc.predict import fold_records
from klue_tc.training.baseline import NB_SVM, TFIDF_SVM, baseline_pipeline, fit_choosing_c
from klue_tc.training.inference import ensemble_probs
from research_stats import (
    agreement_shares,
    macro_f1_by_quantile,
    nearest_title_similarity,
    paired_bootstrap_f1_difference,
)

BASELINES = {"tfidf": TFIDF_SVM, "nbsvm": NB_SVM}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--validation", required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--inner-fraction", type=float, default=0.1, help="the run's cv.inner_fraction: the share that chooses C"
    )
    parser.add_argument("--run", help="a klue_tc run directory trained on the same split, to compare with")
    parser.add_argument(
        "--untuned",
        action="store_true",
        help="scikit-learn's defaults (char 1-3-grams, raw tf, min_df 1, C=1) instead of the tuned baseline",
    )
    parser.add_argument(
        "--baseline", choices=sorted(BASELINES), default="tfidf", help="tfidf: TF-IDF + linear SVM; nbsvm: NB-SVM"
    )
    args = parser.parse_args()
    if args.untuned and args.baseline != "tfidf":
        parser.error("--untuned is TF-IDF + SVM's scikit-learn defaults: it takes no --baseline")
    baseline = BASELINES[args.baseline]
    try:  # a bad run directory or file fails before the baseline trains
        run_records = fold_records(args.run) if args.run else None
        data = read_labelled_file(args.train)
        validation = read_labelled_file(args.validation, label_names=data.label_names)
    except KlueTcError as err:
        exit_with(err)
    train_idx, fold_idx = title_folds(data, args.folds, args.seed)[args.fold]
    try:
        fit, _ = inner_split(data.labels[train_idx], args.inner_fraction, args.seed)
    except KlueTcError as err:
        exit_with(err)
    train_texts = [data.texts[i] for i in train_idx[fit]]  # the titles the model learns from
    if args.untuned:
        model, chosen = baseline_pipeline(untuned=True).fit(train_texts, data.labels[train_idx[fit]]), ""
    else:
        model, picked = fit_choosing_c(
            [data.texts[i] for i in train_idx], data.labels[train_idx], args.inner_fraction, args.seed, None, baseline
        )
        setting = f"{baseline.setting_name}={baseline.describe(picked['C'])}"
        chosen = f" ({setting}, chosen on the inner split, its F1 {picked['inner_f1']:.4f})"
    fold_f1 = f1_score(data.labels[fold_idx], model.predict([data.texts[i] for i in fold_idx]), average="macro")
    baseline_predicted = model.predict(validation.texts)
    val_f1 = f1_score(validation.labels, baseline_predicted, average="macro")
    baseline_name = baseline.name + (" (scikit-learn defaults)" if args.untuned else "")
    print(f"{baseline_name}{chosen}: fold {args.fold} macro-F1 {fold_f1:.4f}; validation macro-F1 {val_f1:.4f}")
    if run_records:
        run_predicted = ensemble_probs(run_records, validation.texts).argmax(1)
        paired = paired_bootstrap_f1_difference(validation.labels, run_predicted, baseline_predicted)
        run_f1 = val_f1 + paired["difference"]  # the bootstrap scored the run on all titles already
        print(
            f"run {args.run}: validation macro-F1 {run_f1:.4f}; run - baseline {paired['difference']:+.4f} "
            f"(95% paired bootstrap {paired['low']:+.4f} to {paired['high']:+.4f}; "
            f"run ahead in {paired['share_a_better']:.0%} of 1000 resamples)"
        )
        shares = agreement_shares(validation.labels, run_predicted, baseline_predicted)
        print(
            f"titles: both right {shares['both_right']:.1%}, only the run {shares['only_a_right']:.1%}, "
            f"only the baseline {shares['only_b_right']:.1%}, both wrong {shares['both_wrong']:.1%} "
            f"({shares['both_wrong_alike']:.1%} with the same wrong class)"
        )
        similarity = nearest_title_similarity(train_texts, validation.texts)
        print("macro-F1 by the similarity of the nearest training title (char n-gram TF-IDF cosine), in quarters:")
        for row in macro_f1_by_quantile(
            validation.labels, {"run": run_predicted, "baseline": baseline_predicted}, similarity
        ):
            print(
                f"  {row['low']:.2f}-{row['high']:.2f} ({row['titles']} titles): run {row['run']:.4f}, "
                f"baseline {row['baseline']:.4f}, run - baseline {row['run'] - row['baseline']:+.4f}"
            )


if __name__ == "__main__":
    main()
