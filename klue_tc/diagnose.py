"""Why a fold did not learn: the state it started fine-tuning from (its pretrained encoder, or a
fresh initialisation) beside a fresh initialisation of the same design, on titles of its data file.

    python -m klue_tc.diagnose RESULTS_DIR/<config hash>/fold0.json [--titles 256] [--data FILE]

For both starts it prints how far each sublayer's token states point one way (the median cosine of
a token's state with the mean state: near 1, every title looks alike to the head) and the gradient
of the classification loss reaching each part of the model; for a masked-LM pretraining, its final
loss beside the token-frequency entropy of the file's titles (klue_tc/pretraining/frequency_plateau.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import torch
from omegaconf import OmegaConf
from torch import nn

from klue_tc.core.config import RunConfig, validate
from klue_tc.core.errors import USER_ERROR_EXIT, KlueTcError, ResourceError
from klue_tc.data.titles import read_labelled_file
from klue_tc.pretraining.frequency_plateau import PLATEAU_NATS, applies_to, token_entropy
from klue_tc.pretraining.masking import never_hidden
from klue_tc.pretraining.pretrain import TOKENIZER_DIR, WEIGHTS_FILE, PretrainedEncoder
from klue_tc.store.records import FoldResult
from klue_tc.store.results import ResultsStore
from klue_tc.tokenizers import Tokenizer, load_tokenizer
from klue_tc.training.fold import new_module
from klue_tc.training.module import TopicClassifierModule


class StartState(NamedTuple):
    alignment: list[float]  # the embeddings', then each residual sublayer's in order
    gradients: dict[str, float]  # L2 norm of the loss gradient per part: embeddings, block i, head


def alignment(states: torch.Tensor, real: torch.Tensor) -> float:
    """Median cosine of the real tokens' states with their mean direction."""
    tokens = nn.functional.normalize(states[real], dim=-1)
    mean = nn.functional.normalize(tokens.mean(0), dim=0)
    return float((tokens @ mean).median())


def part_of(name: str) -> str:
    if name.startswith("head"):
        return "head"
    if name.startswith("encoder.blocks."):
        return f"block {name.split('.')[2]}"
    return "embeddings" if name.startswith("encoder.embeddings") else "final norm"


def start_state(module: TopicClassifierModule, input_ids: torch.Tensor, labels: torch.Tensor) -> StartState:
    model = module.model
    padding = input_ids.eq(model.pad_id)
    with torch.no_grad():
        model.eval()
        x = model.encoder.embeddings(input_ids)
        aligned = [alignment(x, ~padding)]
        for residual in model.encoder.residuals():
            x = residual(x, padding)
            aligned.append(alignment(x, ~padding))
    model.train()  # the gradient as fine-tuning's first step sees it, dropout included
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(input_ids), labels).backward()
    squares: dict[str, float] = {}
    for name, param in model.named_parameters():
        if param.grad is not None:
            squares[part_of(name)] = squares.get(part_of(name), 0.0) + float(param.grad.pow(2).sum())
    model.zero_grad(set_to_none=True)
    return StartState(aligned, {part: value**0.5 for part, value in squares.items()})


class Fold(NamedTuple):
    record: FoldResult
    run: RunConfig
    tokenizer: Tokenizer
    pretrained: Optional[PretrainedEncoder]


def load_fold(path: Path) -> Fold:
    """A fold record with the config saved beside it, its tokenizer (the fold's, or its pretrained
    encoder's when the fold's folder is gone) and the pretrained encoder it started from."""
    if not path.is_file():
        raise ResourceError(f"{path}: no such fold record (a results store's <config hash>/fold<k>.json)")
    record = ResultsStore.load(path)
    config = path.parent / "config.yaml"
    if not config.is_file():
        raise ResourceError(f"{config}: the config saved beside the record is missing")
    run = validate(OmegaConf.to_container(OmegaConf.load(config)))
    run = replace(run, trainer=replace(run.trainer, compile=False))  # the probe reaches into the model
    stored = Path(record.pretrained["path"]) if record.pretrained else None
    if stored is not None and not (stored / WEIGHTS_FILE).is_file():
        raise ResourceError(f"{stored / WEIGHTS_FILE}: the pretrained encoder this fold started from is not here")
    folder = next(
        (d for d in (record.tokenizer_dir, stored and stored / TOKENIZER_DIR) if d and Path(d).is_dir()), None
    )
    if folder is None:
        raise ResourceError(f"{path}: neither the fold's tokenizer nor its pretrained encoder's is on this machine")
    tokenizer = load_tokenizer(folder)
    pretrained = PretrainedEncoder(stored.name, stored, tokenizer, "", record.pretrained) if stored else None
    return Fold(record, run, tokenizer, pretrained)


def sublayer_names(module: TopicClassifierModule) -> list[str]:
    blocks = enumerate(module.model.encoder.blocks)
    return ["embeddings"] + [f"block {b}: {type(r.sublayer).__name__}" for b, block in blocks for r in block.sublayers]


def report(fold: Fold, data: Path, titles: int) -> list[str]:
    record, tokenizer = fold.record, fold.tokenizer
    labelled = read_labelled_file(data, label_names=fold.run.data.labels)
    # The fold's own seed: the same initialisation it began from; the head is new in both starts.
    fresh = new_module(fold.run, tokenizer, labelled.label_names, None)
    order = torch.randperm(len(labelled), generator=torch.Generator().manual_seed(0))
    picked = labelled.subset(order[:titles].numpy())
    encoded = [torch.tensor(t) for t in tokenizer.encode(picked.texts)]
    ids = nn.utils.rnn.pad_sequence(encoded, batch_first=True, padding_value=tokenizer.specials.pad)
    labels = torch.as_tensor(picked.labels)
    starts = {"fresh": start_state(fresh, ids, labels)}
    if fold.pretrained:
        started = new_module(fold.run, tokenizer, labelled.label_names, fold.pretrained)
        starts = {"pretrained": start_state(started, ids, labels), **starts}
    d = record.describe
    lines = [
        f"{d.encoder} {d.ln}-LN, {d.layers} layers, {d.tokenizer}, pretrain={d.pretrain}, fold {record.fold}: "
        f"scored macro-F1 {record.f1:.3f}; probed on {len(picked)} titles of {data}",
        "",
        "token states' median cosine with their mean (near 1: every token alike to the head)",
    ]
    for i, name in enumerate(sublayer_names(fresh)):
        lines.append(f"  {name:<28}" + "".join(f"  {k} {s.alignment[i]:.2f}" for k, s in starts.items()))
    lines += ["", "gradient norm of the classification loss at the first step, by part"]
    for part in starts["fresh"].gradients:
        lines.append(f"  {part:<28}" + "".join(f"  {k} {s.gradients[part]:.1e}" for k, s in starts.items()))
    meta = record.pretrained or {}
    if applies_to(meta.get("objective")):
        flat = torch.cat([torch.tensor(t, dtype=torch.int64) for t in tokenizer.encode(labelled.texts)]).numpy()
        entropy = token_entropy(flat, never_hidden(tokenizer.specials))
        on_plateau = meta["final_loss"] > entropy - PLATEAU_NATS
        lines += [
            "",
            f"masked-LM pretraining ended at loss {meta['final_loss']:.2f}; the token-frequency entropy of the "
            f"file's titles under its tokenizer is {entropy:.2f} nats"
            + (": on the plateau, it learnt little beyond how often each token occurs" if on_plateau else ""),
        ]
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m klue_tc.diagnose", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("record", type=Path, help="a fold record: RESULTS_DIR/<config hash>/fold<k>.json")
    parser.add_argument("--titles", type=int, default=256, help="titles of the data file to probe with")
    parser.add_argument("--data", type=Path, help="the labelled file to read titles from (default: the record's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        fold = load_fold(args.record)
        data = args.data or Path(fold.record.data_source)
        if not data.is_file():
            raise ResourceError(f"{data}: the record's data file is not on this machine; pass --data FILE")
        lines = report(fold, data, args.titles)
    except KlueTcError as err:
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
