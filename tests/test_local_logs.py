"""logger=csv and logger=tensorboard: Lightning's own loggers write each fold's metrics into the run
directory, and the job's output says where they are and how to look at them."""

from __future__ import annotations

import pytest

from jobs import one_tiny_fold, run_in_process

pytestmark = pytest.mark.integration  # every test here runs a job, a process or a stage


def tiny_job(tmp_path, headlines_tsv, logger: str) -> list[str]:
    return one_tiny_fold(headlines_tsv, tmp_path / "results", f"logger={logger}")


def test_tensorboard_logs_each_fold_and_the_job_says_how_to_view_them(tmp_path, headlines_tsv, capsys):
    from tensorboardX.event_file_writer import EventFileWriter  # noqa: F401  (the writer Lightning falls back on)

    run_dir = tmp_path / "run"
    run_in_process(tiny_job(tmp_path, headlines_tsv, "tensorboard"), run_dir)

    events = list((run_dir / "tensorboard" / "fold0").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    out = capsys.readouterr().out
    assert f"view them with `tensorboard --logdir {run_dir}/tensorboard`" in out


def test_csv_logs_are_named_where_they_are(tmp_path, headlines_tsv, capsys):
    run_dir = tmp_path / "run"
    run_in_process(tiny_job(tmp_path, headlines_tsv, "csv"), run_dir)

    assert (run_dir / "csv" / "fold0" / "metrics.csv").is_file()
    assert f"{run_dir}/csv/fold<k>/metrics.csv" in capsys.readouterr().out
