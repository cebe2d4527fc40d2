"""TF-IDF character n-gram + linear SVM baseline on the same fold and validation file as a run.

    python scripts/tfidf_baseline.py --train TRAIN.tsv --validation VAL.tsv [--folds 5 --fold 0 --seed 42]

Prints fold-validation and validation macro-F1, for comparison with `python -m klue_tc` on the
same split (`cv.folds`, `cv.fold`, `cv.seed`).
"""
import argparse

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import f1_score
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC

from klue_tc.data import read_labelled_file, stratified_folds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--validation", required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    data, validation = read_labelled_file(args.train), read_labelled_file(args.validation)
    train_idx, fold_idx = stratified_folds(data.labels, args.folds, args.seed)[args.fold]
    model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True, min_df=2),
                          LinearSVC(C=0.5))
    model.fit([data.texts[i] for i in train_idx], data.labels[train_idx])
    fold_f1 = f1_score(data.labels[fold_idx], model.predict([data.texts[i] for i in fold_idx]), average="macro")
    val_f1 = f1_score(validation.labels, model.predict(validation.texts), average="macro")
    print(f"tfidf-char(1-3)+LinearSVC: fold {args.fold} macro-F1 {fold_f1:.4f}; validation macro-F1 {val_f1:.4f}")


if __name__ == "__main__":
    main()
