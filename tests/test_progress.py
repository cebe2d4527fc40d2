"""On a terminal the rich progress bar and the per-epoch lines share the screen: each epoch line
lands whole above the bar, and both count epochs from 1."""

from __future__ import annotations

import io
import logging
import re
import sys

import lightning as L
import pytest
import rich
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from klue_tc.core.config import TrainerConfig
from klue_tc.jobs.progress import EpochProgressBar, JobProgress
from klue_tc.training.fold import make_trainer

CONTROL = re.compile(r"\x1b\[(\??)([\d;]*)([A-Za-z])")


def screen(output: str) -> list[str]:
    """What a terminal shows after `output`: text, \\r, \\n, erase line (ESC[2K) and cursor up
    (ESC[nA); colours and cursor visibility do not move anything."""
    lines, row, col, i = [""], 0, 0, 0
    while i < len(output):
        control = CONTROL.match(output, i)
        if control:
            private, number, command = control.groups()
            if command == "K" and not private:
                lines[row] = ""
            elif command == "A" and not private:
                row = max(0, row - int(number or 1))  # ESC[nA
            i = control.end()
            continue
        char = output[i]
        if char == "\r":
            col = 0
        elif char == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + char + line[col + 1 :]
            col += 1
        i += 1
    return lines


class TinyClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        self.log("val/f1", 0.5)
        self.log("val/accuracy", 0.5)
        self.log("inner/f1", 0.5)  # the epoch line names the split that chooses the epoch too

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _loader(self):
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(64, 4, generator=generator), torch.randint(0, 3, (64,), generator=generator))
        return DataLoader(data, batch_size=8)

    def train_dataloader(self):
        return self._loader()

    def val_dataloader(self):
        return self._loader()


@pytest.mark.integration
def test_epoch_lines_land_whole_above_a_bar_that_counts_like_them(tmp_path, monkeypatch):
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stdout", terminal)  # the stream rich's live display redirects
    handler = logging.StreamHandler(terminal)  # as Hydra's console handler: the stream from before the bar
    handler.setFormatter(logging.Formatter("[klue_tc][INFO] - %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    job_log = logging.getLogger("klue_tc")  # as a job sets it up (an earlier test's Hydra run may have disabled it)
    for attribute, value in (("level", logging.INFO), ("disabled", False), ("propagate", True)):
        monkeypatch.setattr(job_log, attribute, value)
    job_log.setLevel(logging.INFO)  # as well: it clears the loggers' cached levels, which an earlier job's run filled
    bar = EpochProgressBar(refresh_rate=1, console_kwargs={"force_terminal": True, "file": terminal, "width": 200})
    try:
        cfg = TrainerConfig(max_epochs=2, accelerator="cpu", precision="32-true", progress_bar="rich")
        trainer = make_trainer(cfg, cfg.precision, tmp_path, None, [JobProgress(1, 2).callback(0), bar])
        trainer.fit(TinyClassifier())
    finally:
        root.removeHandler(handler)
        rich.reconfigure()
    shown = screen(terminal.getvalue())
    epoch_lines = [line.rstrip() for line in shown if "val macro-F1" in line]
    assert [line.split(":")[0] for line in epoch_lines] == [
        "[klue_tc][INFO] - fold 1/1 (fold 0) epoch 1/2",
        "[klue_tc][INFO] - fold 1/1 (fold 0) epoch 2/2",
    ], "\n".join(shown)
    assert all(line.endswith(("s", "m")) and "Epoch" not in line for line in epoch_lines), "\n".join(shown)
    assert any(line.startswith("Epoch 2/2") for line in shown), "\n".join(shown)
    assert not any(re.match(r"Epoch [01]/1", line) for line in shown), "\n".join(shown)
    assert handler.stream is terminal  # the log handler has its own stream back once the bar is gone


class SlowClassifier(TinyClassifier):
    """A step long enough that the lines' clock moves: 40 batches of 8 titles a 10 ms step."""

    def training_step(self, batch, batch_idx):
        import time

        time.sleep(0.01)
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(320, 4, generator=generator), torch.randint(0, 3, (320,), generator=generator))
        return DataLoader(data, batch_size=8)


@pytest.mark.integration
def test_off_a_terminal_the_job_says_its_cost_first_and_a_line_within_each_epoch(tmp_path, monkeypatch, caplog):
    """Written to a file (no bar), a job says before its first epoch ends what all its folds cost
    at the measured rate, then a step line at a fixed interval within the epoch."""
    monkeypatch.setattr("klue_tc.jobs.progress.COST_AFTER_S", 0.05)
    job = JobProgress(folds_to_train=3, max_epochs=2, every_s=0.05)
    cfg = TrainerConfig(max_epochs=2, accelerator="cpu", precision="32-true", progress_bar="none")
    trainer = make_trainer(cfg, cfg.precision, tmp_path, None, job.callbacks(0))
    with caplog.at_level(logging.INFO, logger="klue_tc"):
        trainer.fit(SlowClassifier())
    lines = [r.getMessage() for r in caplog.records if r.name == "klue_tc"]
    cost = [i for i, line in enumerate(lines) if line.startswith("cost on this machine")]
    first_epoch = next(i for i, line in enumerate(lines) if "epoch 1/2: val macro-F1" in line)
    assert len(cost) == 1 and cost[0] < first_epoch, lines
    assert re.search(r"a fold's 2 epochs of 320 titles take about \S+, the job's 3 folds about \S+", lines[cost[0]])
    steps = [line for line in lines[:first_epoch] if re.match(r"fold 1/3 \(fold 0\) epoch 1/2 step \d+/40: \d+ ", line)]
    assert steps and all("titles/s | elapsed" in line and "ETA" in line for line in steps), lines


@pytest.mark.integration
def test_a_terminals_bar_replaces_the_step_lines_but_not_the_cost(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("klue_tc.jobs.progress.COST_AFTER_S", 0.05)
    job = JobProgress(folds_to_train=1, max_epochs=1, every_s=0.0)
    bar = EpochProgressBar(refresh_rate=1, console_kwargs={"file": io.StringIO()})
    cfg = TrainerConfig(max_epochs=1, accelerator="cpu", precision="32-true", progress_bar="rich")
    trainer = make_trainer(cfg, cfg.precision, tmp_path, None, [*job.callbacks(0), bar])
    with caplog.at_level(logging.INFO, logger="klue_tc"):
        trainer.fit(SlowClassifier())
    rich.reconfigure()
    lines = [r.getMessage() for r in caplog.records if r.name == "klue_tc"]
    assert sum(line.startswith("cost on this machine") for line in lines) == 1, lines
    assert not any(" step " in line for line in lines), lines


@pytest.mark.integration
def test_an_epoch_cut_short_is_costed_by_its_steps(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("klue_tc.jobs.progress.COST_AFTER_S", 0.05)
    job = JobProgress(folds_to_train=1, max_epochs=1)
    cfg = TrainerConfig(max_epochs=1, accelerator="cpu", precision="32-true", progress_bar="none")
    cfg.limit_train_batches = 10  # 10 of the epoch's 40 steps
    trainer = make_trainer(cfg, cfg.precision, tmp_path, None, job.callbacks(0))
    with caplog.at_level(logging.INFO, logger="klue_tc"):
        trainer.fit(SlowClassifier())
    (cost,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cost on this machine")]
    assert "a fold's 1 epochs of 10 steps take about" in cost


def test_the_eta_after_an_epoch_leaves_out_the_pretraining_before_it():
    """An hour of pretraining then a 60-second epoch: nine more epochs take about nine minutes, not nine hours."""
    job = JobProgress(folds_to_train=2, max_epochs=10)
    job.started -= 3600
    job.training_began()
    job.training_started -= 60
    job.fold_number, job.epochs_done = 1, 1  # the first fold, its first epoch done
    assert job.eta(9) == pytest.approx(60 * (9 + 10), rel=0.01)
    job.training_began()  # the second fold's start does not restart the clock
    assert job.eta(9) == pytest.approx(60 * (9 + 10), rel=0.01)
