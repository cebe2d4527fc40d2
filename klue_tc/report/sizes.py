"""How big each configuration is (embedding and non-embedding parameters, FLOPs per title), and its
F1 against its size: so that a reader sees whether a "better" encoder is just a bigger one.

Records of newer code carry their size (klue_tc/training/model_size.py measured it while training).
Older ones get theirs once, written into their first fold's record (`python -m klue_tc.report DIR
--migrate-sizes`, migrate_sizes below): the model built again from the configuration's config.yaml,
with that fold's tokenizer (fitted as training fitted it, or read from the tokenizer cache) and its
titles for the typical length. Until a store is migrated the report builds the missing sizes itself
the same way and keeps them in sizes.json beside the report.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from klue_tc.core.errors import KlueTcError
from klue_tc.core.figures import save_figure
from klue_tc.report.markdown import markdown_table
from klue_tc.report.sections import Findings, configuration_scores, configurations
from klue_tc.store.records import FoldResult, ModelSize

log = logging.getLogger(__name__)

SIZE_COLUMNS = ["params_embedding", "params_non_embedding", "flops_per_title", "title_length", "size_source"]
MEASURED, RECORDED = "built from config.yaml", "recorded"
SIZES_CACHE = "sizes.json"  # in the report's folder, beside the baselines' caches


def recorded_sizes(records: Sequence[FoldResult]) -> pd.DataFrame:
    """Each configuration's size as its folds recorded it (the mean over folds: the vocabulary, so
    the embedding count, and the typical title length may differ a little from fold to fold)."""
    rows = [
        {
            "config_hash": r.config_hash,
            "params_embedding": r.model_size.embedding_params,
            "params_non_embedding": r.model_size.non_embedding_params,
            "flops_per_title": r.model_size.forward_flops_per_title,
            "title_length": r.model_size.title_length,
            "size_source": MEASURED if r.model_size.rebuilt else RECORDED,
        }
        for r in records
        if r.model_size is not None
    ]
    if not rows:
        return pd.DataFrame(columns=SIZE_COLUMNS).rename_axis("config_hash")
    frame = pd.DataFrame(rows)
    sources = frame.groupby("config_hash")["size_source"].first()
    frame = frame.drop(columns="size_source").groupby("config_hash").mean()
    return frame.round({"params_embedding": 0, "params_non_embedding": 0}).assign(size_source=sources)


def rebuilt_sizes(
    records: Sequence[FoldResult], configs: dict[str, Any], size_of: Optional[Callable[[dict, int], ModelSize]] = None
) -> tuple[dict[str, tuple[int, ModelSize]], list[str]]:
    """The size of each configuration without a recorded one, built from `configs` (config.yaml by
    key) on its first fold, with that fold; and a line per configuration that could not be built,
    saying why."""
    from omegaconf import OmegaConf

    if size_of is None:
        from klue_tc.training.model_size import ModelBuilder

        size_of = ModelBuilder().size
    first_fold = {}
    for r in sorted(records, key=lambda r: r.fold):
        if r.model_size is None:
            first_fold.setdefault(r.config_hash, r.fold)
    sizes, problems = {}, []
    for key, fold in first_fold.items():
        if key not in configs:
            problems.append(f"{key}: no config.yaml beside its records")
            continue
        config = configs[key]
        plain = OmegaConf.to_container(config, resolve=True) if not isinstance(config, dict) else config
        try:
            sizes[key] = fold, replace(size_of(plain, fold), rebuilt=True)
        except (KlueTcError, OSError, ValueError) as err:
            problems.append(f"{key}: {str(err).splitlines()[0]}")
    return sizes, problems


def measured_sizes(
    records: Sequence[FoldResult], configs: dict[str, Any], size_of: Optional[Callable[[dict, int], ModelSize]] = None
) -> tuple[pd.DataFrame, list[str]]:
    """rebuilt_sizes as the rows of configuration_sizes' frame."""
    sizes, problems = rebuilt_sizes(records, configs, size_of)
    rows = [
        {
            "config_hash": key,
            "params_embedding": size.embedding_params,
            "params_non_embedding": size.non_embedding_params,
            "flops_per_title": size.forward_flops_per_title,
            "title_length": size.title_length,
            "size_source": MEASURED,
        }
        for key, (_, size) in sizes.items()
    ]
    frame = pd.DataFrame(rows, columns=["config_hash", *SIZE_COLUMNS]).set_index("config_hash")
    return frame, problems


def migrate_sizes(directory: Path, size_of: Optional[Callable[[dict, int], ModelSize]] = None) -> tuple[int, list[str]]:
    """Write into the results stores below `directory` the size of every configuration whose records
    lack one, into the record of the fold the report reads it from (its first scored fold), through
    the store (the record's checksum made again); how many records were written, and a line per
    configuration that could not be built. Once a store is migrated, its report builds no model."""
    from klue_tc.report.loading import configs_in_store, fold_records, store_roots
    from klue_tc.store.results import ResultsStore

    records = fold_records(directory)
    recorded = set(recorded_sizes(records).index)
    missing = [r for r in records if r.config_hash not in recorded]
    stores, configs = {}, {}
    for root in store_roots(directory):
        for key, config in configs_in_store(root).items():
            stores[key], configs[key] = ResultsStore(root), config
    stored = [r for r in missing if r.config_hash in stores and stores[r.config_hash].holds(r.config_hash, r.fold)]
    sizes, problems = rebuilt_sizes(stored, configs, size_of)
    for key, (fold, size) in sizes.items():
        stores[key].add_model_size(key, fold, size)
    return len(sizes), problems


def configuration_sizes(
    records: Sequence[FoldResult],
    directory: Path,
    size_of: Optional[Callable[[dict, int], ModelSize]] = None,
    cache: Optional[Path] = None,
) -> tuple[pd.DataFrame, list[str]]:
    """Every configuration's size: recorded where its records hold it, else built from its config
    (kept in `cache`, a JSON file by configuration key: the key fixes every setting and the data, so
    a size found once stands; building a hundred models takes minutes on a busy CPU)."""
    import json

    from klue_tc.core.files import atomic_write_text, read_json_cache
    from klue_tc.report.loading import configs_in_store, store_roots

    recorded = recorded_sizes(records)
    missing = [r for r in records if r.config_hash not in recorded.index]
    if not missing:
        return recorded, []
    stored = read_json_cache(cache)
    stored = stored if isinstance(stored, dict) else {}
    known = pd.DataFrame.from_dict(stored, orient="index", columns=SIZE_COLUMNS).rename_axis("config_hash")
    known = known[known.index.isin([r.config_hash for r in missing])]
    missing = [r for r in missing if r.config_hash not in known.index]
    configs = {key: config for root in store_roots(directory) for key, config in configs_in_store(root).items()}
    measured, problems = measured_sizes(missing, configs, size_of) if missing else (known.iloc[:0], [])
    if cache is not None and not measured.empty:
        stored |= json.loads(measured.to_json(orient="index"))
        atomic_write_text(cache, json.dumps(stored, indent=1, sort_keys=True))
    found = [frame for frame in (recorded, known, measured) if not frame.empty]
    return (pd.concat(found) if found else recorded), problems


def grouped(problems: list[str]) -> list[str]:
    """'key: why' lines as one per reason, with how many configurations it kept from being measured
    (a study whose data file is missing would otherwise list every configuration)."""
    reasons: dict[str, list[str]] = {}
    for problem in problems:
        key, _, why = problem.partition(": ")
        reasons.setdefault(why, []).append(key)
    return [f"{keys[0] if len(keys) == 1 else f'{len(keys)} configurations'}: {why}" for why, keys in reasons.items()]


def millions(value: float) -> str:
    return f"{value / 1e6:.2f}"


def size_table(sizes: pd.DataFrame, designs: pd.DataFrame) -> list[str]:
    """Rows: the configuration without its layer count; columns: layers; cells: non-embedding
    parameters (M) / FLOPs per title (M)."""

    frame = designs.join(sizes, how="inner")
    frame["cell"] = [
        f"{millions(p)} M / {millions(f)} MFLOP" for p, f in zip(frame.params_non_embedding, frame.flops_per_title)
    ]
    table = frame.pivot_table(index="row", columns="layers", values="cell", aggfunc="first", sort=False).fillna("–")
    return markdown_table(table, ["configuration", *(f"{n} layers" for n in table.columns)])


def size_section(
    records: Sequence[FoldResult],
    directory: Path,
    baselines: Sequence[dict] = (),
    size_of: Optional[Callable[[dict, int], ModelSize]] = None,
) -> Findings:
    """The sizes table, the F1-against-size plot, and the size columns for report.csv."""
    designs = configurations(records)
    sizes, problems = configuration_sizes(records, directory, size_of, directory / SIZES_CACHE)
    problems = grouped(problems)
    lines = ["## Model sizes", ""]
    if sizes.empty:
        return Findings.left_out("model sizes", "; ".join(problems) or "no record carries one")
    sources = ", ".join(f"{n} {what}" for what, n in sizes["size_source"].value_counts().items())
    tables = designs.join(sizes, how="inner")
    tables["vocabulary"] = tables["tokenizer"] + tables["pretrain"].map(lambda p: "" if p == "none" else f" ({p})")
    embedding = tables.groupby("vocabulary", sort=False)["params_embedding"].agg(["min", "max"])
    lines += [
        "Parameters outside the embedding tables and forward FLOPs per title (matrix products, "
        "attention and recurrent steps, over a title of the fold's median length in tokens); each "
        f"configuration's from its records or built again from its config.yaml ({sources}). "
        "The LayerNorm placement changes them by a final LayerNorm at most; pretraining not at all.",
        "",
        "Embedding tables grow with the vocabulary, not the design (a pretrained encoder's tokenizer is "
        "fitted on its pretraining corpus): "
        + "; ".join(
            f"{t}: {millions(r['min'])}" + (f"–{millions(r['max'])}" if r["max"] != r["min"] else "") + " M"
            for t, r in embedding.iterrows()
        )
        + " parameters.",
        "",
        *size_table(sizes, designs),
        "",
    ]
    if problems:
        lines += ["Not measured: " + "; ".join(problems) + ".", ""]
    scores = configuration_scores(records).join(sizes, how="inner")
    plot = plot_f1_by_size(scores, directory / "f1_by_size.png", baselines)
    lines += [
        f"{plot.name}: F1 against non-embedding parameters (log scale); a line joins one design's layer counts.",
        "",
    ]
    return Findings(lines, [plot], sizes[SIZE_COLUMNS[:-2]].astype(float))


def plot_f1_by_size(frame: pd.DataFrame, path: Path, baselines: Sequence[dict] = ()) -> Path:
    """One panel per tokenizer and metric (CV, validation): F1 against non-embedding parameters on a
    log axis; colour the encoder, line style the LayerNorm placement, hollow markers the pretrained
    encoders; the linear baselines as horizontal lines. Every panel shares both scales of its row."""
    from klue_tc.report.plots import (
        baseline_keys,
        design_legend,
        design_style,
        draw_baselines,
        draw_beside_axis,
        f1_limits,
    )

    metrics = [("f1_mean", "CV macro-F1")]
    if frame["validation_f1"].notna().any():
        metrics.append(("validation_f1", "validation macro-F1"))
    tokenizers = list(dict.fromkeys(frame["tokenizer"]))
    fig = Figure(figsize=(4.2 * len(tokenizers) + 2.2, 3.4 * len(metrics)), layout="constrained")
    axes = fig.subplots(len(metrics), len(tokenizers), sharex=True, sharey="row", squeeze=False)
    design = ["encoder", "ln", "head", "pretrain"]
    for row, (value, label) in enumerate(metrics):
        key = "f1" if value == "f1_mean" else value
        low, high = f1_limits(frame[value], also=[b[key] for b in baselines if pd.notna(b.get(key))])
        for col, tokenizer in enumerate(tokenizers):
            ax = axes[row][col]
            for (encoder, ln, _, pre), line in frame[frame.tokenizer == tokenizer].groupby(design, sort=False):
                line = line.sort_values("params_non_embedding")
                style = design_style(encoder, ln, pre)
                ax.plot(line.params_non_embedding, line[value].where(line[value].between(low, high)), **style)
                draw_beside_axis(ax, line.params_non_embedding, line[value], low, high, color=style["color"])
            draw_baselines(ax, baselines, key)
            ax.set_ylim(low, high)
            ax.set_xscale("log")
            # Labelled ticks at 1, 2, 3 and 5 of each decade: readable over one decade or several.
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:g} M"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            # A margin wide enough that the smallest design has a labelled tick to its left.
            ax.set_xlim(frame["params_non_embedding"].min() * 0.8, frame["params_non_embedding"].max() * 1.25)
            ax.grid(alpha=0.3, which="both")
            if row == 0:
                ax.set_title(f"tokenizer: {tokenizer}")
            if row == len(metrics) - 1:
                ax.set_xlabel("non-embedding parameters (log scale)")
            if col == 0:
                ax.set_ylabel(label)
    design_legend(fig, frame, baseline_keys(baselines))
    return save_figure(fig, path)
