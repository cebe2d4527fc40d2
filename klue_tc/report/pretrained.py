"""The pretrained encoders the records started from: what each pretraining read (and that no scored
title was among it) and what it cost, in minutes per machine."""

from __future__ import annotations

import json
from typing import Sequence

import pandas as pd

from klue_tc.pretraining.frequency_plateau import PLATEAU_NATS, plateau_warning
from klue_tc.report.sections import Findings, by_design, layer_table
from klue_tc.report.speed import machine_name
from klue_tc.store.records import FoldResult


def pretrainings(records: Sequence[FoldResult]) -> pd.DataFrame:
    """One row per pretrained encoder (indexed by its store key): the configuration that started
    from it, what it read, its last loss and seconds, and the machine that ran it: as its record
    says (klue_tc.report.loading.upgraded_record names it for older records that did not: the machine
    of the fold whose first step waited for it; unknown where every fold found it stored)."""
    rows: dict[str, dict] = {}
    for record in sorted(records, key=lambda r: r.fold):
        stored = record.pretrained
        if not stored or not stored.get("key"):
            continue
        row = rows.setdefault(
            stored["key"],
            {
                "config_hash": record.config_hash,
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


def pretraining_section(records: Sequence[FoldResult]) -> Findings:
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
    columns = stall_columns(frame)
    timed = frame.dropna(subset=["machine", "seconds"])
    if timed.empty:
        return Findings(lines, columns=columns)
    lines += [
        "Minutes of pretraining as recorded, one table per machine (wall clock under whatever else ran beside it):",
        "",
    ]
    for name, part in timed.groupby("machine", sort=False):
        minutes = by_design(part, records, lambda rows: f"{rows['seconds'].iloc[0] / 60:.0f}")
        lines += [f"### {name}", "", *layer_table(minutes), ""]
    return Findings(lines, columns=columns)


def loss_lines(frame: pd.DataFrame, records: Sequence[FoldResult]) -> list[str]:
    """Each encoder's objective loss where pretraining ended: how far each design got in the same
    steps, beside what pretraining then gave it in fine-tuning (Interactions: pretrain x encoder)."""
    ended = frame.dropna(subset=["final_loss"])
    if ended.empty:
        return []
    window = ended["final_loss_steps"].dropna()
    if len(window) == len(ended):
        over = f"the mean over its last {int(window.max())} steps"
    else:  # older code kept the last step's loss
        over = (
            "the last step's loss, as the code that made these records kept it, which moves by tenths from step "
            "to step" + ("; the mean over the last steps where the record says how many" if len(window) else "")
        )
    plateaued = {key for key, row in ended.iterrows() if plateau_warning(row.to_dict())}

    def loss_cell(rows: pd.DataFrame) -> str:
        return f"{rows['final_loss'].iloc[0]:.2f}" + (" (frequencies)" if rows.index[0] in plateaued else "")

    losses = by_design(ended, records, loss_cell)
    lines = [
        f"The pretraining objective's loss where it ended ({over}): among rows of one tokenizer and "
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


def stall_cell(rows: pd.DataFrame) -> str:
    """An encoder's checks in one cell: each check's loss, and what the rule did there."""
    summary = rows["stall"].iloc[0]
    factor = summary["rule"]["lr_factor"]
    parts = []
    for check in summary["checks"]:
        threshold = check["plateau"] - check["margin"]
        if check["restarted"]:
            done = f"restarted at lr {check['lr'] * factor:g}"
        else:
            done = "on the plateau" if check["loss"] > threshold else "left it"
        parts.append(f"lr {check['lr']:g}: {check['loss']:.2f} at step {check['step']}, {done}")
    return "; ".join(parts) or "not checked"


def stall_lines(frame: pd.DataFrame, records: Sequence[FoldResult]) -> list[str]:
    """The stall rule's check of every pretraining that records one, a cell per configuration."""
    checked = frame[frame["stall"].map(lambda s: isinstance(s, dict))] if "stall" in frame else frame.iloc[:0]
    if checked.empty:
        return []
    rules = {json.dumps(s["rule"], sort_keys=True) for s in checked["stall"]}
    rule = checked["stall"].iloc[0]["rule"]
    restarted = int((checked["stall"].map(lambda s: s["restarts"]) > 0).sum())
    acts = (
        f"restarts a pretraining whose loss is still above the entropy minus {rule['margin']:g} nats, from its "
        f"start at the learning rate x {rule['lr_factor']:g}, at most {rule['max_restarts']} time(s)"
        if rule["max_restarts"]
        else "is off (pretrain.stall.max_restarts=0): the check is recorded, nothing restarts"
    )
    lines = [
        f"The stall rule (pretrain.stall, fixed in the config before the jobs ran): at {rule['check_at']:g} of "
        f"the step budget it reads the masked-LM loss (the mean over the last steps) against the entropy of the "
        f"corpus's token frequencies, and {acts}. {restarted} of {len(checked)} pretrainings were restarted"
        + ("" if len(rules) == 1 else f" (the records hold {len(rules)} settings of the rule)")
        + ":",
        "",
        *layer_table(by_design(checked, records, stall_cell)),
        "",
    ]
    return lines


def stall_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """report.csv's columns: each configuration's restarts and the pretraining rate it ended at."""
    checked = frame[frame["stall"].map(lambda s: isinstance(s, dict))] if "stall" in frame else frame.iloc[:0]
    if checked.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "pretrain_restarts": checked["stall"].map(lambda s: s["restarts"]).to_numpy(),
            "pretrain_lr": checked["stall"].map(lambda s: s["lr"]).to_numpy(),
        },
        index=pd.Index(checked["config_hash"], name="config_hash"),
    )
