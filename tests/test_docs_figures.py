"""Prose cannot drift from the records: every decimal figure in the README's answer and in
docs/findings.md is found, to its printed digits, in the stage output or record named beside it.

Each figure is a phrase of the document and the line (or CSV row, or record) of a committed output
that holds its numbers; a number of the checked text that no phrase covers fails, as does a phrase
whose number no longer rounds from its source. Counts and shares written as integers (4,553
titles, 41 %) describe the data, not a record, and are not checked here.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\d.])[-+]?\d+\.\d+|(?<=\.\.)[-+]?\d+\.\d+")

# Decimals that are settings, levels or outside figures, not results of a record, each with its why.
CONSTANTS = {
    "0.857": "KLUE's reported dev-split range (Park et al. 2021), outside this project",
    "0.872": "KLUE's reported dev-split range (Park et al. 2021), outside this project",
    "98.75": "the confidence level of report.md's four comparisons with the baselines (Bonferroni over 4)",
    "99.29": "the confidence level of report.md's seven pretrain x encoder interactions (Bonferroni over 7)",
    "0.01": "the verdict rule's negligible margin (klue_tc.report.claims.NEGLIGIBLE)",
    "0.02": "the verdict rule's sharp-fall margin (klue_tc.report.claims.SHARP_DROP)",
    "0.5": "the plateau margin of the stall rule and the report, in nats (pretrain.stall.margin)",
    "3.0": "the ensemble's target over TF-IDF + SVM, in points, set before it was built",
    "2.0": "the ensemble's target over NB-SVM, in points, set before it was built",
    "2105.09680": "the arXiv identifier of the KLUE paper",
    "0.0000": "the validation seed-variance estimate, quoted with its CV counterpart from report.md",
}


@dataclass(frozen=True)
class Figure:
    doc: str  # the document, relative to the repository
    text: str  # its words as printed (whitespace collapsed), holding one or more figures
    source: str  # the committed output or record holding them
    where: str  # a substring of the source's line; for a CSV "column=value" naming the row; for JSON a key path
    points: bool = False  # printed in points (x 100)


ENSEMBLE = "docs/ensemble/ensemble.csv"
ENSEMBLE_MD = "docs/ensemble/ensemble.md"
STUDY = "docs/study/report.md"
PRETRAIN = "docs/study-pretrain/report.md"
CLAIMS = "docs/study-pretrain/claims.md"
STUDENT = "docs/distill/results/7388efef8588/fold0.json"  # distill.alpha=0.5
CONTROL = "docs/distill/results/f61e029daa44/fold0.json"  # the same job, distill.alpha=0
NB = "NB-SVM, char_wb 1-3-grams (Wang & Manning 2012)"
TFIDF = "TF-IDF char_wb 1-3-grams + linear SVM"
README = "README.md"
PRE_LN = "(iv) Does pre-LN help at these depths (all encoders; pre − post)? pre − post: "
POST_LN = "(vi) Do more layers help under post-LN?"
SLOPE = "fitted slope × 4 layers: "
MLM = "help (all encoders; mlm − none; 2 seeds at 4 layers; 1 seed at 2, 6 layers)? mlm − none: "
PARALLEL = "(ii) TRANS-BLSTM is the highest encoder (trans_blstm_parallel). trans_blstm_parallel − cnn: "
FINDINGS = "docs/findings.md"

FIGURES = [
    # The README's answer: the full-training ensemble and its bar.
    Figure(README, "the ensemble scores 0.846 macro-F1", ENSEMBLE, "name=ensemble"),
    Figure(README, "against 0.814 for TF-IDF + SVM", ENSEMBLE, f"name={TFIDF}"),
    Figure(README, "and 0.824 for NB-SVM", ENSEMBLE, f"name={NB}"),
    Figure(README, "+3.2 points (95 % +2.3..+4.1)", ENSEMBLE, f"name=ensemble - {TFIDF}", points=True),
    Figure(README, "and +2.3 (+1.5..+3.1)", ENSEMBLE, f"name=ensemble - {NB}", points=True),
    Figure(README, "NB-SVM scores 0.838", ENSEMBLE_MD, f"| {NB}, offset by class |"),
    Figure(README, "lead is +0.8 (+0.03..+1.7)", ENSEMBLE, f"name=ensemble - {NB}, offset by class", points=True),
    Figure(
        README,
        "and +2.1 (+1.3..+3.0) at train's",
        ENSEMBLE,
        f"name=ensemble - {NB}, offset by class (training class mix)",
        points=True,
    ),
    Figure(README, "One model scores 0.808", ENSEMBLE, "name=sentencepiece / transformer / post / L3"),
    Figure(README, "to 0.819 (that design on all of train", CONTROL, "validation.f1"),
    Figure(README, "soft labels, 0.818", STUDENT, "validation.f1"),
    Figure(README, "| **0.846** |", ENSEMBLE, "name=ensemble"),
    Figure(README, "(3 folds of 10,000 titles) | 0.806 |", "docs/study-pretrain/ensemble.csv", "name=ensemble"),
    Figure(README, "`distill.alpha=0`, on all of train | 0.819 |", CONTROL, "validation.f1"),
    Figure(README, "the ensemble's bar | 0.814 /", ENSEMBLE, f"name={TFIDF}"),
    Figure(README, "/ 0.824 | fitted", ENSEMBLE, f"name={NB}"),
    Figure(README, "as the ensemble is | 0.829 /", ENSEMBLE_MD, f"| {TFIDF}, offset by class |"),
    Figure(README, "/ 0.838 | the ensemble stage", ENSEMBLE_MD, f"| {NB}, offset by class |"),
    # The README's design study and docs/findings.md: docs/study (from scratch).
    Figure(README, "behind both baselines (0.780", STUDY, "| cnn / post | 0.777"),
    Figure(README, "against 0.799", STUDY, f"| {TFIDF} | 0.799"),
    Figure(README, "and 0.798;", STUDY, f"| {NB} | 0.798"),
    Figure(FINDINGS, "best by CV scores 0.780", STUDY, "| cnn / post | 0.777"),
    Figure(FINDINGS, "against 0.799 for TF-IDF", STUDY, f"| {TFIDF} | 0.799"),
    Figure(FINDINGS, "and 0.798 for NB-SVM", STUDY, f"| {NB} | 0.798"),
    # docs/study-pretrain.
    Figure(FINDINGS, "4 layers (0.795 CV)", PRETRAIN, "| cnn / post / mlm | 0.784"),
    Figure(FINDINGS, "(TF-IDF + SVM +0.007, -0.011..+0.027;", PRETRAIN, f"| mecab / cnn / post / L4 / mlm − {TFIDF} |"),
    Figure(FINDINGS, "NB-SVM -0.010, -0.025..+0.005)", PRETRAIN, f"| mecab / cnn / post / L4 / mlm − {NB} |"),
    Figure(FINDINGS, "behind both (-0.018, -0.033..-0.001;", PRETRAIN, f"| mecab / cnn / post / L4 / mlm − {TFIDF} |"),
    Figure(FINDINGS, "-0.026, -0.041..-0.011)", PRETRAIN, f"| mecab / cnn / post / L4 / mlm − {NB} |"),
    Figure(
        FINDINGS,
        "the parallel TRANS-BLSTM +0.027 CV (+0.020..+0.033; +0.015..+0.038)",
        PRETRAIN,
        "| pretrain × encoder: mlm − none, trans_blstm_parallel",
    ),
    Figure(
        FINDINGS,
        "the CNN-augmented encoder +0.015 (+0.009..+0.022; +0.006..+0.022)",
        PRETRAIN,
        "| pretrain × encoder: mlm − none, cnn",
    ),
    Figure(FINDINGS, "Transformer +0.016 (+0.010..+0.022; +0.009..+0.025)", PRETRAIN, "mlm − none, transformer ("),
    Figure(
        FINDINGS,
        "sequential TRANS-BLSTM +0.008 CV (+0.001..+0.014; -0.002..+0.019",
        PRETRAIN,
        "| pretrain × encoder: mlm − none, trans_blstm (",
    ),
    Figure(
        FINDINGS, "+0.005 on validation-a (-0.006..+0.015)", PRETRAIN, "| pretrain × encoder: mlm − none, trans_blstm ("
    ),
    Figure(FINDINGS, "(8 df): 0.0020 CV", PRETRAIN, "pooled residual std 0.0067"),
    Figure(FINDINGS, "on validation-a its estimate is 0.0000", PRETRAIN, "pooled residual std 0.0121"),
    # docs/findings.md: the claims, as claims.md judges them.
    Figure(
        FINDINGS,
        "+0.005 against the CNN",
        CLAIMS,
        f"- **inconclusive**: {PARALLEL}+0.005",
    ),
    Figure(FINDINGS, "the fall is -0.004 (95 % -0.007..-0.0001)", CLAIMS, "5-6 layers − 2-4 layers: -0.004 (Holm 99.8"),
    Figure(
        FINDINGS,
        "(-0.010 CV,",
        CLAIMS,
        f"- **no**: {PRE_LN}-0.010",
    ),
    Figure(
        FINDINGS,
        "-0.016 validation)",
        CLAIMS,
        f"- **no**: {PRE_LN}-0.016",
    ),
    Figure(FINDINGS, "no gain (+0.0003 CV)", CLAIMS, f"(fitted slope of F1 over layers)? {SLOPE}+0.0003"),
    Figure(
        FINDINGS,
        "more layers help (+0.006 CV,",
        CLAIMS,
        f"- **yes**: {POST_LN} {SLOPE}+0.006",
    ),
    Figure(
        FINDINGS,
        "+0.009 validation over the grid",
        CLAIMS,
        f"{POST_LN} {SLOPE}+0.009",
    ),
    Figure(
        FINDINGS,
        "alone +0.010 CV",
        CLAIMS,
        f"| {POST_LN} | **no**: {SLOPE}+0.003",
    ),
    Figure(
        FINDINGS,
        "and +0.023 validation",
        CLAIMS,
        f"| {POST_LN} | **yes**: {SLOPE}+0.006",
    ),
    Figure(
        FINDINGS,
        "they do not (-0.006)",
        CLAIMS,
        f"- **no**: (vi) Do more layers help under pre-LN? {SLOPE}-0.006",
    ),
    Figure(
        FINDINGS,
        "pretraining helps (+0.016 CV,",
        CLAIMS,
        f"- **yes**: (vii) Does self-pretraining (mlm) {MLM}+0.016",
    ),
    Figure(
        FINDINGS,
        "+0.027 validation)",
        CLAIMS,
        f"- **yes**: (vii) Does self-pretraining (mlm) {MLM}+0.027",
    ),
]

SECTIONS = {README: ("## The answer", "## Install"), FINDINGS: ("# Findings", None)}


def collapsed(text: str) -> str:
    return " ".join(text.split())


def checked_text(doc: str) -> str:
    text = (REPO / doc).read_text(encoding="utf-8")
    start, end = SECTIONS[doc]
    text = text[text.index(start) :]
    return collapsed(text[: text.index(end)] if end else text)


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def source_values(figure: Figure) -> list[float]:
    path = REPO / figure.source
    if path.suffix == ".csv":
        column, _, value = figure.where.partition("=")
        with path.open(encoding="utf-8") as handle:
            rows = [row for row in csv.DictReader(handle) if row[column] == value]
        assert rows, f"{figure.source}: no row with {figure.where}"
        cells = [cell for cell in rows[0].values() if cell]
        return [float(cell) for cell in cells if re.fullmatch(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", cell)]
    if path.suffix == ".json":
        node = json.loads(path.read_text(encoding="utf-8"))
        for key in figure.where.split("."):
            node = node[key]
        return [float(node)]
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if figure.where in line]
    assert lines, f"{figure.source}: no line holding {figure.where!r}"
    return [float(n) for n in numbers(lines[0])]


def rounds_to(printed: str, candidates: list[float], points: bool) -> bool:
    digits = len(printed.split(".")[1])
    value, scale = float(printed), 100.0 if points else 1.0
    return any(abs(c * scale - value) <= 0.5 * 10**-digits + 1e-9 for c in candidates)


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f"{Path(f.doc).name}: {f.text}")
def test_each_figure_is_found_in_its_source_to_the_printed_digits(figure):
    text = checked_text(figure.doc)
    assert figure.text in text, f"{figure.doc} no longer says {figure.text!r}"
    candidates = source_values(figure)
    for printed in numbers(figure.text):
        if printed.lstrip("+-") in CONSTANTS:
            continue
        assert rounds_to(printed, candidates, figure.points), (
            f"{figure.doc}: {printed} in {figure.text!r} is not in {figure.source} ({figure.where}): {candidates}"
        )


@pytest.mark.parametrize("doc", list(SECTIONS))
def test_every_decimal_in_the_answer_and_the_findings_has_a_source(doc):
    text = checked_text(doc)
    covered = [0] * len(text)
    for figure in (f for f in FIGURES if f.doc == doc):
        for match in re.finditer(re.escape(figure.text), text):
            covered[match.start() : match.end()] = [1] * (match.end() - match.start())
    loose = [
        m.group() for m in NUMBER.finditer(text) if not covered[m.start()] and m.group().lstrip("+-") not in CONSTANTS
    ]
    assert not loose, f"{doc}: figures with no source in tests/test_docs_figures.py: {loose}"


def test_a_changed_figure_or_record_is_caught(tmp_path):
    """The check itself: a digit changed in the prose, or a value in the source, no longer matches."""
    figure = FIGURES[0]
    candidates = source_values(figure)
    (printed,) = numbers(figure.text)
    assert rounds_to(printed, candidates, False)
    assert not rounds_to(f"{float(printed) + 0.001:.3f}", candidates, False)
    assert not rounds_to(printed, [c + 0.002 for c in candidates], False)


def run_stage(args: list[str], cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.integration
@pytest.mark.integration
def test_the_committed_study_outputs_are_what_the_records_give_today(tmp_path):
    """The other half of the tie: the report regenerated from docs/study-pretrain's records (the
    from-scratch study's beside it) writes the committed claims.md and report.csv byte for byte, so a
    changed record turns this red even where no figure above moves."""
    for study in ("study-pretrain", "study"):
        shutil.copytree(REPO / "docs" / study, tmp_path / "docs" / study)
    run_stage(["klue_tc.report", "docs/study-pretrain", "--beside", "docs/study/results"], tmp_path)
    for name in ("claims.md", "report.csv"):
        written = (tmp_path / "docs" / "study-pretrain" / name).read_text(encoding="utf-8")
        assert written == (REPO / "docs" / "study-pretrain" / name).read_text(encoding="utf-8"), name


@pytest.mark.integration
@pytest.mark.integration
def test_the_committed_ensemble_is_what_its_records_give_today(tmp_path):
    """The ensemble stage on a copy of docs/ensemble's records and baselines writes the committed
    ensemble.csv, but for the student's rows (its run directory is not in git: its record is, and the
    figures above read it there)."""
    shutil.copytree(REPO / "docs" / "ensemble", tmp_path / "docs" / "ensemble")
    run_stage(["klue_tc.ensemble", "docs/ensemble"], tmp_path)

    def rows(path: Path) -> list[str]:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if "student" not in line]

    assert rows(tmp_path / "docs" / "ensemble" / "ensemble.csv") == rows(REPO / ENSEMBLE)
