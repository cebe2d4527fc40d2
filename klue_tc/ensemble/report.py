"""The ensemble's files: ensemble.md (what was chosen, how, and how it scores against its best
member and the linear baselines), ensemble.csv (a row per candidate member, the ensemble, and each
comparison), and, when asked, one W&B run holding both tables."""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from klue_tc.core.config import WandbConfig
from klue_tc.ensemble.members import LINEAR
from klue_tc.ensemble.scoring import signed
from klue_tc.ensemble.selection import F1, macro_f1_of
from klue_tc.ensemble.stage import Ensemble
from klue_tc.report.grid_model import CONFIDENCE
from klue_tc.report.title_bootstrap import RESAMPLES

log = logging.getLogger(__name__)

CSV_COLUMNS = [
    "role",  # candidate, ensemble, student or comparison
    "name",
    "kind",
    "key",
    "folds",
    "votes",
    "temperature",
    "weight",
    "oof_f1",
    "validation_f1",
    "validation_f1_low",
    "validation_f1_high",
    "fold_models_validation_f1",
    "versus",
    "difference",
    "difference_low",
    "difference_high",
    "class_mix",  # a comparison's: the validation titles as they come, or weighted to the training titles' mix
]
METRIC_WORDS = {F1: "macro-F1", "log_loss": "log-loss"}


def f3(value: Optional[float]) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def member_rows(ensemble: Ensemble) -> list[dict]:
    labels = ensemble.titles.labels
    scores = ensemble.validation.members if ensemble.validation else {}
    return [
        {
            "role": "candidate",
            "name": member.name,
            "kind": member.kind,
            "key": member.key,
            "folds": len(member.folds),
            "votes": member.votes,
            "temperature": None if member.votes else member.temperature,
            "weight": weight,
            "oof_f1": macro_f1_of(labels, member.oof),
            "validation_f1": scores.get(member.key),
            "fold_models_validation_f1": member.fold_validation_f1,
        }
        for member, weight in zip(ensemble.members, ensemble.weights.values())
    ]


def csv_frame(ensemble: Ensemble) -> pd.DataFrame:
    rows = member_rows(ensemble)
    scored = ensemble.validation
    rows.append(
        {
            "role": "ensemble",
            "name": "ensemble",
            "weight": 1.0,
            "oof_f1": ensemble.oof_f1,
            "validation_f1": scored.f1 if scored else None,
            "validation_f1_low": scored.low if scored else None,
            "validation_f1_high": scored.high if scored else None,
        }
    )
    student = ensemble.student
    if student is not None:
        rows.append(
            {
                "role": "student",
                "name": "distilled student",
                "validation_f1": student.f1,
                "validation_f1_low": student.low,
                "validation_f1_high": student.high,
            }
        )
    compared = [
        (d, "validation") for d in [*(scored.differences if scored else []), *([student.versus] if student else [])]
    ]
    compared += [(d, "training") for d in (scored.train_mix_differences if scored else [])]
    for difference, mix in compared:
        rows.append(
            {
                "role": "comparison",
                "name": f"ensemble - {difference.versus}" + (" (training class mix)" if mix == "training" else ""),
                "versus": difference.versus,
                "difference": difference.difference,
                "difference_low": difference.low,
                "difference_high": difference.high,
                "class_mix": mix,
            }
        )
    return pd.DataFrame(rows, columns=CSV_COLUMNS).astype({"folds": "Int64"})


def offsets_sentence(ensemble: Ensemble) -> str:
    if ensemble.class_offsets is None:
        return ""
    offsets = ", ".join(f"{name} {value:+.3f}" for name, value in zip(ensemble.label_names, ensemble.class_offsets))
    return (
        " The weighted mean is then offset by class (one number per class added to its log, of least "
        f"out-of-fold log-loss, so that each class's mean probability is its share of the training titles): {offsets}."
    )


def table(rows: list[list], header: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def markdown(ensemble: Ensemble, command: str) -> str:
    selection, members = ensemble.selection, ensemble.members
    scored = ensemble.validation
    linear = sum(m.kind == LINEAR for m in members)
    rows = member_rows(ensemble)
    baselines = f"{linear} linear baselines on the same folds" if linear else "no linear baseline"
    lines = [
        f"# Ensemble: {ensemble.directory}",
        "",
        f"Written by `{command}`.",
        "",
        f"{len(members)} candidate members ({len(members) - linear} configurations, one per pretraining seed, whose "
        f"fold models score every training title once, {baselines}), on "
        f"{len(ensemble.titles.labels):,} training titles out of fold"
        + (f" and {len(ensemble.titles.validation_labels):,} validation titles ({scored.source})." if scored else "."),
        f"Each member's temperature minimises its out-of-fold log-loss; greedy forward selection with "
        f"replacement (Caruana et al. 2004) by out-of-fold {METRIC_WORDS[selection.metric]} kept "
        f"{selection.kept_rounds} of {len(selection.f1)} rounds; a member's weight is how often it was chosen."
        + offsets_sentence(ensemble)
        + " The validation titles chose nothing: they only score the result.",
        "",
        "## The ensemble",
        "",
    ]
    chosen = [
        [row["name"], row["kind"], f"{row['weight']:.3f}", "votes" if row["votes"] else f"{row['temperature']:.3f}"]
        + [f3(row["oof_f1"]), f3(row["validation_f1"])]
        for row in rows
        if row["weight"] > 0
    ]
    chosen.append(
        ["**ensemble**", "", "1", "", f3(ensemble.oof_f1)]
        + [f"**{f3(scored.f1)}** ({scored.low:.4f}..{scored.high:.4f})" if scored else "–"]
    )
    lines += table(
        chosen,
        ["member", "kind", "weight", "temperature", "OOF macro-F1", "validation macro-F1 (fold ensemble)"],
    )
    lines += ["", "Its out-of-fold score chose it and is flattered; the validation score is not.", ""]
    lines += student_lines(ensemble)
    if scored:
        lines += [
            "## Against its best member and the linear baselines",
            "",
            f"On the validation titles, each side as its own fold ensemble; {CONFIDENCE * 100:g} % intervals of "
            f"the difference from a paired bootstrap of the titles ({RESAMPLES} resamples, percentile). "
            f"The best member is the one of best out-of-fold {METRIC_WORDS[selection.metric]} (the first chosen)."
            + (
                " Each linear baseline is also given the ensemble's last step, class offsets of its own chosen on "
                "its own out-of-fold predictions (', offset by class'), so that the offsets alone do not pass "
                "for the ensemble's gain."
                if ensemble.class_offsets is not None
                else ""
            ),
            "",
        ]
        lines += table(
            [
                [d.versus, f3(scored.members.get(d.key)), signed(d.difference)]
                + [f"{d.low:+.4f}..{d.high:+.4f}", d.verdict]
                for d in scored.differences
            ],
            ["ensemble minus", "its validation macro-F1", "difference", "interval", "verdict"],
        )
        lines.append("")
        if scored.train_mix_differences:
            lines += [
                f"At the training titles' class mix (each validation title weighing p_train / p_val of its class, "
                f"as if the titles came in the mix the members were trained and chosen on): the ensemble "
                f"{f3(scored.train_mix_f1)}, the same paired intervals.",
                "",
            ]
            lines += table(
                [
                    [d.versus, signed(d.difference), f"{d.low:+.4f}..{d.high:+.4f}", d.verdict]
                    for d in scored.train_mix_differences
                ],
                ["ensemble minus, at the training mix", "difference", "interval", "verdict"],
            )
            lines.append("")
    lines += ["## Every candidate's fold ensemble", ""]
    lines += table(
        [
            [row["name"], row["folds"], f3(row["oof_f1"]), f3(row["fold_models_validation_f1"])]
            + [f3(row["validation_f1"]), gain(row)]
            for row in rows
        ],
        [
            "member",
            "folds",
            "OOF macro-F1",
            "validation: fold models alone (mean)",
            "validation: fold ensemble",
            "gain",
        ],
    )
    lines += ["", "The fold ensemble averages the fold models' calibrated probabilities (votes where none were kept)."]
    if scored:
        lines += ["", "ensemble.png draws this table: each candidate's fold ensemble beside the ensemble, by weight."]
    if ensemble.notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in ensemble.notes)]
    return "\n".join(lines) + "\n"


def student_lines(ensemble: Ensemble) -> list[str]:
    """The distilled student beside the ensemble, on the same validation titles."""
    from klue_tc.ensemble.scoring import WITHIN_POINTS

    student = ensemble.student
    if student is None:
        return []
    d = student.versus
    lines = [
        "## The distilled student",
        "",
        f"One model trained on the ensemble's out-of-fold soft labels (`{student.source}`), served at one "
        f"model's cost; the target: within {WITHIN_POINTS:g} macro-F1 point of the ensemble.",
        "",
    ]
    lines += table(
        [
            [
                f"{student.f1:.4f} ({student.low:.4f}..{student.high:.4f})",
                signed(d.difference),
                f"{d.low:+.4f}..{d.high:+.4f}",
                "yes" if student.within_target else "no",
            ]
        ],
        ["student validation macro-F1", "ensemble minus student", "interval", f"within {WITHIN_POINTS:g} point"],
    )
    return [*lines, ""]


def gain(row: dict) -> str:
    if row["validation_f1"] is None or row["fold_models_validation_f1"] is None:
        return "–"
    return signed(row["validation_f1"] - row["fold_models_validation_f1"])


def report_files(directory: Path) -> list[Path]:
    from klue_tc.ensemble.plot import PLOT_FILE

    return [directory / "ensemble.md", directory / "ensemble.csv", directory / PLOT_FILE]


def report_holds(ensemble: Ensemble) -> bool:
    """Whether the report in the ensemble's folder already holds this very ensemble: the same
    candidates, weights, temperatures, class offsets and scores (ensemble.csv's rows to the last
    digit, the offsets as ensemble.md gives them). A student's rows, which only `--student` writes,
    are left out of the comparison."""
    markdown_path, csv_path, _ = report_files(ensemble.directory)
    try:
        stored = pd.read_csv(csv_path)
        text = markdown_path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return False
    fresh = pd.read_csv(io.StringIO(csv_frame(ensemble).to_csv(index=False)))  # read back as the file is

    def without_student(frame: pd.DataFrame) -> pd.DataFrame:
        student = (frame["role"] == "student") | (frame["versus"] == "the distilled student")
        return frame[~student].reset_index(drop=True)

    stored, fresh = without_student(stored), without_student(fresh)
    if list(stored.columns) != list(fresh.columns) or len(stored) != len(fresh):
        return False
    for column in stored.columns:
        a, b = stored[column], fresh[column]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            same = np.allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-9, atol=0.0, equal_nan=True)
        else:
            same = a.fillna("").astype(str).tolist() == b.fillna("").astype(str).tolist()
        if not same:
            return False
    offsets = offsets_sentence(ensemble)
    return offsets.strip() in text if offsets else "offset by class (one number per class" not in text


def write_files(ensemble: Ensemble, command: str) -> list[Path]:
    from klue_tc.ensemble.plot import PLOT_FILE, plot_ensemble

    directory = ensemble.directory
    (directory / "ensemble.md").write_text(markdown(ensemble, command), encoding="utf-8")
    csv_frame(ensemble).to_csv(directory / "ensemble.csv", index=False)
    plot = plot_ensemble(ensemble, directory / PLOT_FILE)
    return [directory / "ensemble.md", directory / "ensemble.csv", *([plot] if plot else [])]


def log_to_wandb(ensemble: Ensemble, settings: WandbConfig, group: Optional[str]) -> None:
    """One W&B run holding the tables; a failure is one warning: the files are the record."""
    from klue_tc.jobs.loggers import finish_wandb_run, open_wandb_run
    from klue_tc.report.wandb_run import for_wandb

    directory = ensemble.directory
    run = open_wandb_run(settings, directory, f"ensemble-{group or directory.name}", group, "ensemble")
    if run is None:
        return
    try:
        import wandb

        frame = csv_frame(ensemble)
        summary = {"ensemble/oof_f1": ensemble.oof_f1}
        if ensemble.class_offsets is not None:
            summary |= {
                f"ensemble/class_offset/{n}": float(v) for n, v in zip(ensemble.label_names, ensemble.class_offsets)
            }
        if ensemble.validation:
            summary["ensemble/validation_f1"] = ensemble.validation.f1
            summary |= {f"ensemble/minus {d.versus}": d.difference for d in ensemble.validation.differences}
        if ensemble.student is not None:
            summary["ensemble/student_validation_f1"] = ensemble.student.f1
        plot = directory / "ensemble.png"
        if plot.is_file():
            summary["ensemble/plot"] = wandb.Image(str(plot))
        run.log(
            {
                "ensemble_members": wandb.Table(dataframe=for_wandb(frame[frame["role"] != "comparison"])),
                "ensemble_comparisons": wandb.Table(dataframe=for_wandb(frame[frame["role"] == "comparison"])),
                **summary,
            }
        )
    except Exception as err:
        log.warning(
            "ensemble not logged to W&B (%s: %s)", type(err).__name__, str(err).splitlines()[0] if str(err) else ""
        )
    finish_wandb_run(run)
