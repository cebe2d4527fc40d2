"""benchmarks: the pure pieces (reference line, split, table, targets, sweep projection), and
one slow smoke run of the whole benchmark on generated headlines."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import benchmarks as bench

REFERENCE_LINE = "arch=post_ln layers=3 n=5000 max_len=30 epochs=2 train_s=23.4 samples_per_s=428 eval_macro_f1=0.0948"


def test_parse_reference_line_reads_every_field():
    parsed = bench.parse_reference_line("some log line\n" + REFERENCE_LINE + "\n")
    assert parsed == {
        "arch": "post_ln",
        "layers": 3,
        "n": 5000,
        "max_len": 30,
        "epochs": 2,
        "train_s": 23.4,
        "samples_per_s": 428,
        "eval_macro_f1": 0.0948,
    }
    assert isinstance(parsed["n"], int) and isinstance(parsed["train_s"], float)


def test_parse_reference_line_takes_the_last_result_and_fails_without_one():
    second = REFERENCE_LINE.replace("samples_per_s=428", "samples_per_s=99")
    assert bench.parse_reference_line(REFERENCE_LINE + "\n" + second)["samples_per_s"] == 99
    with pytest.raises(ValueError, match="no result line"):
        bench.parse_reference_line("Traceback (most recent call last):\n  boom")


def test_reference_split_matches_seed_reference_recipe():
    labels = np.repeat(np.arange(7), 30)
    train, held_out = bench.reference_split(labels, limit=50)
    assert len(train) == 50 and len(held_out) == 21
    assert not set(train) & set(held_out)
    assert sorted(np.bincount(labels[held_out], minlength=7)) == [3] * 7  # stratified
    again_train, again_held = bench.reference_split(labels, limit=50)
    assert (train == again_train).all() and (held_out == again_held).all()
    with pytest.raises(ValueError, match="--limit"):
        bench.reference_split(labels, limit=500)


def _run(speed, f1, peak):
    return {"samples_per_s": speed, "f1": f1, "peak_mb": peak}


def test_table_rows_ratios_and_missing_reference():
    rows = bench.table_rows(
        [
            {
                "encoder": "transformer",
                "klue_tc": _run(1200.0, 0.71, 900.0),
                "notebook": _run(600.0, 0.70, 950.0),
                "reference": _run(400.0, 0.65, 1000.0),
            },
            {
                "encoder": "cnn",
                "klue_tc": _run(800.0, 0.69, 880.0),
                "notebook": _run(500.0, 0.68, 890.0),
                "reference": None,
            },
        ]
    )
    assert len(rows[0]) == len(bench.TABLE_HEADER)
    assert rows[0] == [
        "transformer",
        "1200",
        "600",
        "400",
        "3.00x",
        "2.00x",
        "0.7100 / 0.7000 / 0.6500",
        "900 / 950 / 1000",
    ]
    assert rows[1][3] == bench.DASH and rows[1][4] == bench.DASH and rows[1][5] == "1.60x"
    assert rows[1][6].endswith("/ " + bench.DASH)


def test_table_rows_survive_a_failed_run_and_nan():
    rows = bench.table_rows(
        [
            {
                "encoder": "trans_blstm",
                "klue_tc": None,
                "notebook": _run(float("nan"), 0.5, 1.0),
                "reference": _run(70.0, 0.4, 2.0),
            }
        ]
    )
    assert rows[0][1] == bench.DASH and rows[0][2] == bench.DASH and rows[0][4] == bench.DASH


def test_markdown_table_shape():
    text = bench.markdown_table(("a", "b"), [["1", "2"], ["3", "4"]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]


def test_target_checks():
    results = [
        {"encoder": "transformer", "klue_tc": _run(1300.0, 0.70, 1), "reference": _run(400.0, 0.65, 1)},
        {"encoder": "trans_blstm", "klue_tc": _run(130.0, 0.60, 1), "reference": _run(70.0, 0.62, 1)},
        {"encoder": "cnn", "klue_tc": _run(900.0, 0.7, 1), "reference": None},
    ]
    checks = {name: met for name, met, _ in bench.target_checks(results, {"cached": {"time_to_first_step_s": 1.2}})}
    assert checks["transformer: titles/s >= 3x seed_reference"] is True
    assert checks["transformer: macro-F1 >= seed_reference's"] is True
    assert checks["trans_blstm: titles/s >= 2x seed_reference"] is False
    assert checks["trans_blstm: macro-F1 >= seed_reference's"] is False
    assert checks["cached job: time to first step < 2 s"] is True
    assert not any(name.startswith("cnn") for name in checks)
    unmeasured = {name: met for name, met, _ in bench.target_checks(results[:1], None)}
    assert unmeasured["cached job: time to first step < 2 s"] is None


def test_project_sweep_arithmetic():
    # 1 encoder, 1 LN, layers 3 and 6, 1 tokenizer, 5 folds, 1000 titles: 800 train + 200 val per job.
    p = bench.project_sweep(
        {"transformer": 400.0},
        {"transformer": 1000.0},
        epochs=2,
        overhead_s=5.0,
        n_titles=1000,
        folds=5,
        jobs={"transformer": {3: 5, 6: 5}},  # one LN, one tokenizer, 5 folds at each layer count
    )
    at3 = 2 * 800 / 400 + 2 * 200 / 1000 + 5.0  # 4 s train + 0.4 s val + 5 s overhead
    at6 = 2 * (2 * 800 / 400 + 2 * 200 / 1000) + 5.0
    assert p["jobs"] == 10
    assert p["per_job_s"]["transformer"][3] == pytest.approx(at3)
    assert p["per_job_s"]["transformer"][6] == pytest.approx(at6)
    assert p["sequential_s"] == pytest.approx(5 * (at3 + at6))
    assert p["parallel_s"] == {}


def test_project_sweep_paper_grid_and_parallel():
    grid = bench.sweep_grid("paper")  # read from sweeps/paper.yaml as `make sweep` expands it
    assert grid["jobs_in_file"] == sum(n for per in grid["jobs"].values() for n in per.values())
    assert (grid["epochs"], grid["folds"], grid["pad_multiple"], grid["layers"]) == (10, 5, 8, (2, 3, 4, 5, 6))
    assert set(bench.ENCODERS) <= set(grid["jobs"]) and grid["jobs"]["transformer"] == {n: 30 for n in range(2, 7)}
    speeds = {e: 1000.0 for e in bench.ENCODERS}
    p = bench.project_sweep(
        speeds,
        {},
        epochs=10,
        overhead_s=0.0,
        jobs=grid["jobs"],
        parallel_speedup={2: {e: 2.0 for e in speeds}, 4: {"transformer": 3.0}},
    )
    encoders = len(bench.ENCODERS)
    assert p["jobs"] == encoders * 150  # x 2 LN x 5 layer counts x 3 tokenizers x 5 folds: 600 for the built-ins
    train = bench.YNAT_TRAIN_TITLES * 4 / 5
    per_encoder = sum(10 * train / 1000 * n / 3 for n in (2, 3, 4, 5, 6)) * 2 * 3 * 5
    expected = per_encoder * encoders
    assert p["sequential_s"] == pytest.approx(expected)
    assert p["parallel_s"][2] == pytest.approx(expected / 2)
    # Only transformer speeds up with 4 jobs; the other encoders are taken as 1x.
    assert p["parallel_s"][4] == pytest.approx(per_encoder / 3 + per_encoder * (encoders - 1))


def test_project_sweep_overhead_overlaps_k_fold():
    p = bench.project_sweep(
        {"cnn": 1e12},
        {},
        epochs=1,
        overhead_s=10.0,
        n_titles=5,
        folds=5,
        jobs={"cnn": {3: 5}},
        parallel_speedup={4: {"cnn": 1.0}},
    )
    assert p["sequential_s"] == pytest.approx(50.0, rel=1e-6)
    assert p["parallel_s"][4] == pytest.approx(12.5, rel=1e-6)


def test_sweep_grid_reads_the_sweep_file_as_hydra_expands_it(tmp_path):
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "conf").symlink_to(bench.REPO_ROOT / "conf")
    (tmp_path / "sweeps" / "_base.yaml").write_text((bench.REPO_ROOT / "sweeps" / "_base.yaml").read_text())
    (tmp_path / "sweeps" / "paper.yaml").write_text(
        "defaults:\n  - _base\n  - _self_\nsweep: paper\ndata:\n  pad_multiple: 8\n"
        "hydra:\n  sweeper:\n    params:\n      +experiment: glob(trans*,exclude=transformer_pre_ln)\n"
        "      encoder.layers: range(2,5)\n      trainer.max_epochs: 12\n"
    )
    grid = bench.sweep_grid("paper", tmp_path)
    assert grid["jobs"] == {e: {2: 1, 3: 1, 4: 1} for e in ("trans_blstm", "trans_blstm_parallel", "transformer")}
    assert (grid["epochs"], grid["folds"], grid["pad_multiple"], grid["jobs_in_file"]) == (12, 5, 8, 9)
    assert grid["experiments"] == {e: e for e in grid["jobs"]}


def test_a_worker_trains_each_encoder_as_the_paper_sweeps_experiment_for_it(tmp_path):
    from benchmarks.worker import run_overrides

    b = bench.Bench(tmp_path, None, 1, 16, ["cnn"], None, 1, False, tmp_path, 300)
    assert run_overrides(b.worker_spec("cnn", True, "cnn-bucketed"))[0] == "+experiment=cnn"
    assert run_overrides(b.worker_spec("unswept", True, "unswept-bucketed"))[0] == "encoder=unswept"


def tiny_cpu_settings(**changes) -> dict:
    """A report's settings for one transformer on 50 titles, with the fields a test varies."""
    settings = {
        "data": "/x/train.tsv",
        "limit": 50,
        "epochs": 1,
        "batch_size": 16,
        "layers": 3,
        "reference": None,
        "encoders": ["transformer"],
    }
    return {**settings, **changes}


def test_fmt_helpers():
    assert bench.fmt(None) == bench.DASH and bench.fmt(float("nan")) == bench.DASH
    assert bench.fmt(2.345, ".2f", "x") == "2.35x"
    assert bench.fmt_seconds(30) == "30.0 s" and bench.fmt_seconds(600) == "10.0 min"
    assert bench.fmt_seconds(3 * 3600) == "3.0 h"


def test_render_has_table_footnotes_and_targets():
    report = {
        "settings": tiny_cpu_settings(threads=2, device="CPU (2 cores available, 2 torch threads)"),
        "results": [
            {
                "encoder": "transformer",
                "klue_tc": {**_run(10.0, 0.5, 1.0), "train_size": 50, "val_size": 6},
                "notebook": _run(5.0, 0.5, 1.0),
                "reference": None,
            }
        ],
        "overhead": {
            "first": {"time_to_first_step_s": 3.0, "wall_s": 9.0, "command": "python -m klue_tc x"},
            "cached": {"time_to_first_step_s": 0.8, "wall_s": 6.0},
        },
        "notes": ["seed_reference not found"],
    }
    text = bench.render(report)
    assert "| transformer | 10 | 5 | — | — | 2.00x |" in text
    assert "0.80 s" in text and "50 training titles and 6 held-out titles" in text
    assert "cached job: time to first step < 2 s | yes" in text
    assert "seed_reference not found" in text


@pytest.mark.integration
def test_missing_data_is_one_line_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--data", str(tmp_path / "nope.tsv")], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: --data {tmp_path / 'nope.tsv'}: file not found (pass --data PATH to a labelled KLUE YNAT file)"
    ]


def _headlines(path: Path, per_class: int = 20) -> Path:
    """Korean-like headlines over 4 topics, each with its own words (learnable)."""
    words = {
        "IT과학": ["반도체", "인공지능", "스마트폰", "클라우드"],
        "경제": ["코스피", "환율", "금리", "수출"],
        "스포츠": ["손흥민", "류현진", "프로야구", "올림픽"],
        "정치": ["국회", "청와대", "여야", "선관위"],
    }
    tails = ["발표", "상승", "논란", "개최", "확정", "첫선"]
    rng = random.Random(0)
    rows = [
        f"{label}\t{rng.choice(ws)} {rng.choice(ws)} {rng.choice(tails)}"
        for label, ws in words.items()
        for _ in range(per_class)
    ]
    rng.shuffle(rows)
    path.write_text("label\ttext\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_the_ensemble_run_serves_the_ensemble_sweeps_members():
    from benchmarks.ensemble import compose_member, sweep_members

    members = sweep_members()
    assert members == ["transformer_sentencepiece", "cnn_mecab", "transformer_kobert", "trans_blstm_parallel_mecab"]
    spec = {"batch_size": 16, "cache_dir": "cache", "gpu": False}
    cnn = compose_member("cnn_mecab", spec)  # the sweep's design, trained a couple of steps, not pretrained
    assert (cnn.encoder.name, cnn.encoder.layers, cnn.tokenizer.name, cnn.pretrain.objective) == (
        "cnn",
        4,
        "mecab",
        "none",
    )
    assert cnn.trainer.limit_train_batches == 2 and cnn.data.batch_size == 16


ENSEMBLE_MEMBERS = ["transformer_sentencepiece", "cnn_mecab"]
TINY_MEMBERS = ["encoder.d_model=32", "encoder.heads=2", "head.hidden=32", "encoder.layers=1"]


def _served(result: dict, text: str) -> None:
    """The ensemble run's figures for ENSEMBLE_MEMBERS and the two baselines, and its report section."""
    from benchmarks.constants import ENSEMBLE_FOLDS as FOLDS

    assert result["members"] == 4 and result["fold_models"] == 4 * FOLDS  # 2 networks, 2 linear baselines
    assert result["titles"] == 8 and result["single_titles_per_s"] > 0 and result["ensemble_titles_per_s"] > 0
    assert result["slowdown"] == pytest.approx(result["single_titles_per_s"] / result["ensemble_titles_per_s"])
    assert [m["name"] for m in result["per_member"]][:2] == ENSEMBLE_MEMBERS and result["clock"] == "cpu"
    assert all(m["fold_models"] == FOLDS and m["titles_per_s"] > 0 for m in result["per_member"])
    assert f"| ensemble: 4 members x {FOLDS} folds | {4 * FOLDS} |" in text
    assert "| member cnn_mecab (neural) | 5 |" in text and "(transformer_sentencepiece, one fold)" in text


@pytest.mark.integration
def test_an_ensembles_folder_is_served_against_a_single_model(tmp_path):
    from benchmarks.render import ensemble_lines
    from benchmarks.worker import run_worker

    data = _headlines(tmp_path / "train.tsv")
    b = bench.Bench(data, 40, 1, 16, ["transformer"], None, 1, False, tmp_path, 300, overrides=TINY_MEMBERS)
    spec = {**b.worker_spec("transformer", True, "ensemble"), "kind": "ensemble", "clock": "cpu"}
    result = run_worker({**spec, "members": ENSEMBLE_MEMBERS})
    _served(result, "\n".join(ensemble_lines(result)))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_ensemble_run_end_to_end(tmp_path):
    """`python -m benchmarks --runs ensemble` (what `make bench ARGS="--runs ensemble"` runs), tiny."""
    data = _headlines(tmp_path / "train.tsv")
    out = tmp_path / "bench.md"
    argv = ["--data", str(data), "--limit", "40", "--batch-size", "16", "--threads", "1", "--clock", "cpu"]
    argv += ["--runs", "ensemble", "--ensemble-members", ",".join(ENSEMBLE_MEMBERS), "--out", str(out)]
    assert bench.main(argv + [f"--override={o}" for o in TINY_MEMBERS]) == 0
    _served(json.loads(out.with_suffix(".json").read_text())["ensemble"], out.read_text())


@pytest.mark.integration
def test_an_unknown_ensemble_member_is_one_line(tmp_path):
    data = _headlines(tmp_path / "train.tsv")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--data", str(data), "--runs", "ensemble", "--ensemble-members", "cnn,x"],
        capture_output=True,
        text=True,
        cwd=bench.REPO_ROOT,
    )
    assert done.returncode == 2 and "--ensemble-members: unknown cnn, x; choose from cnn_mecab," in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_smoke_runs_every_encoder(tmp_path):
    data = _headlines(tmp_path / "train.tsv")
    reference = Path(bench.DEFAULT_REFERENCE)
    out = tmp_path / "bench.md"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "--data",
        str(data),
        "--limit",
        "40",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--threads",
        "1",
        "--out",
        str(out),
        "--timeout",
        "600",
        "--ensemble-members",
        "transformer_sentencepiece,cnn_mecab",
    ]
    if not reference.is_file():
        cmd += ["--reference", str(tmp_path / "absent.py")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert [r["encoder"] for r in report["results"]] == list(bench.ENCODERS)
    for r in report["results"]:
        for path in ("klue_tc", "notebook"):  # the 40 titles less the inner split that chooses the epoch
            assert r[path]["train_size"] + r[path]["inner_size"] == 40 and r[path]["inner_size"] > 0
        assert r["klue_tc"]["samples_per_s"] > 0 and 0 <= r["klue_tc"]["f1"] <= 1
        assert r["notebook"]["max_len"] == r["klue_tc"]["max_len"]
        assert (r["reference"] is not None) == (reference.is_file() and r["encoder"] in bench.REFERENCE_ARCH)
        assert r["pretrain"]["trained_samples"] > 0 and r["efficiency"]["pretrain_ratio"] > 0
        assert r["efficiency"]["pretrain_gflops_per_s"] > 0 and r["efficiency"]["finetune_gflops_per_s"] > 0
    assert report["overhead"]["cached"]["time_to_first_step_s"] > 0
    assert report["overhead"]["first"]["time_to_first_step_s"] > 0
    assert report["ensemble"]["fold_models"] == (2 + 2) * 5 and report["ensemble"]["slowdown"] > 0
    table = out.read_text()
    for encoder in bench.ENCODERS:
        assert f"| {encoder} |" in table
    assert "klue_tc training benchmark" in done.stdout and all(e in done.stdout for e in bench.ENCODERS)
    assert "### Serving: an ensemble's folder against a single model" in table
    assert not math.isnan(report["results"][0]["klue_tc"]["samples_per_s"])


@pytest.mark.parametrize("short_rows", [0, 5])
def test_blstm_reversal_path_equals_the_packed_run(short_rows):
    """The CPU fast path of packed_lstm (two plain LSTM calls, titles reversed within their
    length) gives the packed run's outputs, final states and gradients."""
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from klue_tc.models import blocks

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(8, 6, batch_first=True, bidirectional=True)
    lengths = torch.full((12,), 7)
    lengths[:short_rows] = torch.tensor([2, 3, 5, 6, 4][:short_rows])
    padding = torch.arange(7)[None] >= lengths[:, None]
    x = torch.randn(12, 7, 8)
    assert blocks._reversible(lstm) and 2 * padding.numel() <= 3 * int(lengths.sum())  # takes the fast path

    def grads(fn):
        lstm.zero_grad()
        xs = x.clone().requires_grad_(True)
        out, h_n = fn(xs)
        (out.square().sum() + h_n.sin().sum()).backward()
        return out.detach(), h_n.detach(), xs.grad, [p.grad.clone() for p in lstm.parameters()]

    def packed(xs):
        out, (h_n, _) = lstm(pack_padded_sequence(xs, lengths, batch_first=True, enforce_sorted=False))
        return pad_packed_sequence(out, batch_first=True, total_length=7)[0], h_n

    fast, reference = grads(lambda xs: blocks.packed_lstm(lstm, xs, padding)), grads(packed)
    for a, b in zip(fast[:3], reference[:3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(fast[3], reference[3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (fast[0][padding] == 0).all()


def test_concurrent_throughput_spans_first_start_to_last_end():
    results = [
        {
            "train_start_wall": 100.0,
            "train_end_wall": 110.0,
            "trained_samples": 1000,
            "samples_per_s": 120.0,
            "cuda_peak_mb": 500.0,
        },
        {
            "train_start_wall": 101.0,
            "train_end_wall": 120.0,
            "trained_samples": 1000,
            "samples_per_s": 60.0,
            "cuda_peak_mb": 700.0,
        },
    ]
    agg = bench.concurrent_throughput(results)
    assert agg["aggregate_samples_per_s"] == pytest.approx(2000 / 20)
    assert agg["jobs"] == 2 and agg["peak_mb_each"] == 700.0


def test_gpu_projection_from_a_report(monkeypatch):
    grid = {e: {n: 30 for n in range(2, 7)} for e in bench.ENCODERS}  # the paper grid's 150 per encoder
    monkeypatch.setattr(
        bench.projection,
        "sweep_grid",
        lambda name, repo=bench.REPO_ROOT: {
            "jobs": grid,
            "epochs": 10,
            "folds": 5,
            "layers": (2, 3, 4, 5, 6),
            "jobs_in_file": 150 * len(grid),
            "source": "sweeps/paper.yaml",
        },
    )
    run = {"samples_per_s": 9000.0, "loop_samples_per_s": 8000.0, "eval_samples_per_s": 30000.0}
    report = {
        "settings": {
            "data": "/x/train.tsv",
            "limit": None,
            "epochs": 1,
            "batch_size": 256,
            "layers": 3,
            "threads": 16,
            "device": "H200 (bf16-mixed)",
            "gpu": True,
            "reference": None,
            "encoders": list(bench.ENCODERS),
        },
        "results": [
            {
                "encoder": e,
                "klue_tc": dict(run, train_size=41110, val_size=4568),
                "notebook": dict(run),
                "reference": None,
            }
            for e in bench.ENCODERS
        ],
        "overhead": {"first": None, "cached": {"time_to_first_step_s": 0.5, "wall_s": 12.0}},
        # k jobs at once, encoders in turn: 2 measured at 1.75x the one-by-one time, 4 failed.
        "concurrency": {
            2: {"aggregate_samples_per_s": 14000.0, "speedup": 1.75, "encoders": ["cnn", "transformer"]},
            4: None,
        },
        "notes": [],
    }
    p = bench.gpu_projection(report)
    expected = bench.project_sweep(
        {e: 8000.0 for e in bench.ENCODERS},
        {e: 30000.0 for e in bench.ENCODERS},
        epochs=10,
        overhead_s=12.0,
        jobs=grid,
        parallel_speedup={2: {e: 1.75 for e in bench.ENCODERS}, 4: {e: 1.0 for e in bench.ENCODERS}},
    )
    assert p["jobs"] == 150 * len(grid)
    assert p["sequential_s"] == pytest.approx(expected["sequential_s"])
    assert p["parallel_s"][2] == pytest.approx(expected["parallel_s"][2])
    assert p["parallel_assumed_1x"] == ["k=4"] and p["best_parallel"] == 2  # a failed k is never "best"
    report["projection"] = p
    text = bench.render(report)
    assert f"Paper sweep projection ({150 * len(grid)} single-fold jobs, 10 epochs each" in text
    assert "2 jobs at once on one GPU (the best measured)" in text and "Not measured, assumed 1x: k=4" in text
    assert "| 2 | cnn, transformer | 14000 | 1.75x |" in text
    assert "torch.cuda.max_memory_allocated" in text


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_concurrent_workers_start_together(tmp_path):
    """The --gpu concurrency measurement's machinery (barrier, aggregate), exercised on CPU."""
    data = _headlines(tmp_path / "train.tsv")
    b = bench.Bench(data, 40, 1, 16, ["cnn", "transformer"], None, 2, False, tmp_path / "work", 300)
    (tmp_path / "work").mkdir()
    agg = b.concurrency(2, solo={"cnn": 1e9, "transformer": 1e9})
    assert agg is not None and agg["jobs"] == 2, b.notes
    assert agg["aggregate_samples_per_s"] > 0 and len(agg["per_job_samples_per_s"]) == 2
    assert sorted(agg["encoders"]) == ["cnn", "transformer"]  # the encoders in turn: the sweep's mix
    assert 0 < agg["speedup"] < 1e-3  # the work would take no time one by one at 1e9 titles/s
    assert len(list((tmp_path / "work" / "barrier-2").glob("*.ready"))) == 2


def test_concurrent_speedup_is_one_by_one_time_over_the_span():
    results = [
        {
            "encoder": "transformer",
            "train_start_wall": 0.0,
            "train_end_wall": 10.0,
            "trained_samples": 8000,
            "samples_per_s": 800.0,
        },
        {
            "encoder": "trans_blstm",
            "train_start_wall": 0.0,
            "train_end_wall": 10.0,
            "trained_samples": 4000,
            "samples_per_s": 400.0,
        },
    ]
    # Alone: 8000 / 1000 = 8 s and 4000 / 500 = 8 s, 16 s one by one, 10 s together.
    agg = bench.concurrent_throughput(results, {"transformer": 1000.0, "trans_blstm": 500.0})
    assert agg["speedup"] == pytest.approx(1.6)
    assert bench.concurrent_throughput(results, {"transformer": 1000.0})["speedup"] is None  # an encoder unmeasured


def test_a_gpu_phase_starts_no_run_once_its_budget_is_spent(tmp_path, monkeypatch):
    from benchmarks.runner import Phase

    b = bench.Bench(tmp_path, None, 1, 16, ["cnn"], None, 1, False, tmp_path, timeout_s=3600, phase_budget_s=10)
    clock = iter([0.0, 3.0, 3.0, 12.0, 12.0, 12.0])
    monkeypatch.setattr(bench.runner.time, "monotonic", lambda: next(clock))
    timeouts = []
    with Phase(b, "1/3: test") as phase:
        assert phase.run("first", lambda: timeouts.append(b.timeout_s) or "done") == "done"
        assert phase.run("second", lambda: timeouts.append(b.timeout_s)) is None
    assert timeouts == [7.0]  # the run's timeout is what is left of the phase
    assert b.timeout_s == 3600 and any("before second: not run" in n for n in b.notes)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_phases_run_in_order_and_project_the_sweep(tmp_path, capsys):
    """`make bench-gpu`'s three phases, run on CPU (the device is the only difference)."""
    data = _headlines(tmp_path / "train.tsv")
    b = bench.Bench(data, 40, 1, 16, ["cnn"], None, 2, False, tmp_path / "work", 300, parallel=[2])
    (tmp_path / "work").mkdir()
    report = b.measure_gpu()
    said = capsys.readouterr().err
    assert said.index("phase 1/3") < said.index("phase 2/3") < said.index("phase 3/3"), said
    assert said.count("done in") == 3 and "paper sweep (150 jobs), one by one:" in said  # cnn: 150 of the 600
    assert report["results"][0]["klue_tc"] and report["results"][0]["notebook"], b.notes
    assert report["results"][0]["pretrain"]["trained_samples"] > 0 and report["peak"]["gflops_per_s"] > 0
    assert report["concurrency"][2]["speedup"] > 0 and report["projection"]["best_parallel"] == 2
    assert "Paper sweep projection" in bench.render(report)


def _pretrain_result(encoder, finetune_speed, pretrain_speed):
    finetune = {"loop_cpu_samples_per_s": finetune_speed, "train_flops_per_title": 1e8, "precision": "32-true"}
    pretrain = {
        "samples_per_s": pretrain_speed,
        "loop_cpu_samples_per_s": pretrain_speed,
        "train_flops_per_title": 1.2e8,
        "precision": "32-true",
        "mask_p": 0.15,
        "head_rows": 128,
        "head_row_bucket": 64,
        "masked_tokens": 100,
        "tokens": 700,
    }
    return {"encoder": encoder, "klue_tc": {**_run(300.0, 0.5, 1.0), **finetune}, "pretrain": pretrain}


PEAK = {"size": 2048, "dtype": "float32", "precision": "32-true", "threads": 1, "repetitions": 5, "gflops_per_s": 50.0}


def test_pretraining_row_ratio_gflops_and_target():
    fast, slow = _pretrain_result("transformer", 200.0, 170.0), _pretrain_result("trans_blstm", 100.0, 70.0)
    e = bench.efficiency(fast, PEAK, "cpu")
    assert e["pretrain_ratio"] == pytest.approx(0.85)
    assert e["finetune_gflops_per_s"] == pytest.approx(20.0) and e["pretrain_gflops_per_s"] == pytest.approx(20.4)
    assert e["finetune_peak_fraction"] == pytest.approx(0.4) and e["pretrain_peak_fraction"] == pytest.approx(0.408)
    # The wall clock reads the wall-clock loop figures, absent here.
    assert bench.efficiency(fast, PEAK, "wall")["pretrain_ratio"] is None
    rows = bench.pretrain_rows([fast, slow, {"encoder": "cnn", "klue_tc": None, "pretrain": None}], PEAK, "cpu")
    assert rows[0] == ["transformer", "32-true", "200", "170", "0.85x", "0.100 / 0.120", "20.0 / 20.4", "40 % / 41 %"]
    assert (
        rows[1][4] == "0.70x"
        and rows[2][2:] == [bench.DASH, bench.DASH, bench.DASH] + [" / ".join([bench.DASH] * 2)] * 3
    )
    assert len(rows[0]) == len(bench.PRETRAIN_HEADER)
    checks = {name: (met, detail) for name, met, detail in bench.target_checks([fast, slow], None, "cpu")}
    assert checks["transformer: pretraining titles/s >= 0.80x fine-tuning's"] == (True, "0.85x")
    assert checks["trans_blstm: pretraining titles/s >= 0.80x fine-tuning's"] == (False, "0.70x")


def test_render_shows_the_pretraining_table_and_the_peak():
    report = {
        "settings": tiny_cpu_settings(threads=1, device="CPU", clock="cpu"),
        "results": [_pretrain_result("transformer", 200.0, 170.0)],
        "peak": PEAK,
        "overhead": {},
    }
    text = bench.render(report)
    assert "| transformer | 32-true | 200 | 170 | 0.85x | 0.100 / 0.120 | 20.0 / 20.4 | 40 % / 41 % |" in text
    assert "**50.0 GFLOP/s**" in text and "128 rows for 100 masked of 700 padded positions" in text
    assert "pretraining titles/s >= 0.80x fine-tuning's | yes | 0.85x" in text


def test_flops_of_a_step_count_the_titles_widths_and_the_heads_rows(tmp_path):
    from collections import Counter

    from benchmarks.flops import TRAIN_STEP_FACTOR, classifier_step_flops, masked_lm_step_flops
    from benchmarks.worker import compose_run
    from klue_tc.models import build_classifier
    from klue_tc.pretraining.objectives.mlm import MaskedLM
    from klue_tc.tokenizers import fit_tokenizer

    run = compose_run(["+experiment=trans_blstm", "encoder.d_model=32", "encoder.heads=2", "head.hidden=32"])
    run.tokenizer.vocab_size = 200
    tokenizer = fit_tokenizer(run.tokenizer, [text for text in _headlines(tmp_path / "t.tsv").read_text().split()])
    classifier = build_classifier(tokenizer.vocab_size, tokenizer.specials.pad, run.encoder, run.head, 7)
    one = classifier_step_flops(classifier, Counter({12: 1}), 7)
    assert one > 0 and classifier_step_flops(classifier, Counter({12: 3, 20: 2}), 7) == pytest.approx(
        3 * one + 2 * classifier_step_flops(classifier, Counter({20: 1}), 7)
    )
    mlm = MaskedLM.model(run, tokenizer)
    no_rows = masked_lm_step_flops(mlm, Counter({12: 4}), 0, 7)
    d, vocab = 32, tokenizer.vocab_size
    # Every head row: the dense transform and the tied vocabulary projection, 2 FLOPs a multiply-add.
    per_row = 2 * d * d + 2 * d * vocab
    assert masked_lm_step_flops(mlm, Counter({12: 4}), 64, 7) - no_rows == pytest.approx(
        TRAIN_STEP_FACTOR * 64 * per_row
    )
    # The BLSTM sublayers are counted (the flop counter alone does not see the fused kernel).
    lstm = next(m for m in mlm.modules() if isinstance(m, torch.nn.LSTM))
    assert no_rows > TRAIN_STEP_FACTOR * 4 * 12 * 2 * 4 * lstm.hidden_size * (lstm.input_size + lstm.hidden_size)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_measures_pretraining_beside_fine_tuning_with_gflops(tmp_path):
    """The real runs at tiny sizes: a TRANS-BLSTM encoder fine-tuned and pretrained, and the peak."""
    data = _headlines(tmp_path / "train.tsv")
    out = tmp_path / "bench.md"
    cmd = [sys.executable, "-m", "benchmarks", "--data", str(data), "--limit", "40", "--batch-size", "8"]
    cmd += ["--threads", "1", "--encoders", "trans_blstm", "--runs", "klue_tc,pretrain", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    (row,) = report["results"]
    assert row["notebook"] is None and row["reference"] is None and report["overhead"] == {}
    pretrain, finetune = row["pretrain"], row["klue_tc"]
    assert pretrain["precision"] == finetune["precision"] and pretrain["threads"] == finetune["threads"] == 1
    assert pretrain["trained_samples"] > 0 and pretrain["masked_tokens"] <= pretrain["head_rows"] < pretrain["tokens"]
    assert pretrain["train_flops_per_title"] > finetune["train_flops_per_title"] / 2 > 0
    e = row["efficiency"]
    assert e["pretrain_ratio"] > 0 and e["finetune_gflops_per_s"] > 0 and e["pretrain_gflops_per_s"] > 0
    assert 0 < e["finetune_peak_fraction"] and report["peak"]["gflops_per_s"] > 0
    table = out.read_text()
    assert "### Masked-LM pretraining beside fine-tuning, and achieved GFLOP/s" in table
    assert re.search(
        r"\| trans_blstm \| [\w-]+ \| \d+ \| \d+ \| \d\.\d\dx \| [\d.]+ / [\d.]+ \| [\d.]+ / [\d.]+ \|", table
    )
    assert "trans_blstm: pretraining titles/s >= 0.80x fine-tuning's" in table
