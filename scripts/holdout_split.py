"""Split a labelled file into a stratified training part and a held-out part, as the README's
full-training comparison does (train90.tsv / heldout10.tsv, seed 7).

    python scripts/holdout_split.py TRAIN.tsv OUT_DIR [--held-out 0.1 --seed 7]
"""

import argparse
from pathlib import Path

import pandas as pd

from klue_tc.core.errors import KlueTcError, exit_with
from klue_tc.data.titles import read_labelled_file, stratified_holdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("train")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--held-out", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    try:
        data = read_labelled_file(args.train)
    except KlueTcError as err:
        exit_with(err)
    frame = pd.DataFrame({"label": [data.label_names[i] for i in data.labels], "text": data.texts})
    kept, held = (frame.iloc[part] for part in stratified_holdout(data.labels, args.held_out, args.seed))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    percent = round(100 * args.held_out)
    for part, name in ((kept, f"train{100 - percent}.tsv"), (held, f"heldout{percent}.tsv")):
        part.to_csv(args.out_dir / name, sep="\t", index=False)
        print(f"{args.out_dir / name}: {len(part)} titles")


if __name__ == "__main__":
    main()
