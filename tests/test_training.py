import csv
import json
import math

import numpy as np
import pytest

from conftest import EXPERIMENTS, TINY_MODEL, make_headlines, write_tsv
from jobs import run_in_process

CONTRACT_KEYS = {
    "experiment",
    "encoder",
    "ln",
    "layers",
    "head",
    "tokenizer",
    "folds",
    "cv_f1_mean",
    "cv_f1_std",
    "cv_accuracy_mean",
    "train_samples_per_s",
}


def overrides(tmp_path, data, *extra):
    return [f"data.path={data}", f"results.dir={tmp_path / 'results'}", "logger=none", *TINY_MODEL, *extra]


@pytest.mark.integration
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_trains_a_few_steps(tmp_path, tiny_tsv, experiment):
    run_dir = tmp_path / "run"
    run_in_process(
        overrides(
            tmp_path,
            tiny_tsv,
            f"+experiment={experiment}",
            "encoder.layers=2",
            "cv.folds=2",
            "cv.fold=0",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=2",
        ),
        run_dir,
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert CONTRACT_KEYS <= metrics.keys()
    assert metrics["experiment"] == experiment and metrics["layers"] == 2
    fold = metrics["folds"][0]
    assert {"fold", "f1", "accuracy", "best_epoch"} <= fold.keys() and fold["fold"] == 0
    assert metrics["train_samples_per_s"] > 0
    assert (run_dir / "fold0" / "best.ckpt").is_file() and (run_dir / "config.yaml").is_file()


@pytest.mark.integration
def test_a_learnable_task_reaches_f1_well_above_chance(tmp_path):
    data = write_tsv(tmp_path / "train.tsv", make_headlines(per_class=30, seed=1))
    run_dir = tmp_path / "run"
    cv_f1 = run_in_process(
        overrides(
            tmp_path,
            data,
            "+experiment=transformer",
            "encoder.layers=2",
            "cv.folds=3",
            "cv.fold=0",
            "trainer.max_epochs=12",
            "optim.lr=3e-3",
        ),
        run_dir,
    )
    assert cv_f1 > 0.7  # chance is 1/7; a title's copies share a fold, so none is scored on a title it learnt


@pytest.mark.integration
def test_the_same_seed_gives_the_same_numbers(tmp_path, tiny_tsv):
    results = []
    for attempt in range(2):
        run_dir = tmp_path / f"run{attempt}"
        run_in_process(
            overrides(
                tmp_path,
                tiny_tsv,
                "+experiment=trans_blstm",
                "encoder.layers=2",
                "cv.folds=2",
                "cv.fold=1",
                "trainer.max_epochs=2",
                "results.resume=false",
            ),
            run_dir,
        )
        fold = json.loads((run_dir / "metrics.json").read_text())["folds"][0]
        results.append((fold["f1"], fold["accuracy"], fold["best_epoch"]))
    assert results[0] == results[1]


@pytest.mark.parametrize(
    "accelerator, gpu, vendor, bf16_flag, asked, expected",
    [
        ("cpu", False, "GenuineIntel", None, None, "32-true"),  # no native bf16: emulated, slower
        ("cpu", False, "GenuineIntel", "amx_bf16", None, "bf16-mixed"),  # Intel AMX: bf16 matrix tiles
        ("cpu", False, "AuthenticAMD", "avx512_bf16", None, "bf16-mixed"),  # AMD Zen 4: measured 2.35x
        ("cpu", False, "GenuineIntel", "avx512_bf16", None, "32-true"),  # Intel without AMX: measured 0.70x
        ("auto", True, "GenuineIntel", None, None, "bf16-mixed"),  # GPU
        ("cpu", False, "GenuineIntel", "amx_bf16", "32-true", "32-true"),  # an explicit trainer.precision wins
    ],
)
def test_default_precision_follows_the_hardware(monkeypatch, accelerator, gpu, vendor, bf16_flag, asked, expected):
    import torch

    from klue_tc.core import hardware
    from klue_tc.core.config import TrainerConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    flags = frozenset({"avx512f", *([bf16_flag] if bf16_flag else [])})
    monkeypatch.setattr(hardware, "cpu_info", lambda: hardware.CpuInfo(vendor, flags))
    assert hardware.default_precision(TrainerConfig(accelerator=accelerator, precision=asked)) == expected


def test_cpu_vendor_and_flags_come_from_the_kernel_list(tmp_path):
    from klue_tc.core.hardware import cpu_info

    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx512_bf16\n\n"
        "processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx512_bf16\n"
    )
    info = cpu_info(tmp_path / "cpuinfo")
    assert info.vendor == "AuthenticAMD" and info.flags == {"fpu", "sse2", "avx512_bf16"}
    assert cpu_info(tmp_path / "absent").flags == set()


@pytest.mark.integration
def test_ema_checkpoints_the_averaged_weights(tmp_path, tiny_tsv, monkeypatch):
    import torch

    from klue_tc.training import fold as training
    from klue_tc.training.module import TopicClassifierModule

    slim = training.save_weights_only

    def keep_the_raw_weights_aside(source, target):  # the un-averaged weights, before slimming drops them
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            torch.load(source, map_location="cpu", weights_only=False)["current_model_state"], target.parent / "raw.pt"
        )
        slim(source, target)

    monkeypatch.setattr(training, "save_weights_only", keep_the_raw_weights_aside)
    run_dir = tmp_path / "run"
    run_in_process(
        overrides(
            tmp_path,
            tiny_tsv,
            "+experiment=transformer",
            "encoder.layers=2",
            "cv.folds=2",
            "cv.fold=0",
            "trainer.max_epochs=2",
            "optim.ema_decay=0.9",
        ),
        run_dir,
    )
    path = run_dir / "fold0" / "best.ckpt"
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    assert "optimizer_states" not in checkpoint and "current_model_state" not in checkpoint  # slimmed
    averaged, raw = checkpoint["state_dict"], torch.load(run_dir / "fold0" / "raw.pt", map_location="cpu")
    weight = "model.encoder.blocks.0.sublayers.0.sublayer.qkv.weight"
    # The EMA trails the trained weights: equal would mean the average was never used.
    assert not torch.equal(averaged[weight], raw[weight])
    TopicClassifierModule.load_from_checkpoint(path, map_location="cpu")  # loads as a model


def test_subword_sampling_feeds_a_new_segmentation_every_epoch(tmp_path, tiny_tsv):
    from klue_tc.core.config import DataConfig
    from klue_tc.core.registry import TOKENIZERS
    from klue_tc.data.batches import EncodedSplit, FoldDataModule
    from klue_tc.tokenizers import EncodedTitles, fit_tokenizer

    texts = [t for _, t in make_headlines(per_class=6)]
    tok = fit_tokenizer(TOKENIZERS.config_for("sentencepiece", vocab_size=300), texts)
    plain = EncodedTitles.from_lists(tok.encode(texts))
    labels = np.zeros(len(texts), dtype=np.int64)

    def resample(epoch):
        return EncodedTitles.from_lists(tok.encode_sampled(texts, 0.3, epoch))

    module = FoldDataModule(
        EncodedSplit(plain, labels, resample),
        EncodedSplit(plain, labels),
        EncodedSplit(plain, labels),
        DataConfig(batch_size=len(texts)),
        tok.specials.pad,
        seed=0,
    )

    class Clock:  # what the datamodule reads from its trainer
        current_epoch, global_rank, world_size = 0, 0, 1

    module.trainer = Clock()
    ids = []
    for epoch in (0, 1):
        Clock.current_epoch = epoch
        batch = next(iter(module.train_dataloader()))
        ids.append(
            {int(i): row[row != tok.specials.pad].tolist() for i, row in zip(batch["index"], batch["input_ids"])}
        )
    assert ids[0].keys() == ids[1].keys() == set(range(len(texts)))
    assert ids[0] != ids[1]
    for i, plain_ids in enumerate(tok.encode(texts)):  # different pieces, the same title
        assert tok.processor.decode(ids[1][i][1:-1]) == tok.processor.decode(plain_ids[1:-1])


def test_batch_widths_round_up_to_the_pad_multiple_and_keep_every_token():
    from klue_tc.core.config import DataConfig
    from klue_tc.data.batches import EncodedSplit, make_loader
    from klue_tc.tokenizers import EncodedTitles

    rng = np.random.default_rng(0)
    titles = [list(range(1, n + 1)) for n in rng.integers(3, 40, size=500)]
    split = EncodedSplit(EncodedTitles.from_lists(titles), np.zeros(len(titles), dtype=np.int64))
    widths, seen = set(), {}
    for batch in make_loader(split, DataConfig(batch_size=32, pad_multiple=8), pad_id=0, train=True):
        widths.add(batch["input_ids"].shape[1])
        for i, row in zip(batch["index"].tolist(), batch["input_ids"].tolist()):
            seen[i] = [t for t in row if t != 0]
    assert widths <= {8, 16, 24, 32, 40} and len(widths) >= 3  # a handful of shapes, not one per batch
    assert seen == dict(enumerate(titles))


def test_a_one_fold_run_takes_its_folds_validation_score_without_predicting_again(monkeypatch):
    from klue_tc.data.titles import LabelledTitles
    from klue_tc.store.records import FoldResult
    from klue_tc.training import evaluate

    truth = np.array([0, 1, 2, 2, 3])
    validation = LabelledTitles(["a", "b", "c", "d", "e"], truth, "val.tsv")
    fold = FoldResult(
        fold=0, f1=0.5, accuracy=0.5, best_epoch=1, epochs_run=1, train_samples_per_s=1.0,
        time_to_first_step_s=0.0, train_seconds=1.0, train_size=10, val_size=5, checkpoint="best.ckpt",
        tokenizer_dir="tokenizer",
    )  # fmt: skip
    fold.validation = evaluate.score_predictions(truth, np.array([0, 1, 2, 1, 3]), "val.tsv")

    def no_prediction(*args, **kwargs):
        raise AssertionError("the fold was predicted again")

    monkeypatch.setattr(evaluate, "ensemble_probs", no_prediction)
    scored = evaluate.score_run([fold], validation)
    assert scored.ensemble.f1 == fold.validation.f1
    assert np.trace(np.array(scored.ensemble.confusion_matrix)) == 4
    # Scored on other titles (a reused record, another validation file): predicted again.
    with pytest.raises(AssertionError, match="predicted again"):
        evaluate.score_run([fold], LabelledTitles(["a", "b", "c", "d", "e"], truth, "other.tsv"))


def test_ema_decay_ramps_up_then_holds():
    import torch

    from klue_tc.training.callbacks import ema_with_warmup

    update = ema_with_warmup(0.99)
    for n, expected_decay in [(1, 2 / 11), (90, 0.91), (10_000, 0.99)]:
        averaged, current = [torch.zeros(3)], [torch.ones(3)]
        update(averaged, current, torch.tensor(n))
        assert torch.allclose(averaged[0], torch.full((3,), 1 - expected_decay))


@pytest.mark.integration
def test_the_regularized_recipe_trains_and_its_checkpoint_loads(tmp_path, tiny_tsv):
    import torch
    import yaml

    from klue_tc.training.module import TopicClassifierModule

    run_dir = tmp_path / "run"
    run_in_process(
        overrides(
            tmp_path,
            tiny_tsv,
            "+experiment=transformer",
            "recipe=regularized",
            "encoder.layers=2",
            "cv.folds=2",
            "cv.fold=0",
            "trainer.max_epochs=2",
            "logger=csv",
            "trainer.log_every_n_steps=1",
        ),
        run_dir,
    )
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["augment"] == {
        "p": 0.6,
        "min_len": 5,
        "mlm_weight": 1.0,
        "random_share": 0.1,
        "keep_share": 0.1,
        "p_end": 0.2,
    }
    assert config["optim"]["rdrop_alpha"] == 0.5 and config["encoder"]["dropout"] == 0.3
    assert config["optim"]["regularize_from_epoch"] == 1
    # The masking rate is logged from the second epoch (late regularization), falling towards 20 %.
    with open(next(run_dir.glob("**/csv/*/metrics.csv")), newline="") as log:
        rows = list(csv.DictReader(log))
    logged = [(int(row["epoch"]), float(row["train/mask_p"])) for row in rows if row.get("train/mask_p")]
    assert logged and {epoch for epoch, _ in logged} == {1}
    rates = [rate for _, rate in logged]
    assert rates == sorted(rates, reverse=True) and 0.2 <= rates[-1] < rates[0] <= 0.6
    module = TopicClassifierModule.load_from_checkpoint(run_dir / "fold0" / "best.ckpt", map_location="cpu").eval()
    assert module.mlm_head is not None  # trained with the auxiliary loss, and saved with it
    probs = torch.softmax(module(torch.tensor([[2, 7, 8, 9, 3]])), -1)
    assert probs.shape == (1, 7) and torch.allclose(probs.sum(), torch.tensor(1.0))


@pytest.mark.integration
@pytest.mark.parametrize(
    "every_s, second_run_epochs",
    [
        (0.0, [2]),  # state written after every epoch: the second run trains epoch 3 only
        (3600.0, [0, 1, 2]),  # no epoch was an hour after the last write: nothing to resume, all again
    ],
)
def test_an_interrupted_fold_resumes_after_its_last_written_epoch(
    tmp_path, tiny_tsv, monkeypatch, every_s, second_run_epochs
):
    from klue_tc.jobs import progress
    from klue_tc.training import fold as training

    # Masking and dropout on: a resumed fold must also draw the random numbers an uninterrupted one does.
    args = overrides(
        tmp_path,
        tiny_tsv,
        "+experiment=transformer",
        "encoder.layers=2",
        "cv.folds=2",
        "cv.fold=0",
        "trainer.max_epochs=3",
        "trainer.early_stopping_patience=5",
        "augment.p=0.3",
        "augment.min_len=1",
        "encoder.dropout=0.3",
    )
    epochs_trained, killed, val_losses = [], [], []
    real_epoch_line = progress.EpochLine.on_validation_end

    def count_epochs(self, trainer, pl_module):
        real_epoch_line(self, trainer, pl_module)
        epochs_trained.append(trainer.current_epoch)
        val_losses.append(float(trainer.callback_metrics["val/loss"]))

    def killed_after_two_epochs(self, trainer, pl_module):  # as epoch 3 starts: epoch 2 is checkpointed
        if trainer.current_epoch == 2 and not killed:
            killed.append(True)
            raise KeyboardInterrupt  # as Ctrl-C would; a SLURM time limit or kill -9 stops it harder

    monkeypatch.setattr(training, "RESUME_CHECKPOINT_EVERY_S", every_s)
    monkeypatch.setattr(progress.EpochLine, "on_validation_end", count_epochs)
    monkeypatch.setattr(progress.EpochLine, "on_train_epoch_start", killed_after_two_epochs, raising=False)
    with pytest.raises((KeyboardInterrupt, SystemExit)):  # Lightning turns Ctrl-C into exit 1
        run_in_process(args, tmp_path / "first")
    state = next((tmp_path / "results").glob("*/fold0.training"))
    assert (state / "last.ckpt").is_file() == (every_s == 0)
    assert not list((tmp_path / "results").glob("*/fold0.json"))

    run_in_process(args, tmp_path / "second")
    assert epochs_trained == [0, 1, *second_run_epochs]
    fold0 = json.loads((tmp_path / "second" / "metrics.json").read_text())["folds"][0]
    assert fold0["epochs_run"] == 3 and 1 <= fold0["best_epoch"] <= 3
    assert (tmp_path / "second" / "fold0" / "best.ckpt").is_file()
    assert not state.exists()  # the record is written: the training state is gone

    # Resumed or not, the fold ends where an uninterrupted one does: the same shuffles, masks,
    # dropout and EMA (random generators and sampler epoch restored with the weights), so the
    # same validation loss after the last epoch, to the last bit.
    resumed_last_loss = val_losses[-1]
    run_in_process([*args, f"results.dir={tmp_path / 'straight'}"], tmp_path / "straight")
    straight = json.loads((tmp_path / "straight" / "metrics.json").read_text())["folds"][0]
    assert val_losses[-1] == resumed_last_loss and epochs_trained[-3:] == [0, 1, 2]
    assert (fold0["f1"], fold0["accuracy"], fold0["best_epoch"]) == (
        straight["f1"],
        straight["accuracy"],
        straight["best_epoch"],
    )


def test_a_resume_checkpoint_cut_short_by_a_kill_means_a_fresh_start(tmp_path, caplog):
    import torch

    from klue_tc.engine.checkpoints import resume_point

    state = tmp_path / "fold0.training"
    state.mkdir()
    torch.save({"epoch": 3, "state_dict": {"w": torch.randn(256, 256)}}, state / "last.ckpt")
    assert resume_point(0, state, resume=True) == state / "last.ckpt"
    whole = (state / "last.ckpt").read_bytes()
    (state / "last.ckpt").write_bytes(whole[: len(whole) // 2])
    (state / "best.ckpt").write_bytes(b"stale")
    assert resume_point(0, state, resume=True) is None
    assert not state.exists() and "unreadable" in caplog.text
    state.mkdir()
    (state / "last.ckpt").write_bytes(b"")
    assert resume_point(0, state, resume=False) is None and not state.exists()  # results.resume=false


def test_the_trainer_configs_lightning_flags_reach_the_trainer_as_they_are(tmp_path):
    from klue_tc.core.config import TrainerConfig
    from klue_tc.training.fold import lightning_flags, make_trainer

    cfg = TrainerConfig(max_epochs=3, accelerator="cpu", gradient_clip_val=0.5, limit_train_batches=2)
    # klue_tc's own keys (patience, compile, the bar) are not Lightning's; the precision is the job's device's
    assert set(lightning_flags(cfg)) == {
        "max_epochs",
        "accelerator",
        "devices",
        "strategy",
        "gradient_clip_val",
        "log_every_n_steps",
        "fast_dev_run",
        "limit_train_batches",
        "deterministic",
    }
    trainer = make_trainer(cfg, "32-true", tmp_path, None, [])
    assert (trainer.max_epochs, trainer.gradient_clip_val, trainer.limit_train_batches) == (3, 0.5, 2)
    assert trainer.log_every_n_steps == cfg.log_every_n_steps


@pytest.mark.parametrize("sweeper", ["basic", "optuna"])
def test_a_diverged_configuration_is_nan_and_a_failed_trial_under_optuna(tmp_path, sweeper):
    from jobs import compose_job
    from klue_tc.jobs.sweep_objective import sweeper_value
    from klue_tc.store.records import Describe, FoldResult, RunResult

    compose_job(["hparams_search=optuna"] if sweeper == "optuna" else [], tmp_path / "run")
    fold = FoldResult(
        fold=0, f1=float("nan"), accuracy=float("nan"), best_epoch=1, epochs_run=1, train_samples_per_s=1.0,
        time_to_first_step_s=0.0, train_seconds=1.0, train_size=10, val_size=5, checkpoint=None,
        tokenizer_dir="tokenizer", diverged="loss nan at step 3",
    )  # fmt: skip
    result = RunResult(Describe("e", "transformer", "post", 2, "cls", "sentencepiece"), "key", None, 2, [fold])
    if sweeper == "optuna":
        with pytest.raises(FloatingPointError, match="the trial is recorded as failed"):
            sweeper_value(result)
    else:
        assert math.isnan(sweeper_value(result))
