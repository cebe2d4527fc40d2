"""No API key from the environment in anything a run writes; a store or cache shared by a group is
updated by its members without any file becoming writable by everyone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import TINY_MODEL
from jobs import run_cli
from klue_tc.core.errors import ConfigError
from klue_tc.core.redaction import NoSecretsInScripts, redact, refuse_secrets_in_launcher, secret_values

WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"
HF_TOKEN = "hf_SeCrEtToKeNfOrTeStS"


@pytest.fixture
def credentials(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", WANDB_KEY)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # named like a token, is not one


def test_credentials_are_found_by_name_and_redacted_in_configs(credentials):
    found = secret_values()
    assert found[WANDB_KEY] == "WANDB_API_KEY" and found[HF_TOKEN] == "HF_TOKEN" and "false" not in found
    config = {"logger": {"wandb": {"group": f"g-{HF_TOKEN}"}}, "hub_token": "typed-in", "layers": [1, WANDB_KEY]}
    assert redact(config) == {
        "logger": {"wandb": {"group": "g-<redacted $HF_TOKEN>"}},
        "hub_token": "<redacted>",
        "layers": [1, "<redacted $WANDB_API_KEY>"],
    }


@pytest.mark.integration
@pytest.mark.slow
def test_nothing_a_run_writes_holds_a_credential(tmp_path, tiny_tsv, credentials):
    """An `oc.env` interpolation and a shell-expanded override both carry a token into the config;
    config.yaml, the store, Hydra's overrides, the log and W&B's offline files must not keep it."""
    done = run_cli(
        [
            "+experiment=transformer",
            f"data.path={tiny_tsv}",
            "cv.folds=2",
            "cv.fold=0",
            "trainer.max_epochs=1",
            "logger.wandb.group=${oc.env:HF_TOKEN}",
            f"sweep=team-{WANDB_KEY}",  # as `sweep=team-$WANDB_API_KEY` reaches Python
            f"results.dir={tmp_path / 'results'}",
            f"hydra.run.dir={tmp_path / 'run'}",
            *TINY_MODEL,
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "config.yaml").is_file() and list((tmp_path / "run").rglob("*.wandb"))
    leaks = []
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_relative_to(tmp_path / "cache"):
            data = path.read_bytes()
            leaks += [
                f"{path.relative_to(tmp_path)}: {name}"
                for name, v in (("wandb", WANDB_KEY), ("hf", HF_TOKEN))
                if v.encode() in data
            ]
    assert leaks == []
    assert "<redacted $HF_TOKEN>" in (tmp_path / "run" / "config.yaml").read_text(encoding="utf-8")
    assert WANDB_KEY not in done.stdout + done.stderr and HF_TOKEN not in done.stdout + done.stderr


def test_a_launcher_setting_holding_a_credential_is_refused_before_any_script(credentials):
    config = OmegaConf.create(
        {
            "hydra": {
                "launcher": {"cpus_per_task": 4, "setup": ["export OMP_NUM_THREADS=4", "export T=${oc.env:HF_TOKEN}"]}
            }
        }
    )
    with pytest.raises(ConfigError, match=r"hydra.launcher.setup\[1\] holds the value of \$HF_TOKEN"):
        refuse_secrets_in_launcher(OmegaConf.to_container(config.hydra.launcher, resolve=True), "hydra.launcher")
    with pytest.raises(SystemExit):  # a callback's exception would only be a warning to Hydra
        NoSecretsInScripts().on_multirun_start(config)
    NoSecretsInScripts().on_multirun_start(OmegaConf.create({"hydra": {"launcher": {"setup": ["export A=1"]}}}))


@pytest.mark.integration
@pytest.mark.slow
def test_a_slurm_sweep_with_a_credential_in_its_setup_is_one_line(tmp_path, tiny_tsv, credentials):
    done = run_cli(
        [
            "-m",
            "+experiment=transformer",
            f"data.path={tiny_tsv}",
            "hydra/launcher=slurm",
            'hydra.launcher.setup=["export HF_TOKEN=${oc.env:HF_TOKEN}"]',
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=tmp_path,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: hydra.launcher.setup[0] holds the value of $HF_TOKEN")
    assert not list(tmp_path.rglob("*.sh"))


def modes_under(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.fixture
def umask():
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def write_store_and_cache(shared: Path) -> None:
    """Every writer of a results store and of the tokenizer cache, once."""
    import torch

    from conftest import make_headlines
    from klue_tc.core.registry import TOKENIZERS
    from klue_tc.engine.checkpoints import AtomicCheckpointIO
    from klue_tc.store.records import FoldResult
    from klue_tc.store.results import ResultsStore
    from klue_tc.tokenizers import TokenizerCache

    store = ResultsStore(shared / "results")
    with store.claim("abc", 0):
        AtomicCheckpointIO().save_checkpoint({"epoch": 0}, store.training_state_dir("abc", 0) / "last.ckpt")
        record = FoldResult(0, 0.5, 0.5, 1, 1, None, None, 1.0, 10, 5, None, "tokenizer")
        store.put("abc", 0, record, {"seed": 1})
    cache = TokenizerCache(shared / "cache")
    titles = [t for _, t in make_headlines(per_class=10)]
    tokenizer, key = cache.tokenizer(TOKENIZERS.config_for("sentencepiece", vocab_size=400), titles, "fold0")
    cache.encoded(tokenizer, key, titles, "all")
    assert torch is not None


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o000])
def test_a_group_shared_store_and_cache_are_group_writable_never_world_writable(tmp_path, umask, mask):
    shared = tmp_path / "team"
    shared.mkdir()
    os.chmod(shared, 0o2775)  # what `chmod g+ws` gives a team's folder
    umask(mask)
    write_store_and_cache(shared)
    modes = modes_under(shared)
    assert len(modes) > 10
    wrong = {
        path: oct(mode)
        for path, mode in modes.items()
        if mode & stat.S_IWOTH
        or not mode & stat.S_IWGRP
        or (stat.S_ISDIR((shared / path).stat().st_mode) and mode & 0o2070 != 0o2070)
    }
    assert wrong == {}


def test_a_private_store_keeps_the_umask(tmp_path, umask):
    private = tmp_path / "mine"
    private.mkdir(mode=0o755)
    write_store_and_cache(private)
    modes = modes_under(private)
    assert {oct(mode) for path, mode in modes.items() if (private / path).is_file()} == {"0o644"}
    assert {oct(mode) for path, mode in modes.items() if (private / path).is_dir()} == {"0o755"}


def folder_the_member_cannot_read(member: int, team_gid: int, groups: list[int]):
    """The first folder of the code the second user's part runs (klue_tc, whose modules load lazily, and
    the virtual environment's packages, whose data files SentencePiece reads when it fits) that the
    user cannot read; None when it can read them all."""
    import sysconfig

    import sentencepiece

    from conftest import REPO

    needed = [
        REPO / "klue_tc",
        Path(sentencepiece.__file__).parent / "package_data",
        Path(sysconfig.get_path("purelib")),
    ]
    os.setgroups([team_gid])
    os.setegid(member)
    os.seteuid(member)
    try:
        for folder in needed:
            try:
                os.listdir(folder)
            except PermissionError:
                return folder
        return None
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as a second user")
def test_a_second_member_of_the_group_updates_what_the_first_wrote(umask):
    """What one user of a group-shared store wrote (umask 022), another member takes over: its
    locks, records, training state and cache, with no file writable by everyone."""
    import shutil
    import tempfile

    from conftest import make_headlines
    from klue_tc.core.registry import TOKENIZERS
    from klue_tc.engine.checkpoints import AtomicCheckpointIO
    from klue_tc.store.records import FoldResult
    from klue_tc.store.results import ResultsStore
    from klue_tc.tokenizers import TokenizerCache

    team_gid, member = 4242, 65534
    groups = os.getgroups()
    blocked = folder_the_member_cannot_read(member, team_gid, groups)
    if blocked is not None:
        pytest.skip(
            f"the second user (uid {member}) cannot read {blocked}, which its part imports or reads: this "
            "clone (or its .venv) lies in a folder other users cannot enter; run it from a clone they can read"
        )
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own tmp folders are private to root
    try:
        os.chmod(base, 0o755)
        shared = base / "team"
        shared.mkdir()
        os.chown(shared, 0, team_gid)
        os.chmod(shared, 0o2775)
        write_store_and_cache(shared)
        cfg = TOKENIZERS.config_for("sentencepiece", vocab_size=400)
        titles = [t for _, t in make_headlines(per_class=10)]
        os.setgroups([team_gid])
        os.setegid(member)
        os.seteuid(member)  # from here on, another user who shares only the team's group
        store = ResultsStore(shared / "results")
        record = FoldResult(0, 0.7, 0.7, 1, 1, None, None, 1.0, 10, 5, None, "tokenizer")
        for key in ("abc", "def"):  # a configuration the first member began, and a new one
            with store.claim(key, 0):
                AtomicCheckpointIO().save_checkpoint({"epoch": 1}, store.training_state_dir(key, 0) / "last.ckpt")
                store.put(key, 0, record)
        cache = TokenizerCache(shared / "cache")
        tokenizer, key = cache.tokenizer(cfg, titles, "fold0")
        cache.encoded(tokenizer, key, titles, "other")
        (shared / "cache" / "tokenizers" / key / "tokenizer.json").write_text("{damaged")  # a crash's leftover
        cache.tokenizer(cfg, titles, "fold0")  # fitted again, over the first member's copy
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)
    try:
        assert store.read("abc", 0).f1 == 0.7 and store.read("def", 0).f1 == 0.7
        assert not [p for p, mode in modes_under(shared).items() if mode & stat.S_IWOTH]
    finally:
        shutil.rmtree(base, ignore_errors=True)
