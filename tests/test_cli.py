"""The main job as a user runs it: one process, W&B offline, metrics.json, reruns, errors."""

import json
import logging
import re
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, TINY_MODEL, make_headlines, write_tsv
from jobs import compose_job, run_cli, run_in_process, run_python
from klue_tc.core.config import NO_PRETRAINING
from klue_tc.core.registry import ENCODERS, OBJECTIVES
from klue_tc.data.titles import LABEL_NAMES

PRETRAIN_CHOICES = [NO_PRETRAINING, *OBJECTIVES.names()]


def wandb_run_files(run_dir: Path) -> list[bytes]:
    return [p.read_bytes() for p in run_dir.glob("wandb/offline-run-*/*.wandb")]


def by_fold(payloads: list[bytes], folds: int) -> dict[int, list[bytes]]:
    """The offline runs' .wandb files, keyed by the fold each names. Not by directory name: that
    sorts by start second, then by a random run id, and two tiny folds can start in one second."""
    return {fold: [p for p in payloads if f"fold{fold}".encode() in p] for fold in range(folds)}


@pytest.mark.integration
def test_main_job_trains_all_folds_logs_wandb_and_scores_validation(tmp_path, tiny_tsv, capsys, caplog):
    """In-process, as `python -m klue_tc` runs it (the command line's own errors are tested below)."""
    validation = write_tsv(tmp_path / "val.tsv", make_headlines(per_class=4, seed=7))
    run_dir = tmp_path / "run"
    common = [
        "+experiment=transformer",
        f"data.path={tiny_tsv}",
        f"data.validation_path={validation}",
        "cv.folds=2",
        "trainer.max_epochs=2",
        "encoder.layers=1",
        f"results.dir={tmp_path / 'results'}",
        *TINY_MODEL,
    ]
    with caplog.at_level(logging.INFO, logger="klue_tc"):
        run_in_process(common, run_dir)
    out = capsys.readouterr().out
    assert "epoch 1/2" in caplog.text and "wandb sync" in out and "wandb leet" in out

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [f["fold"] for f in metrics["folds"]] == [0, 1]
    assert {"validation_f1", "validation_accuracy", "validation_per_class_f1", "cv_f1_std"} <= metrics.keys()
    assert (run_dir / "confusion_matrix.png").stat().st_size > 1000
    assert (run_dir / "config.yaml").read_text().count("experiment: transformer") == 1
    last_line = out.strip().splitlines()[-1]
    assert re.fullmatch(
        r"transformer: CV macro-F1 \d\.\d{4} ± \d\.\d{4} over 2 folds; validation macro-F1 \d\.\d{4} .*", last_line
    )

    # One offline W&B run per fold and one aggregate run, all in the group "<experiment>-<config hash>":
    # the CV aggregate and the validation confusion matrix are logged once, in the aggregate.
    payloads = wandb_run_files(run_dir)
    assert len(payloads) == 3
    aggregate = [p for p in payloads if b"aggregate" in p]
    folds = [p for p in payloads if b"aggregate" not in p]
    assert len(aggregate) == 1 and len(folds) == 2
    group = f"transformer-{metrics['config_hash']}".encode()
    assert all(group in p for p in payloads)
    runs = by_fold(folds, folds=2)
    for fold, fold_payloads in runs.items():
        assert len(fold_payloads) == 1, f"fold {fold} is named by {len(fold_payloads)} runs"
        assert b"val/f1" in fold_payloads[0] and b"cv/f1_mean" not in fold_payloads[0]
    assert b"cv/f1_mean" in aggregate[0] and b"validation/confusion_matrix" in aggregate[0]
    assert b"validation/per_class_f1" in aggregate[0]

    # Rerunning the same command trains nothing: both folds come from the results store.
    rerun_dir = tmp_path / "rerun"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="klue_tc"):
        run_in_process([*common, "logger=none"], rerun_dir)
    again = capsys.readouterr()
    assert caplog.text.count("already finished") == 2 and "epoch 1/2" not in caplog.text
    rerun = json.loads((rerun_dir / "metrics.json").read_text())
    assert rerun["cv_f1_mean"] == metrics["cv_f1_mean"] and rerun["validation_f1"] == metrics["validation_f1"]
    assert "2 folds reused (finished " in again.out.strip().splitlines()[-1]
    # The rerun's directory holds the files its metrics.json names, though another run trained them.
    for fold in rerun["folds"]:
        assert not Path(fold["checkpoint"]).is_absolute() and (rerun_dir / fold["checkpoint"]).is_file()
        assert not Path(fold["tokenizer_dir"]).is_absolute() and (rerun_dir / fold["tokenizer_dir"]).is_dir()


@pytest.mark.integration
def test_bad_data_file_is_one_line_naming_the_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    ynat = "".join(f"{name}\t제목\n" for name in LABEL_NAMES)  # YNAT data: all seven, then a misspelt one
    bad.write_text(f"label\ttext\n{ynat}과학\t반도체 호황\n", encoding="utf-8")
    done = run_cli([f"data.path={bad}", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {bad}: line 9: unknown label '과학' in column 'label'; expected an id 0-6 or one of "
        "IT과학, 경제, 사회, 생활문화, 세계, 스포츠, 정치 (data.labels=[...] names a label set of your own)"
    ]
    assert not (tmp_path / "run").exists()  # a rejected start leaves no run folder

    # In the default place (outputs/runs/<experiment>/<time>) it leaves no empty parents either,
    # and a folder that holds something else stays.
    (tmp_path / "outputs" / "results").mkdir(parents=True)
    done = run_cli([f"data.path={bad}", "logger=none"], cwd=tmp_path)
    assert done.returncode == 2
    assert [p.name for p in (tmp_path / "outputs").iterdir()] == ["results"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "override, expected",
    [
        # Hydra lists a group's options sorted: the registry's encoders, conf/experiment's files.
        ("encoder=lstm", f"error: unknown choice encoder=lstm; valid choices: {', '.join(sorted(ENCODERS.names()))}"),
        ("+experiment=bert", f"error: unknown choice experiment=bert; valid choices: {', '.join(EXPERIMENTS)}"),
        ("encoder.ln=middle", "Invalid value 'middle', expected one of [post, pre]"),
        (
            "encoder.positions=relative",
            "Invalid value 'relative', expected one of [sinusoidal, scaled_sinusoidal, learned, alibi, rotary]",
        ),
        ("encoder.layrs=3", "error: unknown config key encoder.layrs (did you mean encoder.layers?)"),
        ("experiment=transformer", "write +experiment=transformer"),
        ("tokenizer=sentencepeice", "(did you mean sentencepiece?)"),
        ("cv.fold=7", "error: cv.fold must be in 0..4, got 7"),
        ("recipe=strong", "error: unknown choice recipe=strong; valid choices: plain, regularized"),
        ("augment.mlm_weight=1.0", "error: augment.mlm_weight needs masked tokens to predict: set augment.p > 0 too"),
        ("optim.regularize_from_epoch=-1", "error: optim.regularize_from_epoch must be >= 0, got -1"),
        (
            "tokenizer=mecab tokenizer.sampling_alpha=0.2",
            "error: unknown config key tokenizer.sampling_alpha: "
            "only tokenizer=sentencepiece or kobert has sampling_alpha",
        ),
        (
            "pretrain=mlm pretrain.electra.generator_layers=2",
            "error: unknown config key pretrain.electra.generator_layers: only pretrain=electra has electra",
        ),
        ("pretrain=bert", f"error: unknown choice pretrain=bert; valid choices: {', '.join(sorted(PRETRAIN_CHOICES))}"),
    ],
)
def test_bad_override_is_one_line_with_the_valid_choices(tmp_path, override, expected):
    done = run_cli([*override.split(), f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "override, expected",
    [
        ("tokenizer.vocab_size=-5", "tokenizer.vocab_size must be >= 1, got -5"),
        ("encoder.dropout=1.5", "encoder.dropout must be in [0, 1), got 1.5"),
        ("encoder.heads=0", "encoder.heads must be >= 1, got 0"),
        ("optim.lr=0", "optim.lr must be > 0, got 0.0"),
        ("optim.ema_decay=1", "optim.ema_decay must be in [0, 1), got 1.0"),
        ("data.batch_size=0", "data.batch_size must be >= 1, got 0"),
        ("trainer.max_epochs=0", "trainer.max_epochs must be >= 1, got 0"),
        ("trainer.accelerator=tpu", "trainer.accelerator must be one of auto, cpu, gpu, cuda; got tpu"),
        (
            "augment.random_share=0.7 augment.keep_share=0.6",
            "augment.random_share + augment.keep_share must be at most 1, got 0.7 + 0.6",
        ),
        (
            "augment.p_end=0.2",
            "augment.p_end must be in [0, 1) with augment.p > 0 (the masking it ends), "
            "got augment.p_end=0.2, augment.p=0.0",
        ),
    ],
)
def test_out_of_range_values_fail_validation_with_the_key_and_the_range(tmp_path, override, expected):
    from klue_tc.core.config import validate
    from klue_tc.core.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        validate(compose_job(["+experiment=transformer", *override.split()], tmp_path / "run"))
    assert str(raised.value) == expected


def test_a_gpu_asked_for_by_name_must_be_there(monkeypatch):
    import torch

    from klue_tc.core.config import TrainerConfig
    from klue_tc.core.errors import ResourceError
    from klue_tc.core.hardware import require_asked_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ResourceError, match="sees no CUDA GPU; use trainer.accelerator=auto"):
        require_asked_gpu(TrainerConfig(accelerator="gpu"))
    require_asked_gpu(TrainerConfig(accelerator="auto"))  # auto falls back to the CPU


def test_wandb_that_cannot_start_falls_back_to_csv_with_one_warning(tmp_path, monkeypatch, caplog):
    from lightning.pytorch.loggers import CSVLogger

    from klue_tc.core.config import LoggerConfig
    from klue_tc.jobs import loggers

    def broken(*args, **kwargs):
        raise RuntimeError("wandb service unavailable")

    monkeypatch.setattr("wandb.init", broken)
    with caplog.at_level("WARNING"):
        logger = loggers.make_logger(LoggerConfig(), tmp_path, "job", "group", "fold0", {})
    assert isinstance(logger, CSVLogger)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "W&B could not start" in warnings[0].getMessage()


@pytest.mark.integration
@pytest.mark.parametrize(
    "extra, expected",
    [
        (["data.path={bad}"], "unknown label '과학'"),
        (["data.path={good}", "tokenizer=kobert"], "pass tokenizer.model_path="),  # offline, nothing cached
    ],
)
def test_a_bad_file_or_a_missing_kobert_model_fails_before_lightning_loads(tmp_path, extra, expected):
    """Start-up errors come in seconds: the job loads the data and finds KoBERT's model before it
    imports Lightning (torch's nn comes with the encoder registry, which types the config)."""
    bad, good = tmp_path / "bad.tsv", write_tsv(tmp_path / "good.tsv", make_headlines(per_class=5))
    ynat = "".join(f"{name}\t제목\n" for name in LABEL_NAMES)  # YNAT data: all seven, then a misspelt one
    bad.write_text(f"label\ttext\n{ynat}과학\t반도체 호황\n", encoding="utf-8")
    args = [a.format(bad=bad, good=good) for a in extra] + ["logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['klue_tc', *{args!r}]\n"
        "try:\n    runpy.run_module('klue_tc', run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    print('exit', done.code, 'lightning' in sys.modules)\n"
    )
    done = run_python(["-c", probe], cwd=tmp_path)
    assert expected in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "exit 2 False"
