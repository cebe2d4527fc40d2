"""One fold on several devices: Lightning's DDP ranks share each batch, rank 0 alone keeps records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import TINY_MODEL
from jobs import compose_job, run_cli
from klue_tc.data.batches import BucketBatchSampler


def test_ranks_share_out_every_batch_and_take_training_steps_together():
    lengths = np.random.default_rng(0).integers(3, 30, size=101)
    whole = list(BucketBatchSampler(lengths, 16, shuffle=True, seed=3))
    parts = [list(BucketBatchSampler(lengths, 16, shuffle=True, seed=3, shard=(rank, 3))) for rank in range(3)]
    assert len({len(p) for p in parts}) == 1 and len(parts[0]) == len(whole)  # the same steps on every rank
    for step, batch in enumerate(whole):
        shared = [i for p in parts for i in p[step]]
        assert sorted(set(shared)) == sorted(batch)  # each title of the batch on one rank (the last may repeat)

    scored = [list(BucketBatchSampler(lengths, 40, shuffle=False, shard=(rank, 2))) for rank in range(2)]
    titles = [i for p in scored for batch in p for i in batch]
    assert sorted(titles) == list(range(101))  # validation scores every title exactly once


@pytest.mark.parametrize("pretrain", ["none", "mlm"])
def test_the_other_ranks_train_rank_0s_folds_through_rank_0s_fold_pipeline(
    tmp_path, headlines_tsv, monkeypatch, pretrain
):
    from klue_tc.core.config import job_config
    from klue_tc.jobs import distributed, run

    cfg = compose_job(
        [*TINY_MODEL, "logger=none", "+experiment=transformer", f"pretrain={pretrain}", f"data.path={headlines_tsv}"],
        tmp_path / "run",
    )
    results = tmp_path / "results"
    plan = {"config": job_config(cfg), "run_dir": str(tmp_path / "run"), "results_root": str(results), "key": "k0"}
    monkeypatch.setenv(distributed.PLAN_ENV, json.dumps({**plan, "folds": [2, 0]}))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(distributed, "TOKENIZER_WAIT_S", 1.0)  # a rank of its own fold loop fails, not hangs
    trained = []
    monkeypatch.setattr(run, "train_and_store", lambda job, k, *args: trained.append((k, job)))
    assert run.run_other_rank() == 0
    assert [k for k, _ in trained] == [2, 0]  # rank 0's folds, in its order, each through train_and_store
    job = trained[0][1]
    assert job.key == "k0" and (job.sources is not None) == (pretrain == "mlm")
    with run.fold_logger(job, 2) as logger:
        assert logger is None  # rank 0 alone logs and stores


def run_on_two_cpu_devices(tmp_path, headlines_tsv, *overrides: str):
    """One tiny fold on two CPU processes; the timeout turns a rank waiting forever into a failure."""
    done = run_cli(
        [
            "+experiment=transformer",
            f"data.path={headlines_tsv}",
            "cv.folds=2",
            "cv.fold=0",
            "encoder.layers=1",
            "logger=none",
            "trainer.devices=2",
            *overrides,
            f"results.dir={tmp_path / 'results'}",
            f"hydra.run.dir={tmp_path / 'run'}",
            *TINY_MODEL,
        ],
        cwd=tmp_path,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, tmp_path / "run"


@pytest.mark.integration
@pytest.mark.slow
def test_two_cpu_devices_train_one_fold_to_the_end(tmp_path, headlines_tsv):
    # Before ranks were told apart, the second rank waited for rank 0's fold lock forever.
    done, run_dir = run_on_two_cpu_devices(tmp_path, headlines_tsv, "trainer.max_epochs=2")
    out = done.stdout + done.stderr
    assert "being trained by another job" not in out
    assert out.count("epoch 2/2") == 1  # one rank reports
    metrics = json.loads((run_dir / "metrics.json").read_text())
    [fold] = metrics["folds"]
    assert fold["device"].endswith(" x2") and (run_dir / fold["checkpoint"]).is_file()
    # Only rank 0 writes: one record in the store, one run directory.
    assert [p.name for p in (tmp_path / "results").glob("*/fold*.json")] == ["fold0.json"]
    assert not (tmp_path / "outputs").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_two_cpu_devices_pretrain_once_on_rank_0_and_both_ranks_start_from_its_encoder(tmp_path, headlines_tsv):
    # Before the other rank waited for rank 0's encoder, it waited for a tokenizer never fitted.
    done, run_dir = run_on_two_cpu_devices(
        tmp_path,
        headlines_tsv,
        "trainer.max_epochs=1",
        "trainer.accelerator=cpu",
        "trainer.strategy=ddp",
        "pretrain=mlm",
        "pretrain.max_steps=3",
        "pretrain.batch_size=16",
    )
    out = done.stdout + done.stderr
    assert out.count("pretraining step 3/3") == 1  # one rank pretrains, once
    [stored] = (tmp_path / "results" / "pretrained").iterdir()  # pretrain.store_dir
    [fold] = json.loads((run_dir / "metrics.json").read_text())["folds"]
    assert fold["device"].endswith(" x2") and fold["pretrained"]["key"] == stored.name
    # The other rank fine-tunes from the same stored encoder (and its tokenizer), not one of its own.
    assert f"rank 1: INFO: fold 0 starts from the pretrained encoder {stored.name}" in out
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1
