"""The F1 comparison table from synthetic metrics.json files laid out as a sweep would leave them."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from klue_tc.report.core_sections.metric_tables import f1_tables
from klue_tc.report.summary import CSV_COLUMNS
from klue_tc.report.wandb_run import TABLE_KEY
from klue_tc.report.write import write_report

FOLDS = 3
# (tokenizer, encoder, ln, layers) present in the synthetic sweep; mecab lacks some cells.
CONFIGS = [
    (tok, enc, ln, layers)
    for tok in ("sentencepiece", "mecab")
    for enc, ln in (("transformer", "post"), ("transformer", "pre"), ("trans_blstm", "post"))
    for layers in (2, 4, 6)
    if not (tok == "mecab" and (layers == 6 or enc == "trans_blstm" and layers == 4))
]


def fold_f1(config_index: int, fold: int) -> float:
    return float(np.random.default_rng(config_index * 10 + fold).uniform(0.5, 0.9))


def metrics(tok, enc, ln, layers, folds, head="cls", key=None, **extra) -> dict:
    key = key or f"{tok}-{enc}-{ln}-{layers}-{head}"
    return {
        "experiment": enc,
        "encoder": enc,
        "ln": ln,
        "layers": layers,
        "head": head,
        "tokenizer": tok,
        "config_hash": key,
        "sweep": "test",
        "cv_folds": FOLDS,
        "folds": [
            {
                "fold": k,
                "f1": f1,
                "accuracy": f1 + 0.05,
                "best_epoch": 1,
                "epochs_run": 2,
                "train_samples_per_s": 1000.0 + k,
                "time_to_first_step_s": 1.0,
                "train_seconds": 60.0,
                "train_size": 100,
                "val_size": 50,
                "checkpoint": None,
                "tokenizer_dir": "",
                **extra,
            }
            for k, f1 in folds
        ],
    }


def write_metrics(path: Path, payload: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.json").write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """One job directory per (configuration, fold), as `make sweep` leaves them, plus odd cases."""
    sweep = tmp_path / "sweep"
    job = 0
    for i, (tok, enc, ln, layers) in enumerate(CONFIGS):
        n_folds = 1 if (tok, enc, ln, layers) == ("mecab", "trans_blstm", "post", 2) else FOLDS
        for k in range(n_folds):
            write_metrics(sweep / str(job), metrics(tok, enc, ln, layers, [(k, fold_f1(i, k))]))
            job += 1
    # A resumed job that re-reported a finished fold: counted once.
    write_metrics(sweep / "rerun", metrics(*CONFIGS[0], [(0, fold_f1(0, 0))]))
    # Not metrics files: ignored.
    (sweep / "results" / "abc").mkdir(parents=True)
    (sweep / "results" / "abc" / "fold0.json").write_text("{}")
    return sweep


def expected(tok, enc, ln, layers) -> tuple[float, float, int]:
    i = CONFIGS.index((tok, enc, ln, layers))
    n = 1 if (tok, enc, ln, layers) == ("mecab", "trans_blstm", "post", 2) else FOLDS
    values = np.array([fold_f1(i, k) for k in range(n)])
    return float(values.mean()), float(values.std(ddof=1)) if n > 1 else float("nan"), n


def plain(cell: str) -> str:
    """A table cell without its marks (bold for the best, * within noise of it)."""
    return cell.replace("**", "").removesuffix(" *")


@pytest.mark.integration
def test_table_values_and_layout(sweep_dir: Path):
    summary = write_report(sweep_dir)

    assert list(summary.columns) == CSV_COLUMNS
    assert len(summary) == len(CONFIGS)
    for row in summary.itertuples():
        mean, std, n = expected(row.tokenizer, row.encoder, row.ln, row.layers)
        assert row.f1_mean == pytest.approx(mean, abs=1e-12)
        assert row.f1_std == pytest.approx(std, abs=1e-12, nan_ok=True)  # no sample std from one fold
        assert row.folds == n

    tables = f1_tables(summary)
    assert list(tables) == ["sentencepiece", "mecab"]
    sp, mecab = tables["sentencepiece"], tables["mecab"]
    assert list(sp.index) == ["transformer / post", "transformer / pre", "trans_blstm / post"]
    assert list(sp.columns) == [2, 4, 6]
    assert list(mecab.columns) == [2, 4]  # only the layer counts present
    # A cell with every fold: its fold mean ±half the grid model's interval (the same for all such cells).
    mean, _, _ = expected("sentencepiece", "trans_blstm", "post", 4)
    half = cell_half(summary, "sentencepiece", "trans_blstm", "post", 4)
    assert plain(sp.loc["trans_blstm / post", 4]) == f"{mean:.3f} ±{half:.3f}"
    assert half == pytest.approx(cell_half(summary, "mecab", "transformer", "pre", 2))
    # One fold: its mean at the average fold (adjusted by the fold effect), a wider interval, (n=1).
    one = summary.set_index(["tokenizer", "encoder", "ln", "layers"]).loc[("mecab", "trans_blstm", "post", 2)]
    assert plain(mecab.loc["trans_blstm / post", 2]).endswith(" (n=1)")
    assert cell_half(summary, "mecab", "trans_blstm", "post", 2) > half
    centre, one_half = (one.f1_low + one.f1_high) / 2, (one.f1_high - one.f1_low) / 2
    assert plain(mecab.loc["trans_blstm / post", 2]) == f"{centre:.3f} ±{one_half:.3f} (n=1)"
    assert mecab.loc["trans_blstm / post", 4] == "–"


def cell_half(summary: pd.DataFrame, *cell) -> float:
    row = summary.set_index(["tokenizer", "encoder", "ln", "layers"]).loc[cell]
    return (row.f1_high - row.f1_low) / 2


@pytest.mark.integration
def test_files_written(sweep_dir: Path):
    summary = write_report(sweep_dir)

    markdown = (sweep_dir / "report.md").read_text(encoding="utf-8")
    assert markdown.count("### tokenizer: ") == 2  # CV only: no validation set was scored
    assert "| encoder / LN | 2 layers | 4 layers | 6 layers |" in markdown
    mean, _, _ = expected("sentencepiece", "transformer", "pre", 6)
    assert f"| {mean:.3f} ±{cell_half(summary, 'sentencepiece', 'transformer', 'pre', 6):.3f}" in markdown
    assert "one model of the whole grid" in markdown and "Hsu's comparison with the best" in markdown
    assert (sweep_dir / "interactions.csv").is_file()

    csv = pd.read_csv(sweep_dir / "report.csv")
    assert list(csv.columns) == CSV_COLUMNS
    pd.testing.assert_frame_equal(csv, summary, check_dtype=False)
    assert csv["train_samples_per_s"].iloc[0] == pytest.approx(1001.0)  # mean of 1000, 1001, 1002

    assert (sweep_dir / "f1_by_layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
def test_the_report_names_the_command_that_writes_it_again(sweep_dir: Path, tmp_path: Path):
    (tmp_path / "other" / "a").mkdir(parents=True)
    write_metrics(tmp_path / "other" / "a", metrics("mecab", "cnn", "post", 2, [(0, 0.7), (1, 0.8)]))
    write_report(sweep_dir, baseline=False, beside=tmp_path / "other")
    command = f"`python -m klue_tc.report {sweep_dir} --no-baseline --beside {tmp_path / 'other'}`"
    assert command in (sweep_dir / "report.md").read_text(encoding="utf-8").split("\n## ")[0]
    assert command in (sweep_dir / "claims.md").read_text(encoding="utf-8")


@pytest.mark.integration
def test_single_run_directory_and_heads(tmp_path: Path):
    """A single run's metrics.json holds all folds; two heads put the head into the row label."""
    write_metrics(tmp_path / "a", metrics("kobert", "cnn", "post", 3, [(0, 0.7), (1, 0.8)], head="cls"))
    write_metrics(tmp_path / "b", metrics("kobert", "cnn", "post", 3, [(0, 0.6), (1, 0.65), (2, 0.7)], head="mean"))

    tables = f1_tables(write_report(tmp_path))

    table = tables["kobert"]
    assert list(table.index) == ["cnn / post / cls", "cnn / post / mean"]
    # cls lacks fold 2, the easiest by the other head's folds (0.60, 0.65, 0.70): least squares with the
    # fold effects (-0.0625, +0.0125, +0.05) puts its mean at the average fold at 0.775, not the plain 0.750.
    assert plain(table.loc["cnn / post / cls", 3]).startswith("0.775 ±")
    assert plain(table.loc["cnn / post / cls", 3]).endswith(" (n=2)")
    assert plain(table.loc["cnn / post / mean", 3]).startswith("0.650 ±")


@pytest.mark.integration
def test_cli_on_a_directory_without_results(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "klue_tc.report", str(tmp_path / "empty")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error:") and "metrics.json" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "empty" / "report.md").exists()


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR"):
        path = tmp_path / "wandb_env" / name.lower()
        path.mkdir(parents=True)
        monkeypatch.setenv(name, str(path))


def offline_run_bytes_once_written(path: Path, key: str, timeout_s: float = 30.0) -> bytes:
    """The offline run file once `key` is in it (or at the timeout): W&B's service process writes
    the file after run.finish() returns (under load the log was still empty for up to half a second)."""
    deadline = time.monotonic() + timeout_s
    while key.encode() not in (content := path.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return content


@pytest.mark.integration
def test_wandb_offline_run_holds_the_table(sweep_dir: Path, offline_wandb, caplog):
    # The sweep callback passes the logger's DictConfig as it is.
    wandb_cfg = OmegaConf.create({"project": "klue_tc_test", "entity": None, "mode": "offline", "group": None})

    with caplog.at_level(logging.WARNING, logger="klue_tc.report"):
        write_report(sweep_dir, log_to_wandb=True, wandb_cfg=wandb_cfg, group="test-sweep")

    runs = list((sweep_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    # A W&B failure is only a warning in write_report; show it if the run is missing.
    assert len(runs) == 1, caplog.text
    assert TABLE_KEY.encode() in offline_run_bytes_once_written(runs[0], TABLE_KEY)
    assert (sweep_dir / "report.md").is_file()


@pytest.mark.integration
def test_wandb_failure_is_one_warning(sweep_dir: Path, offline_wandb, monkeypatch, caplog):
    import wandb

    def refuse(*args, **kwargs):
        raise RuntimeError("no W&B today\nsecond line")

    monkeypatch.setattr(wandb, "init", refuse)
    with caplog.at_level(logging.WARNING, logger="klue_tc"):
        summary = write_report(sweep_dir, log_to_wandb=True, wandb_cfg={"project": "p"}, group="g")

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "W&B" in r.getMessage()]
    assert len(warnings) == 1 and "no W&B today" in warnings[0].getMessage()
    assert len(summary) == len(CONFIGS)
    for name in ("report.md", "report.csv", "f1_by_layers.png"):
        assert (sweep_dir / name).is_file()


@pytest.mark.integration
def test_missing_cells_and_short_configurations_are_named(sweep_dir: Path, caplog):
    with caplog.at_level(logging.WARNING, logger="klue_tc.report"):
        write_report(sweep_dir)
    markdown = (sweep_dir / "report.md").read_text(encoding="utf-8")
    missing = markdown.split("## Missing")[1]
    assert "- mecab / transformer / post / 6 layers: no record" in missing
    assert "- mecab / trans_blstm / post / 2 layers: 1 of 3 folds" in missing
    # every sentencepiece cell of a row that began is there; TRANS-BLSTM pre-LN never began
    assert [line for line in missing.splitlines() if line.startswith("- sentencepiece /")] == [
        "- sentencepiece / trans_blstm / pre / 2, 4, 6 layers: no record"
    ]
    assert any("cells missing or short of folds" in r.getMessage() for r in caplog.records)


def test_a_row_no_record_has_begun_is_missing_too():
    """The CNN was pretrained, TRANS-BLSTM was not yet: its pretrained row, with no record at all,
    is as missing as a single absent cell of a row that has begun."""
    from klue_tc.report.summary import missing_cells

    rows = [
        (enc, "post", pretrain, layers)
        for enc, pretrain in [("cnn", "none"), ("cnn", "mlm"), ("trans_blstm", "none")]
        for layers in (2, 4)
    ]
    summary = pd.DataFrame(rows, columns=["encoder", "ln", "pretrain", "layers"]).assign(tokenizer="mecab", folds=3)
    lines, count = missing_cells(summary, planned_folds=3)
    assert lines == ["mecab / trans_blstm / post / mlm / 2, 4 layers: no record"]
    assert count == 2


@pytest.mark.integration
def test_a_sweep_at_its_first_fold_is_short_of_the_planned_folds(tmp_path: Path):
    """Fold 0 of every configuration and nothing more: each is short of the runs' cv.folds, although
    no configuration has more folds than another."""
    for i, config in enumerate(CONFIGS[:3]):
        job = tmp_path / str(i)
        write_metrics(job, metrics(*config, [(0, fold_f1(i, 0))]))
        OmegaConf.save({"data": {"limit": 100}, "cv": {"folds": FOLDS, "seed": 0}}, job / "config.yaml")
    write_report(tmp_path, baseline=False)
    missing = (tmp_path / "report.md").read_text(encoding="utf-8").split("## Missing")[1]
    assert "- sentencepiece / transformer / post / 2, 4, 6 layers: 1 of 3 folds" in missing  # a line per row


@pytest.mark.integration
def test_validation_column_effects_claims_and_code_versions(tmp_path: Path, caplog):
    """Fold records with validation scores and two code versions: both metrics get a table and
    effects, the claims are judged for both, and the mix of code versions is a warning."""
    rng = np.random.default_rng(0)
    for tok in ("sentencepiece", "mecab"):
        for enc in ("transformer", "cnn"):
            for layers in (2, 3):
                folds = []
                for k in range(3):
                    f1 = 0.75 - (0.05 if enc == "cnn" else 0) + rng.normal(0, 0.002)
                    folds.append((k, f1))
                version = "old" if tok == "mecab" else "new"
                code = {"fingerprint": version, "versions": {"torch": "2"}}
                payload = metrics(
                    tok,
                    enc,
                    "post",
                    layers,
                    folds,
                    code=code,
                    shared_code=version,
                    validation={"f1": 0.6, "accuracy": 0.6, "size": 10, "source": "v"},
                )
                write_metrics(tmp_path / f"{tok}-{enc}-{layers}", payload)
    with caplog.at_level(logging.WARNING, logger="klue_tc.report"):
        summary = write_report(tmp_path)
    assert summary["validation_f1"].tolist() == pytest.approx([0.6] * 8)
    effects = pd.read_csv(tmp_path / "effects.csv")
    cnn = effects[(effects.metric == "f1") & (effects.factor == "encoder")].iloc[0]
    assert cnn.level == "cnn" and cnn.high < 0 and cnn.difference == pytest.approx(-0.05, abs=0.005)
    assert set(effects.metric) == {"f1", "validation_f1"}
    claims = (tmp_path / "claims.md").read_text(encoding="utf-8")
    assert "## CV macro-F1" in claims and "## validation macro-F1" in claims
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "this table mixes records of different code" in markdown
    assert any("mixes records of different code" in r.getMessage() for r in caplog.records)
    assert "8 of 8 configurations were still improving" not in markdown  # best epoch 1 of 2 run


def code(fingerprint: str, shared: Optional[str] = None) -> dict:
    """A fold record's code version, as saved; `shared` None: a record of older code, which kept no
    shared part."""
    saved = {"code": {"fingerprint": fingerprint, "versions": {"torch": "2"}}}
    return {**saved, "shared_code": shared} if shared else saved


def report_of_codes(directory: Path, codes: dict[str, list[dict]], caplog) -> tuple[str, list[str]]:
    """report.md and the warnings of a table of a transformer and a cnn configuration (sentencepiece,
    post-LN, 2 layers), each fold's record made by the code given for it."""
    for enc, folds in codes.items():
        payload = metrics("sentencepiece", enc, "post", 2, [(k, 0.7 + 0.01 * k) for k in range(FOLDS)])
        for fold, made_by in zip(payload["folds"], folds):
            fold.update(made_by)
        write_metrics(directory / enc, payload)
    with caplog.at_level(logging.WARNING, logger="klue_tc.report"):
        write_report(directory, baseline=False)
    return (directory / "report.md").read_text(encoding="utf-8"), [r.getMessage() for r in caplog.records]


@pytest.mark.integration
def test_configurations_of_other_encoders_made_by_one_code_are_not_a_mix(tmp_path: Path, caplog):
    """Each configuration's code version covers its own encoder's module, so a transformer and a cnn
    made by the same code have two versions: one shared code, no warning."""
    markdown, warnings = report_of_codes(
        tmp_path, {"transformer": [code("aaaa", "s1")] * FOLDS, "cnn": [code("bbbb", "s1")] * FOLDS}, caplog
    )
    assert "records made by code aaaa (torch 2), bbbb (torch 2)" in markdown  # still named
    assert "mixes records" not in markdown and not [w for w in warnings if "mixes records" in w]
    assert "predate" not in markdown


@pytest.mark.integration
def test_one_configuration_of_folds_made_by_different_code_is_a_mix_named(tmp_path: Path, caplog):
    markdown, warnings = report_of_codes(
        tmp_path,
        {
            "transformer": [code("aaaa", "s1"), code("aaaa", "s1"), code("cccc", "s1")],
            "cnn": [code("bbbb", "s1")] * FOLDS,
        },
        caplog,
    )
    named = (
        "sentencepiece / transformer / post / L2 / none (sentencepiece-transformer-post-2-cls) "
        "has folds of code aaaa (torch 2) and cccc (torch 2)"
    )
    assert "**Warning: this table mixes records of different code**" in markdown and named in markdown
    assert "cnn" not in markdown.split("**Warning")[1].split("\n")[0]  # the cnn's folds agree
    assert any("mixes records of different code" in w and named in w for w in warnings)


@pytest.mark.integration
def test_configurations_made_by_different_shared_code_are_a_mix(tmp_path: Path, caplog):
    markdown, warnings = report_of_codes(
        tmp_path, {"transformer": [code("aaaa", "s1")] * FOLDS, "cnn": [code("bbbb", "s2")] * FOLDS}, caplog
    )
    shared = "the code every configuration shares differs between records: s1 (torch 2) and s2 (torch 2)"
    assert "**Warning: this table mixes records of different code**" in markdown and shared in markdown
    assert any(shared in w for w in warnings)


@pytest.mark.integration
def test_records_of_older_code_without_the_shared_part_are_compared_within_their_configuration(tmp_path: Path, caplog):
    """Records that kept no shared part (docs/study-pretrain's): other encoders' versions are no mix,
    and the report says what it could not compare."""
    markdown, warnings = report_of_codes(
        tmp_path, {"transformer": [code("aaaa")] * FOLDS, "cnn": [code("bbbb")] * FOLDS}, caplog
    )
    assert "mixes records" not in markdown and not [w for w in warnings if "mixes records" in w]
    compared = "6 of 6 records predate the shared code's fingerprint: their code is compared within their configuration"
    assert compared in markdown


@pytest.mark.integration
def test_a_folder_of_results_records_alone_gives_the_same_table(sweep_dir: Path, tmp_path: Path):
    """The committed study keeps only the results store's records (docs/study/results): the report
    on that folder matches the report on the sweep's run folders."""
    from klue_tc.store.records import Describe, RunResult
    from klue_tc.store.results import ResultsStore

    store = ResultsStore(tmp_path / "study" / "results")
    for path in sweep_dir.rglob("metrics.json"):
        run = RunResult.load(path)
        for record in run.folds:
            record.describe, record.config_hash = run.describe, run.config_hash
            store.put(run.config_hash, record.fold, record, {"data": {"limit": 100}, "cv": {"folds": FOLDS, "seed": 0}})
    assert isinstance(run.describe, Describe)
    assert len(list(store.root.glob("*/config.yaml"))) == len(CONFIGS)  # one per configuration, not per fold

    from_runs = write_report(sweep_dir, baseline=False)
    from_records = write_report(tmp_path / "study", baseline=False)
    pd.testing.assert_frame_equal(from_runs, from_records)
    assert (tmp_path / "study" / "report.md").is_file() and (tmp_path / "study" / "claims.md").is_file()


@pytest.mark.integration
def test_records_from_two_machines_are_named_beside_the_seconds(tmp_path: Path):
    """A study that spans sittings may run on different CPUs: seconds per fold compare only within one."""
    for i, config in enumerate(CONFIGS[:2]):
        for k in range(2):
            device = "Intel Xeon" if k == 0 else "AMD EPYC"
            write_metrics(tmp_path / f"{i}-{k}", metrics(*config, [(k, fold_f1(i, k))], device=device))
    summary = write_report(tmp_path, baseline=False)
    assert set(summary["device"]) == {"AMD EPYC + Intel Xeon"}
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Trained on 2 machines (AMD EPYC: 2 folds, Intel Xeon: 2 folds;" in markdown


def write_grid(directory: Path, cells, f1_of, val_size: int = 100, folds: int = FOLDS) -> None:
    """One metrics.json per configuration (all its folds), `f1_of(cell, fold)` its fold F1s."""
    for cell in cells:
        write_metrics(
            directory / "-".join(map(str, cell)),
            metrics(*cell, [(k, f1_of(cell, k)) for k in range(folds)], val_size=val_size),
        )


def verdicts_section(markdown: str) -> str:
    return markdown.split("## Verdicts")[1].split("\n## ")[0]


@pytest.mark.integration
def test_models_at_chance_get_no_verdicts_and_no_effects(tmp_path: Path):
    """A smoke sweep's models at macro-F1 0.04-0.10 (a classifier ignoring the title scores about
    1/7) learnt nothing: their differences are noise, so neither verdicts nor effects are given."""
    cells = [("sentencepiece", enc, "post", n) for enc in ("transformer", "trans_blstm") for n in (2, 3)]
    write_grid(tmp_path, cells, lambda cell, k: 0.04 + 0.02 * cells.index(cell) + 0.01 * k, val_size=250, folds=2)

    write_report(tmp_path, baseline=False)

    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    verdicts = verdicts_section(markdown)
    assert "No verdicts:" in verdicts and "do not beat chance" in verdicts
    assert "reproduced" not in verdicts and "(vi) yes" not in verdicts
    assert len([line for line in verdicts.splitlines() if line.strip()]) == 1  # one line says why
    assert "No marginal effects:" in markdown and "do not beat chance" in markdown.split("No marginal effects:")[1]
    # Files that would say nothing are not written: no claim judged, no effect, no interaction.
    assert not any((tmp_path / name).exists() for name in ("claims.md", "effects.csv", "interactions.csv"))
    assert not (tmp_path / "effects.png").exists() and "effects.png" not in markdown


@pytest.mark.integration
def test_a_question_is_judged_only_where_the_grid_has_its_cells(tmp_path: Path):
    """Two encoders at 2 and 3 layers, post-LN, one tokenizer, models that learnt: only (vi) (more
    layers) has the cells it needs; the others say what they need in one line."""
    cells = [("sentencepiece", enc, "post", n) for enc in ("transformer", "trans_blstm") for n in (2, 3)]
    write_grid(tmp_path, cells, lambda cell, k: 0.7 + 0.01 * cell[3] + 0.002 * k + 0.001 * cells.index(cell))

    write_report(tmp_path, baseline=False)

    verdicts = verdicts_section((tmp_path / "report.md").read_text(encoding="utf-8"))
    judged = next(line for line in verdicts.splitlines() if line.startswith("- CV macro-F1:"))
    assert "(vi)" in judged and "(ii)" not in judged and "(i)" not in judged and "(iv)" not in judged
    not_judged = next(line for line in verdicts.splitlines() if line.startswith("- not judged:"))
    assert "(ii) needs the study's encoders" in not_judged
    assert "(iii) needs a TRANS-BLSTM at 2-4 and at 5-6 layers" in not_judged
    assert "(iv) needs post- and pre-LN" in not_judged and "(v) needs two tokenizers" in not_judged
    claims = (tmp_path / "claims.md").read_text(encoding="utf-8")
    assert "(ii) TRANS-BLSTM is the highest" not in claims and "(vi) Do more layers help" in claims


@pytest.mark.integration
def test_every_plot_the_report_names_exists(tmp_path: Path):
    """A single run (one configuration) has no effects to draw: the report names only what it wrote."""
    write_metrics(tmp_path / "run", metrics("sentencepiece", "transformer", "post", 2, [(0, 0.7), (1, 0.72)]))

    write_report(tmp_path, baseline=False)

    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    named = next(line for line in markdown.splitlines() if line.startswith("Plots: ")).removeprefix("Plots: ")
    assert named.split(", ") == ["f1_by_layers.png", "grid_heatmap.png"]
    assert all((tmp_path / name).is_file() for name in named.split(", "))


@pytest.mark.integration
def test_an_optuna_sweep_shows_the_trial_optuna_named_best(tmp_path: Path):
    """Optuna's trials share one table cell (they differ in settings the table does not show): the
    cell shows the trial optimization_results.yaml names best, and the report says so."""
    from klue_tc.store.records import RunResult
    from klue_tc.store.results import ResultsStore

    store = ResultsStore(tmp_path / "results")
    trials = {"a": (0.0001, 0.0443), "b": (0.0030, 0.0513), "c": (0.0010, 0.0400)}  # key: (lr, CV F1 mean)
    for key, (lr, f1) in trials.items():
        run = RunResult.from_dict(metrics("sentencepiece", "transformer", "post", 2, [(0, f1), (1, f1)], key=key))
        for record in run.folds:
            record.describe, record.config_hash = run.describe, key
            store.put(
                key, record.fold, record, {"optim": {"lr": lr}, "data": {"limit": 300}, "cv": {"folds": 2, "seed": 42}}
            )
    (tmp_path / "optimization_results.yaml").write_text(
        "name: optuna\nbest_params:\n  optim.lr: 0.003\nbest_value: 0.0513\n", encoding="utf-8"
    )

    summary = write_report(tmp_path, baseline=False)

    assert summary["config_hash"].tolist() == ["b"]
    assert summary["f1_mean"].iloc[0] == pytest.approx(0.0513)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "3 configurations share a table cell" in markdown
    assert "the trial Optuna named best (optimization_results.yaml: best value 0.0513)" in markdown


@pytest.mark.integration
def test_records_of_different_settings_are_one_line_naming_them_not_one_table(tmp_path: Path, capsys):
    """A sweep re-run with other ARGS beside the first one's records: the table would set a 500-title
    epoch beside 3,000 titles and 3 epochs, so the report names what differs and stops."""
    from klue_tc.report.cli import main
    from klue_tc.report.settings import MixedSettingsError
    from klue_tc.store.records import RunResult
    from klue_tc.store.results import ResultsStore

    store = ResultsStore(tmp_path / "results")
    settings = {"plain": (500, 1), "args": (3000, 3)}
    for name, (limit, epochs) in settings.items():
        for layers in (2, 3):  # an axis: the layers may differ within one setting
            key = f"{name}-{layers}"
            run = RunResult.from_dict(metrics("sentencepiece", "transformer", "post", layers, [(0, 0.5)], key=key))
            config = {"data": {"limit": limit}, "cv": {"folds": 2}, "trainer": {"max_epochs": epochs}}
            config["encoder"] = {"layers": layers}
            for record in run.folds:
                record.describe, record.config_hash = run.describe, key
                store.put(key, record.fold, record, config)

    assert main([str(tmp_path), "--no-baseline"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path}: its records were made with different settings (data.limit 3000 / 500; "
        "trainer.max_epochs 1 / 3), which one table cannot compare; report on a folder of one setting (a "
        "sweep re-run with other ARGS has its own: outputs/sweeps/<sweep>+<settings>)"
    )
    assert not (tmp_path / "report.md").exists()
    with pytest.raises(MixedSettingsError, match="data.limit 3000 / 500"):
        write_report(tmp_path, baseline=False)
    for key in ("args-2", "args-3"):  # one setting alone: its two layer counts make one table
        shutil.rmtree(store.root / key)
    assert sorted(write_report(tmp_path, baseline=False)["layers"]) == [2, 3]


def interrupted_half_way(write):
    """A writer that puts half its bytes where it was asked to, then is interrupted (Ctrl-C, a kill)."""

    def half_then_interrupt(self, target, *args, **kwargs):
        import io

        buffer = io.BytesIO() if write.__name__ == "savefig" else io.StringIO()
        if write.__name__ == "savefig":
            kwargs.setdefault("format", Path(target).suffix.lstrip("."))
        write(self, buffer, *args, **kwargs)
        data = buffer.getvalue()
        with open(target, "wb" if isinstance(data, bytes) else "w") as handle:
            handle.write(data[: len(data) // 2])
        raise KeyboardInterrupt

    return half_then_interrupt


@pytest.mark.integration
@pytest.mark.parametrize("writer", ["savefig", "to_csv"])
def test_a_report_interrupted_while_it_writes_leaves_the_previous_one_whole(sweep_dir: Path, monkeypatch, writer):
    from matplotlib.figure import Figure

    write_report(sweep_dir)
    before = {p: p.read_bytes() for p in sweep_dir.iterdir() if p.is_file()}
    owner = Figure if writer == "savefig" else pd.DataFrame
    monkeypatch.setattr(owner, writer, interrupted_half_way(getattr(owner, writer)))
    with pytest.raises(KeyboardInterrupt):
        write_report(sweep_dir)
    after = {p: p.read_bytes() for p in sweep_dir.iterdir() if p.is_file()}
    assert after.keys() == before.keys()  # nothing half-written beside them either
    assert [p.name for p in after if after[p] != before[p]] == []


@pytest.mark.integration
def test_a_section_is_one_entry_of_the_contents_shown_only_where_it_has_something(sweep_dir: Path, monkeypatch):
    """A new section is a function of the report context and one line in the contents: report.md
    shows it where it says something, and leaves out one with nothing, heading and all."""
    from klue_tc.report import contents
    from klue_tc.report.context import Lines

    def folds_counted(report) -> list[str]:
        return ["## Folds counted", "", f"{len(report.folds)} folds of {len(report.summary)} configurations.", ""]

    monkeypatch.setattr(
        contents,
        "SECTIONS",
        [*contents.SECTIONS[:-2], Lines("Folds counted", folds_counted), Lines("Nothing", lambda report: [])],
    )
    write_report(sweep_dir)
    text = (sweep_dir / "report.md").read_text(encoding="utf-8")
    assert "\n## Folds counted\n\n" in text and text.index("## Folds counted") > text.index("## Cost and convergence")
    assert "Nothing" not in text
