"""The pretrained encoders the records started from: what each pretraining read (and that no scored
title was among it) and what it cost, in minutes per machine."""

from __future__ import annotations

import json
from typing import Mapping, Optional, Sequence

import pandas as pd

from klue_tc.pretraining.frequency_plateau import PLATEAU_NATS, plateau_warning
from klue_tc.report.markdown import markdown_table
from klue_tc.report.sections import Findings, by_design, configurations, layer_table, seed_label
from klue_tc.report.speed import machine_name
from klue_tc.store.records import FoldResult


def pretrainings(records: Sequence[FoldResult]) -> pd.DataFrame:
    """One row per pretrained encoder (indexed by its store key): the configuration that started
    from it, the seed that pretrained it, what it read, its last loss and seconds, and the machine
    that ran it: as its record says (klue_tc.report.loading.upgraded_record names the seed and the
    machine for older records that did not: the run's seed; the machine of the fold whose first step
    waited for it, unknown where every fold found it stored)."""
    rows: dict[str, dict] = {}
    for record in sorted(records, key=lambda r: r.fold):
        stored = record.pretrained
        if not stored or not stored.get("key"):
            continue
        row = rows.setdefault(
            stored["key"],
            {
                "config_hash": record.config_hash,
                "seed": stored.get("seed"),  # None: a record of older code that did not name it
                "objective": stored.get("objective"),
                "steps": stored.get("steps"),
                "final_loss": stored.get("final_loss"),
                "final_loss_steps": stored.get("final_loss_steps"),
                "token_entropy": stored.get("token_entropy"),
                "seconds": stored.get("seconds"),
                "stall": stored.get("stall"),  # the stall rule's checks (pretrain.stall), where recorded
                "corpus_titles": stored.get("corpus_titles"),
                "left_out_scored_titles": stored.get("left_out_scored_titles"),
                "include_scored_titles": bool(stored.get("include_scored_titles")),
                "include_held_out_titles": bool(stored.get("include_held_out_titles")),
                "machine": machine_name(stored["device"], stored.get("threads")) if stored.get("device") else None,
            },
        )
        if row["machine"] is None and stored.get("device"):
            row["machine"] = machine_name(stored["device"], stored.get("threads"))
    return pd.DataFrame.from_dict(rows, orient="index")


def pretraining_section(records: Sequence[FoldResult], cells: Optional[Mapping[str, str]] = None) -> Findings:
    """The section, a row (or cell) per pretraining wherever a configuration was pretrained with
    several seeds; `cells` (record key -> its cell's key, klue_tc/report/replicates.py) gives
    report.csv's columns per configuration as report.csv's rows read them."""
    frame = pretrainings(records)
    if frame.empty:
        return Findings([])
    scored_in = int(frame["include_scored_titles"].sum())
    held_out_in = int(frame["include_held_out_titles"].sum())
    left_out = frame["left_out_scored_titles"].dropna()
    if held_out_in and not scored_in:
        read = (
            f"{held_out_in} of {len(frame)} read their folds' held-out training titles as unlabelled text "
            "(pretrain.include_held_out_titles: their out-of-fold scores are transductive), none a validation title"
        )
    elif not scored_in and len(left_out) == len(frame) and left_out.min() == left_out.max():
        read = f"none read a scored title: each left out all {int(left_out.min()):,} labelled titles"
    else:
        read = f"{scored_in} of {len(frame)} read corpora that include the scored titles"
    started = [r for r in records if r.pretrained]
    fine_tuning = sum(r.train_seconds or 0.0 for r in started)
    lines = [
        "## The pretrained encoders",
        "",
        f"{len(frame)} encoders were pretrained ({', '.join(sorted(set(frame['objective'].dropna())))}, "
        f"{int(frame['steps'].median()):,} steps over {int(frame['corpus_titles'].median()):,} unlabelled "
        f"titles each) and {len(started)} fine-tuned folds started from them; {read}. Pretraining took "
        f"{frame['seconds'].sum() / 3600:.1f} hours of job time as recorded (older code recorded only the last "
        f"sitting of a pretraining resumed across sittings), fine-tuning the folds that started from them "
        f"{fine_tuning / 3600:.1f} hours.",
        "",
    ]
    lines += loss_lines(frame, records)
    lines += stall_lines(frame, records)
    columns = stall_columns(frame, cells or {})
    timed = frame.dropna(subset=["machine", "seconds"])
    if timed.empty:
        return Findings(lines, columns=columns)
    lines += [
        "Minutes of pretraining as recorded, one table per machine (wall clock under whatever else ran beside it; "
        "a row per pretraining seed where a configuration was pretrained with several):",
        "",
    ]
    seeds = timed.join(configurations(records)[["row", "layers"]], on="config_hash").groupby(["row", "layers"])
    several = bool((seeds["seed"].nunique(dropna=False) > 1).any())  # then every machine's table names them

    def minutes(rows: pd.DataFrame) -> str:
        return " / ".join(f"{seconds / 60:.0f}" for seconds in rows["seconds"])

    for name, part in timed.groupby("machine", sort=False):
        table = by_design(part, records, minutes, "seed", always=several)
        lines += [f"### {name}", "", *layer_table(table), ""]
    return Findings(lines, columns=columns)


def loss_lines(frame: pd.DataFrame, records: Sequence[FoldResult]) -> list[str]:
    """Each encoder's objective loss where pretraining ended: how far each design got in the same
    steps, beside what pretraining then gave it in fine-tuning (Interactions: pretrain x encoder);
    a row per configuration and pretraining seed wherever a configuration was pretrained with several."""
    ended = frame.dropna(subset=["final_loss"])
    if ended.empty:
        return []
    window = ended["final_loss_steps"].dropna()
    mixed = 0 < len(window) < len(ended)
    if len(window) == len(ended):
        over = f"the mean over its last {int(window.max())} steps"
    else:  # older code kept the last step's loss
        over = (
            "the last step's loss, as the code that made these records kept it, which moves by tenths from step "
            "to step"
            + ("; marked (mean of n): the mean over the last n steps, where the record says how many" if mixed else "")
        )
    plateaued = {key for key, row in ended.iterrows() if plateau_warning(row.to_dict())}

    def loss_text(key: str, row: pd.Series) -> str:
        marks = [f"mean of {int(row['final_loss_steps'])}"] if mixed and pd.notna(row["final_loss_steps"]) else []
        marks += ["frequencies"] if key in plateaued else []
        return f"{row['final_loss']:.2f}" + "".join(f" ({mark})" for mark in marks)

    def loss_cell(rows: pd.DataFrame) -> str:
        return " / ".join(loss_text(key, row) for key, row in rows.iterrows())

    losses = by_design(ended, records, loss_cell, "seed")
    seeds = (
        "; a row per pretraining seed where a configuration was pretrained with several"
        if losses.index.nlevels > 1
        else ""
    )
    lines = [
        f"The pretraining objective's loss where it ended ({over}{seeds}): among rows of one tokenizer and "
        "objective, which read the same titles in the same vocabulary, a lower loss is a better fit of them:",
        "",
        *layer_table(losses),
        "",
    ]
    entropies = ended["token_entropy"].dropna()
    if len(entropies):
        lines += [
            f"A masked-LM loss less than {PLATEAU_NATS} nats below (or above) the entropy of its corpus's token "
            f"frequencies ({entropies.min():.2f}–{entropies.max():.2f} nats here: the loss of predicting each "
            "hidden token from how often it occurs) is marked (frequencies): that encoder learnt little from "
            f"context, and a fold that starts from it can do worse than one from scratch. {len(plateaued)} of "
            f"{len(entropies)} pretrainings that record the entropy ended there.",
            "",
        ]
    return lines


def attempt_text(check: dict, factor: float) -> str:
    """One attempt's check: its learning rate, its loss at the check and the check's step, and what
    the rule did there (a restarted attempt ran to the check and no further)."""
    said = f"lr {check['lr']:g}: {check['loss']:.2f} at step {check['step']:,}"
    if check["restarted"]:
        spent = f", {check['seconds'] / 60:.0f} min" if check.get("seconds") is not None else ""
        return (
            f"{said}, on the plateau: restarted at lr {check['lr'] * factor:g} after its {check['step']:,} steps{spent}"
        )
    on_plateau = check["loss"] > check["plateau"] - check["margin"]
    return f"{said}, {'on the plateau' if on_plateau else 'left the plateau'}: kept"


def stall_table(checked: pd.DataFrame, records: Sequence[FoldResult]) -> list[str]:
    """A row per pretraining that records the rule, in the study's order then by seed: its
    configuration, layers and seed, whether it was restarted, and each attempt's check."""
    designs = configurations(records)
    rank = {row: n for n, row in enumerate(dict.fromkeys(designs["row"]))}
    rows = checked.join(designs[["row", "layers"]], on="config_hash")
    rows = rows.assign(rank=rows["row"].map(rank)).sort_values(["rank", "layers", "seed"], kind="stable")
    attempts = max(1, max(len(s["checks"]) for s in rows["stall"]))
    table = pd.DataFrame(
        [[row.layers, seed_label(row.seed), *stall_row(row.stall, attempts)] for row in rows.itertuples()],
        index=rows["row"],
    )
    header = ["configuration", "layers", "seed", "restarted", *(f"attempt {n + 1}" for n in range(attempts))]
    return markdown_table(table, header)


def stall_row(stall: dict, attempts: int) -> list[str]:
    """Whether a pretraining was restarted (and how often), then its attempts' checks, '–' past its last."""
    restarts = stall["restarts"]
    restarted = "no" if not restarts else "yes" if restarts == 1 else f"yes, {restarts} times"
    checks = [attempt_text(check, stall["rule"]["lr_factor"]) for check in stall["checks"]] or ["not checked"]
    return [restarted, *checks, *["–"] * (attempts - len(checks))]


def stall_lines(frame: pd.DataFrame, records: Sequence[FoldResult]) -> list[str]:
    """The stall rule's check of every pretraining that records one, a row per pretraining."""
    checked = frame[frame["stall"].map(lambda s: isinstance(s, dict))] if "stall" in frame else frame.iloc[:0]
    if checked.empty:
        return []
    rules = {json.dumps(s["rule"], sort_keys=True) for s in checked["stall"]}
    rule = checked["stall"].iloc[0]["rule"]
    restarts = checked["stall"].map(lambda s: s["restarts"])
    restarted = int((restarts > 0).sum())
    acts = (
        f"restarts a pretraining whose loss is still above the entropy minus {rule['margin']:g} nats, from its "
        f"start at the learning rate x {rule['lr_factor']:g}, at most {rule['max_restarts']} time(s)"
        if rule["max_restarts"]
        else "is off (pretrain.stall.max_restarts=0): the check is recorded, nothing restarts"
    )
    unchecked = len(frame) - len(checked)
    lines = [
        f"The stall rule (pretrain.stall, as the pretrainings' records set it): at {rule['check_at']:g} of "
        f"the step budget it reads the masked-LM loss (the mean over the last steps) against the entropy of the "
        f"corpus's token frequencies, and {acts}. {restarted} of {len(checked)} pretrainings that record the "
        f"check were restarted (the rows marked yes"
        + (f"; {int(restarts.sum())} restarts in all" if restarts.sum() > restarted else "")
        + ")"
        + ("" if len(rules) == 1 else f" (the records hold {len(rules)} settings of the rule)")
        + (f"; the records of the other {unchecked} hold no check (not recorded)" if unchecked else "")
        + ". A row per pretraining, each attempt with its learning rate, its loss at the check and the check's step "
        "(a restarted attempt ran to its check and stopped there: its steps are not in the encoder, its minutes "
        "are in the pretraining's recorded minutes):",
        "",
        *stall_table(checked, records),
        "",
    ]
    return lines


def stall_columns(frame: pd.DataFrame, cells: Mapping[str, str]) -> pd.DataFrame:
    """report.csv's columns, per configuration as report.csv's rows are (`cells`: a replicated
    configuration's keys -> its cell's key): its pretrainings' restarts in all and the pretraining
    rate they ended at; NaN where one of its pretrainings records no check (the sum would be short),
    and the rate NaN where its seeds ended at different rates (the section's table gives each)."""
    checked = frame["stall"].map(lambda s: isinstance(s, dict)) if "stall" in frame else None
    if checked is None or not checked.any():
        return pd.DataFrame()
    frame = frame.assign(cell=frame["config_hash"].map(lambda key: cells.get(key, key)), checked=checked)
    columns = {}
    for cell, part in frame.groupby("cell", sort=False):
        if not part["checked"].any():
            continue
        complete = bool(part["checked"].all())
        rates = {s["lr"] for s in part.loc[part["checked"], "stall"]}
        columns[cell] = {
            "pretrain_restarts": sum(s["restarts"] for s in part["stall"]) if complete else float("nan"),
            "pretrain_lr": next(iter(rates)) if complete and len(rates) == 1 else float("nan"),
        }
    table = pd.DataFrame.from_dict(columns, orient="index")
    table.index.name = "config_hash"
    return table
