"""`python -m klue_tc.diagnose`: a fold's starting point beside a fresh initialisation."""

from __future__ import annotations

import shutil

import pytest
import torch

from conftest import TINY_MODEL
from jobs import run_in_process
from klue_tc.core.errors import USER_ERROR_EXIT
from klue_tc.diagnose import alignment, main


def test_alignment_is_one_when_every_token_is_alike_and_low_when_they_differ():
    real = torch.tensor([[True, True, True, False]])
    alike = torch.tensor([[1.0, 2.0, 3.0]]).expand(1, 4, 3).clone()
    assert alignment(alike, real) == 1.0
    spread = torch.eye(4)[None, :, :3]  # three orthogonal tokens and a pad
    assert alignment(spread, real) < 0.6


@pytest.mark.integration
def test_a_pretrained_fold_is_probed_against_a_fresh_start_and_its_plateau_named(tmp_path, tiny_tsv, capsys):
    """Two masked-LM steps cannot leave the token-frequency plateau: the probe says so, beside the
    alignment of every sublayer and the gradient reaching every part, for both starts."""
    results = tmp_path / "results"
    overrides = [
        "+experiment=trans_blstm",
        f"data.path={tiny_tsv}",
        "cv.folds=2",
        "cv.fold=0",
        "trainer.max_epochs=1",
        "encoder.layers=2",
        "logger=none",
        f"results.dir={results}",
        *TINY_MODEL,
        "pretrain=mlm",
        "pretrain.max_steps=2",
        "pretrain.batch_size=16",
    ]
    run_in_process(overrides, tmp_path / "run")
    (record,) = results.glob("*/fold0.json")
    capsys.readouterr()  # the job's own output
    assert main([str(record), "--titles", "32"]) == 0
    out = capsys.readouterr().out
    assert "trans_blstm post-LN, 2 layers" in out and f"32 titles of {tiny_tsv}" in out
    probed = [line for line in out.splitlines() if "pretrained" in line and "fresh" in line]
    assert len(probed) == (1 + 2 * 2) + (1 + 2 + 1)  # embeddings and 4 sublayers; embeddings, 2 blocks, head
    assert "on the plateau" in out

    # The study's older folds kept no checkpoint: the saved config and the pretrained store suffice.
    shutil.rmtree(record.parent / "fold0")
    assert main([str(record), "--titles", "32"]) == 0
    assert capsys.readouterr().out == out  # the same seeded start, whichever tokenizer copy was read

    assert main([str(tmp_path / "nothing.json")]) == USER_ERROR_EXIT
    assert "nothing.json: no such fold record" in capsys.readouterr().err


def test_help_shows_the_whole_description(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "beside a fresh initialisation of the same design, on titles of its data file." in shown
