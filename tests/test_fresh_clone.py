"""What a new user meets on a fresh clone, following only the README: its commands compose and run
as written, and the rough edges around them end in one line."""

from __future__ import annotations

import io
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, make_headlines, write_tsv
from jobs import compose_job, run_cli, run_python

README = (REPO / "README.md").read_text(encoding="utf-8")
SWEEP_FILES = sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml") if not p.stem.startswith("_"))  # _base: shared
# A tiny job: appended to the README's commands so that running them takes seconds.
TINY = [
    "data.limit=140",
    "cv.folds=2",
    "cv.fold=0",
    "trainer.max_epochs=1",
    "trainer.accelerator=cpu",
    "logger=none",
    "encoder.layers=1",
    "encoder.d_model=32",
    "encoder.heads=2",
    "head.hidden=32",
    "tokenizer.vocab_size=1000",
    "data.batch_size=32",
]


def readme_commands(prefix: str) -> list[list[str]]:
    """Every command of the README's indented code blocks starting with `prefix` (continuation
    lines joined, trailing comments dropped), as the shell splits it."""
    lines = [line[4:] for line in README.splitlines() if line.startswith("    ")]
    joined, commands = "", []
    for line in lines:
        joined += line.strip()
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        if joined.startswith(prefix):
            commands.append(shlex.split(joined, comments=True))
        joined = ""
    return commands


def main_commands() -> list[list[str]]:
    """The README's `python -m klue_tc` and `make sweep` commands as the arguments of klue_tc's main."""
    commands = [c[3:] for c in readme_commands("python -m klue_tc ")]
    # The encoder that "Add an encoder" writes is not in the package: its command is an example.
    commands = [c for c in commands if "+experiment=gated" not in c]
    for command in readme_commands("make sweep"):
        options = dict(arg.split("=", 1) for arg in command[2:])
        commands.append(
            ["-m", "--config-dir", "sweeps", "--config-name", options["SWEEP"], *shlex.split(options.get("ARGS", ""))]
        )
    return commands


def test_readme_has_no_paths_a_clone_lacks_and_says_where_validation_comes_from():
    assert "../shared" not in README
    assert "validation split scored after training is the hub's by default" in README
    assert "data.validation_path=" in README


def test_readme_commands_are_found():
    commands = main_commands()
    assert len(commands) >= 6
    assert any(c[:1] == ["+experiment=trans_blstm"] for c in commands)
    assert sum(c[0] == "-m" for c in commands) >= 4  # smoke, study-pretrain, paper x 2 launchers


@pytest.mark.parametrize("command", main_commands(), ids=" ".join)
def test_every_readme_command_composes(command):
    """As `--cfg job` would, in this process: Hydra composes the command's config (its sweep file's
    for `make sweep`) and the typed schemas accept it."""
    from hydra import compose, initialize_config_dir

    from klue_tc.core.config import register_schemas, validate
    from klue_tc.jobs.cli_errors import quote_non_ascii_values

    name, folder, args = "config", REPO / "conf", [a for a in command if a != "-m"]
    if args[:1] == ["--config-dir"]:  # the sweep file first, conf/ behind it, as --config-dir puts them
        name, folder, args = args[3], REPO / args[1], [*args[4:], f"hydra.searchpath=[file://{REPO / 'conf'}]"]
    register_schemas()
    with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
        cfg = compose(name, overrides=quote_non_ascii_values(args))
    assert validate(cfg).experiment


@pytest.mark.integration
def test_the_readme_column_mapping_composes_as_written():
    example = re.search(r"`(data\.title_column=\S+ data\.label_column=\S+)`", README).group(1)
    done = run_cli([*example.split(), "--cfg", "job"], cwd=REPO)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "title_column: 제목" in done.stdout and "label_column: 분류" in done.stdout


@pytest.mark.integration
def test_labels_in_korean_compose_as_a_list():
    done = run_cli(["data.labels=[부정, 긍정]", "--cfg", "job"], cwd=REPO)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "- 부정\n" in done.stdout and "- 긍정\n" in done.stdout


@pytest.mark.integration
def test_an_unreadable_override_is_one_line_that_shows_it_quoted():
    done = run_cli(["data.title_column=a;b", "--cfg", "job"], cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: data.title_column=a;b: Hydra's override grammar cannot read this value; quote it, the whole "
        """override in single quotes for the shell: 'data.title_column="a;b"'"""
    )


@pytest.mark.integration
def test_an_unknown_precision_is_one_line_before_anything_loads(tmp_path):
    done = run_cli(["trainer.precision=fp16", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("error: trainer.precision must be one of 32-true, bf16-mixed, 16-mixed")
    )
    assert "got fp16" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.integration
def test_help_lists_the_launchers():
    done = run_cli(["--help"], cwd=REPO)
    assert done.returncode == 0
    launchers = ["basic", *(p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml")), "submitit_local"]
    assert "hydra/launcher" in done.stdout
    assert all(name in done.stdout for name in launchers), done.stdout[-800:]


@pytest.mark.integration
def test_make_help_lists_every_sweep_and_make_sweep_asks_for_one():
    shown = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert f"SWEEP={'|'.join(SWEEP_FILES)}" in shown.stdout
    # Without make's "Entering directory" lines, which a `make test` (a nested make) would print.
    plain = subprocess.run(
        ["make", "--no-print-directory", "sweep", "SWEEP="], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert plain.returncode != 0
    [line] = plain.stdout.splitlines()  # the one line, and no recipe of install or the sweep echoed
    assert line.startswith(f"make sweep needs SWEEP=<name>, one of: {' '.join(SWEEP_FILES)} ")
    assert "-m klue_tc" not in plain.stderr

    # The base every sweep file shares is no sweep: not offered, and refused naming the sweeps.
    assert "_base" not in shown.stdout
    base = subprocess.run(
        ["make", "--no-print-directory", "sweep", "SWEEP=_base"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert base.returncode != 0
    assert base.stdout.splitlines() == [f"no sweep _base: SWEEP is one of {' '.join(SWEEP_FILES)}"]


@pytest.mark.integration
def test_make_clean_removes_the_cache_too_and_says_so(tmp_path):
    """Tokenizers and encoded titles live in ~/.cache/klue_tc (or $KLUE_TC_CACHE): clean leaves none."""
    cache = tmp_path / "cache"
    (cache / "tokenizers").mkdir(parents=True)
    (tmp_path / "outputs").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KLUE_TC_CACHE": str(cache)}
    make = ["make", "-s", "-f", str(REPO / "Makefile"), "-C", str(tmp_path)]
    done = subprocess.run([*make, "clean"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not cache.exists() and not (tmp_path / "outputs").exists()
    shown = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "~/.cache/klue_tc" in next(line for line in shown.stdout.splitlines() if "make clean" in line)


def test_predict_reads_titles_from_standard_input(monkeypatch):
    from klue_tc.predict import read_titles

    monkeypatch.setattr(sys, "stdin", io.StringIO("삼성전자 반도체 공장\n\n손흥민 결승골\n"))
    assert read_titles(Path("-")) == ["삼성전자 반도체 공장", "손흥민 결승골"]


def test_the_offline_hub_is_said_once_per_command_and_not_by_the_report(caplog):
    from klue_tc.core.config import DataConfig
    from klue_tc.data.titles import training_titles, validation_titles

    with caplog.at_level(logging.WARNING, logger="klue_tc.data.titles"):
        for _ in range(2):  # two jobs of a sweep in one process
            training_titles(DataConfig())
            validation_titles(DataConfig())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # one for train, one for validation
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="klue_tc.data.titles"):
        training_titles(DataConfig(), announce_fallback=False)  # as the report's baseline reads them
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_sweep_ends_with_the_report_path(tmp_path, monkeypatch, capsys):
    from omegaconf import OmegaConf

    import klue_tc.report.write
    from klue_tc.report.sweep_callback import SweepReportCallback

    monkeypatch.setattr(klue_tc.report.write, "write_report", lambda directory, **kwargs: None)
    config = OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(tmp_path / "sweep")}},
            "logger": {"name": "none", "wandb": {}},
            "sweep": "smoke",
        }
    )
    SweepReportCallback().on_multirun_end(config)
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"report: {tmp_path / 'sweep' / 'report.md'}"


@pytest.mark.parametrize(("sweep", "expected"), [(None, "outputs/results"), ("smoke", "SWEEP_DIR/results")])
def test_an_ad_hoc_multirun_shares_the_store_so_its_rerun_resumes(tmp_path, sweep, expected):
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    from klue_tc.core.config import validate
    from klue_tc.jobs.job_setup import results_root

    cfg = compose_job([f"sweep={sweep}" if sweep else "sweep=null", f"hydra.sweep.dir={tmp_path}"], tmp_path / "run")
    OmegaConf.set_readonly(cfg.hydra, False)
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
    HydraConfig.instance().set_config(cfg)
    assert str(results_root(validate(cfg))) == expected.replace("SWEEP_DIR", str(tmp_path))


def quickstart_commands() -> list[list[str]]:
    """The quickstart's commands in order, as the shell splits them."""
    quickstart = README.split("## Quickstart (offline)")[1].split("\n## ")[0]
    return [shlex.split(line.strip(), comments=True) for line in quickstart.splitlines() if line.startswith("    ")]


def test_the_quickstart_activates_the_venv_then_starts_with_a_run_of_minutes():
    """A new user types the first commands first: the venv's python (else `No module named 'hydra'`),
    then a small run, not the full one, which takes most of a day on a laptop's CPU."""
    commands = [c for c in quickstart_commands() if c]
    assert commands[0] == [".", ".venv/bin/activate"]
    first_run = next(c for c in commands if c[:3] == ["python", "-m", "klue_tc"])
    sizes = dict(arg.split("=", 1) for arg in first_run[3:] if "=" in arg)
    assert int(sizes["data.limit"]) <= 3000 and int(sizes["trainer.max_epochs"]) <= 2 and int(sizes["cv.folds"]) <= 3
    assert "cost on this machine" in " ".join(README.split())  # the full run says what it costs at once


@pytest.mark.integration
@pytest.mark.slow
def test_the_quickstart_runs_as_written_offline(tmp_path):
    """The quickstart's commands in order, each training command with tiny sizes appended: offline
    they train on the bundled split, then report and predict read what they wrote."""
    commands = [c for c in quickstart_commands() if c and c[0] in ("python", "make")]
    commands = [c for c in commands if c[:2] not in (["make", "test"], ["make", "lint"])]  # CI runs the suite
    assert [c[:3] for c in commands] == [
        ["python", "-m", "klue_tc"],
        ["python", "-m", "klue_tc"],
        ["make", "report", "DIR=outputs/runs/trans_blstm"],
        ["python", "-m", "klue_tc.predict"],
        ["python", "-m", "klue_tc.predict"],
        ["python", "-m", "klue_tc"],  # the final model on all titles
    ]
    (tmp_path / "titles.txt").write_text("삼성전자, 새 반도체 공장 착공\n손흥민 결승골\n", encoding="utf-8")
    write_tsv(tmp_path / "validation.tsv", make_headlines(per_class=3))
    for command in commands:
        if command[:3] == ["python", "-m", "klue_tc"]:
            final = "cv.folds=1" in command  # its own folds: not the tiny CV's
            tiny = [arg for arg in TINY if not (final and arg.startswith("cv."))]
            done = run_python([*command[1:], *tiny], cwd=tmp_path, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            assert "bundled with klue_tc" in done.stdout + done.stderr
            last = done.stdout.strip().splitlines()[-1]
            assert "final model on all" in last if final else re.search(r"fold 0 macro-F1 \d\.\d{4} \(one fold", last)
        elif command[0] == "make":
            directory = command[2].split("=", 1)[1]
            done = run_python(["-m", "klue_tc.report", directory], cwd=tmp_path, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            assert "bundled" not in done.stdout + done.stderr
        else:
            run_dir = next((tmp_path / "outputs" / "runs" / "trans_blstm").glob("*/metrics.json")).parent
            args, _, target = " ".join(command[4:]).partition(" > ")  # the shell's redirection
            done = run_python(["-m", "klue_tc.predict", str(run_dir), *shlex.split(args)], cwd=tmp_path, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            if target:
                assert done.stdout.startswith("title,label,probability\n")
