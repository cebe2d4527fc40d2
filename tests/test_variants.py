"""A new encoder is one module and one YAML: the README's example, dropped into a copy of the repo
and nothing else edited, is a choice, in every sweep that takes all experiments, in the results key,
and trains through `python -m klue_tc`. Everything runs in subprocesses on the copy, so no
registration reaches this process or a later test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXPERIMENTS, REPO, TINY_MODEL
from klue_tc.core.config import EncoderConfig
from klue_tc.core.errors import ConfigError
from klue_tc.core.registry import ENCODERS, Registry


def encoders_with(*added: str) -> list[str]:
    """The registry's order with encoders `added`: the built-ins first, then every other by name."""
    others = [name for name in ENCODERS.names() if name not in ENCODERS.built_ins]
    return [*ENCODERS.built_ins, *sorted([*others, *added])]


def readme_example() -> dict[str, str]:
    """The README's "Add an encoder" files: {path named on the block's first line: its text}."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Add an encoder", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", section, flags=re.S)
    return {re.search(r"^# ((?:klue_tc|conf)/\S+)", block, flags=re.M)[1]: block for block in blocks}


def copy_repo(root: Path) -> Path:
    for folder in ("klue_tc", "conf", "sweeps", "hydra_plugins"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def run(root: Path, args: list[str], pythonpath: list[Path] = (), timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in [root, *pythonpath])}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def repo_with_gated(tmp_path) -> Path:
    root = copy_repo(tmp_path / "repo")
    files = readme_example()
    assert set(files) == {"klue_tc/models/encoders/gated.py", "conf/experiment/gated.yaml"}
    for path, text in files.items():
        (root / path).write_text(text, encoding="utf-8")
    return root


def external_distribution(site: Path, module: str, variant: str) -> Path:
    """An installed distribution (as pip leaves one) whose `klue_tc.variants` entry point names
    `module`, a copy of the README's encoder registered as `variant`."""
    site.mkdir(parents=True, exist_ok=True)
    text = readme_example()["klue_tc/models/encoders/gated.py"].replace('"gated"', f'"{variant}"')
    (site / f"{module}.py").write_text(text, encoding="utf-8")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[klue_tc.variants]\n{variant} = {module}\n")
    return site / f"{module}.py"


PROBE = """
import json
from klue_tc.core.config import validate
from klue_tc.store.fingerprint import Choices, version_of
from klue_tc.core.registry import ENCODERS, OBJECTIVES
from klue_tc.report.summary import study_order
from klue_tc.jobs.sweeps import compose_sweep, sweep_jobs

jobs = {name: sweep_jobs(name) for name in ("paper", "study", "full", "smoke")}
print(json.dumps({
    "composed": {job[0]: validate(compose_sweep("full", job)).encoder.name for job in jobs["full"]},
    "encoders": ENCODERS.names(),
    "report_order": [n for n in study_order() if n in ENCODERS],
    "experiments": {
        name: sorted({o for job in js for o in job if o.startswith("+experiment=")}) for name, js in jobs.items()
    },
    "versions": {
        **{e: version_of(Choices("mecab", e, "cls")).fingerprint for e in ENCODERS.names()},
        **{o: version_of(Choices("mecab", "transformer", "cls", o)).fingerprint for o in OBJECTIVES.names()},
    },
}))
"""


# What a registered variant changes without composing the sweeps (which takes most of PROBE's time).
VARIANTS_PROBE = """
import json
from klue_tc.store.fingerprint import code_version
from klue_tc.core.registry import ENCODERS

print(json.dumps({"encoders": ENCODERS.names(), "fingerprint": code_version().fingerprint}))
"""


def probe(root: Path, pythonpath: list[Path] = (), script: str = PROBE) -> dict:
    done = run(root, ["-c", script], pythonpath)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.integration
@pytest.mark.slow  # three processes on copies of the package: half a minute on 2 busy cores
def test_the_readmes_encoder_joins_every_list_from_one_module_and_one_yaml(tmp_path, repo_with_gated):
    plain = probe(copy_repo(tmp_path / "plain"))
    gated = probe(repo_with_gated)

    assert plain["encoders"] == encoders_with()
    assert gated["encoders"] == gated["report_order"] == encoders_with("gated")
    every = [f"+experiment={e}" for e in sorted([*EXPERIMENTS, "gated"])]
    assert gated["experiments"]["full"] == every
    assert (
        gated["experiments"]["paper"]
        == gated["experiments"]["study"]
        == [e for e in every if e != "+experiment=transformer_pre_ln"]
    )
    assert gated["experiments"]["smoke"] == plain["experiments"]["smoke"]  # two named experiments
    # Its code is in its own results key, and in no other: every record of the others stays valid.
    assert gated["versions"] == {**plain["versions"], "gated": gated["versions"]["gated"]}
    assert gated["versions"]["gated"] != plain["versions"]["transformer"]
    assert gated["composed"]["+experiment=gated"] == "gated"  # the experiment composes and validates

    done = run(repo_with_gated, ["-m", "klue_tc", "+experiment=bert"])
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.endswith("; valid choices: " + ", ".join(sorted([*EXPERIMENTS, "gated"]))), line


@pytest.mark.integration
def test_variants_from_entry_points_come_after_the_built_ins_sorted_and_are_fingerprinted(tmp_path, repo_with_gated):
    site = tmp_path / "site"
    module = external_distribution(site, "zeta_encoders", "a_external")
    first = probe(repo_with_gated, [site])
    assert first["encoders"] == encoders_with("a_external", "gated")  # not in import order

    module.write_text(module.read_text().replace("ffn_dim: int = 512", "ffn_dim: int = 384"))
    edited = probe(repo_with_gated, [site])["versions"]
    assert edited["a_external"] != first["versions"]["a_external"]  # no stale records of it
    assert edited == {**first["versions"], "a_external": edited["a_external"]}  # nor a retrained other


@pytest.mark.integration
def test_a_sublayer_that_breaks_the_contract_is_one_line_when_it_registers(tmp_path):
    root = copy_repo(tmp_path / "repo")
    (root / "klue_tc" / "models" / "encoders" / "broken.py").write_text(
        "from torch import nn\n"
        "from klue_tc.core.config import EncoderConfig\n"
        "from klue_tc.core.registry import ENCODERS\n\n\n"
        "class Mixer(nn.Module):\n"
        "    def __init__(self, d):\n"
        "        super().__init__()\n"
        "        self.net = nn.Linear(d, d)\n\n"
        "    def forward(self, x, padding):\n"
        "        return self.net(x)\n\n\n"
        '@ENCODERS.register("broken", EncoderConfig)\n'
        "def broken(cfg):\n"
        "    return [Mixer(cfg.d_model)]\n"
    )
    done = run(root, ["-m", "klue_tc", "+experiment=transformer"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: encoder 'broken' (klue_tc.models.encoders.broken): sub-layer Mixer lacks output_layers(); "
        "subclass klue_tc.models.blocks.Sublayer"
    ]


@pytest.mark.parametrize(
    "sublayers, missing",
    [
        (lambda cfg: [], "must return a non-empty list of sub-layers"),
        (lambda cfg: ["ffn"], "sub-layer str is not a torch.nn.Module"),
        (lambda cfg: [__import__("torch").nn.Linear(4, 4)], "sub-layer Linear lacks output_layers()"),
        (lambda cfg: [cfg.ffn_dim], "building it at its config's defaults failed: AttributeError"),
    ],
)
def test_the_sublayer_contract_is_checked_at_registration(sublayers, missing):
    registry = Registry("encoder", "klue_tc.models.encoders", (), check="klue_tc.models.encoder:check_encoder_variant")
    with pytest.raises(ConfigError, match=re.escape(missing)):
        registry.register("odd", EncoderConfig)(sublayers)
    assert "odd" not in registry._variants and "odd" not in ENCODERS


def test_a_name_registered_twice_is_one_line_naming_both_modules():
    registry = Registry("encoder", "klue_tc.models.encoders", ())
    registry.register("twice", EncoderConfig)(lambda cfg: [])
    with pytest.raises(ConfigError, match="encoder 'twice' is registered twice, by test_variants and test_variants"):
        registry.register("twice", EncoderConfig)(lambda cfg: [])


def test_sublayer_defaults_to_its_last_linear_as_output_layer():
    from torch import nn

    from klue_tc.models.blocks import FeedForward, Sublayer

    class Two(Sublayer):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 3), nn.Linear(3, 2)

    two = Two()
    assert two.output_layers() == [two.b]
    ffn = FeedForward(4, 8)
    assert ffn.output_layers() == [ffn.net[-1]]


@pytest.mark.integration
@pytest.mark.slow
def test_the_readmes_encoder_trains_and_a_sweep_takes_every_experiment(tmp_path, repo_with_gated, headlines_tsv):
    tiny = [f"data.path={headlines_tsv}", "cv.folds=2", "trainer.max_epochs=1", "logger=none", *TINY_MODEL]
    run_dir = tmp_path / "run"
    done = run(
        repo_with_gated,
        ["-m", "klue_tc", "+experiment=gated", "encoder.ffn_dim=16", "cv.fold=0", f"hydra.run.dir={run_dir}", *tiny],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["encoder"] == "gated" and 0.0 <= metrics["cv_f1_mean"] <= 1.0
    assert "ffn_dim: 16" in (run_dir / "config.yaml").read_text()

    sweep_dir = tmp_path / "sweep"
    command = ["-m", "klue_tc", "--multirun", "--config-dir", "sweeps", "--config-name", "full"]
    done = run(
        repo_with_gated,
        [*command, f"hydra.sweep.dir={sweep_dir}", "encoder.layers=1", "data.limit=null", *tiny],
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    finished = {json.loads(p.read_text())["experiment"] for p in sweep_dir.rglob("metrics.json")}
    assert finished == {*EXPERIMENTS, "gated"}
    assert "gated" in (sweep_dir / "report.md").read_text()


def test_the_readmes_configuration_table_lists_the_registrys_built_ins():
    from klue_tc.core.registry import VARIANT_GROUPS

    readme = (REPO / "README.md").read_text(encoding="utf-8")

    def listed(group: str) -> list[str]:
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{group}=` |")]
        return [name for name in re.findall(r"`([^`]+)`", row.split("|")[2]) if "/" not in name]

    for group, registry in VARIANT_GROUPS.items():
        assert listed(group) == list(registry.built_ins), group
    assert set(listed("+experiment")) <= set(EXPERIMENTS) and set(ENCODERS.built_ins) <= set(listed("+experiment"))


# A toy objective, as a user would add one: its config key, its own corruption (neighbours swapped
# in), its model and loss (which tokens were swapped) and its loss's name.
TOY_OBJECTIVE = """
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from klue_tc.core.config import PretrainConfig
from klue_tc.pretraining.masking import pick_tokens
from klue_tc.pretraining.objectives import Objective, classifier_encoder
from klue_tc.core.registry import OBJECTIVES


@dataclass
class SwapConfig(PretrainConfig):
    swap_p: float = 0.2  # share of the real tokens that show their left neighbour instead


class SwapDetector(nn.Module):
    def __init__(self, encoder, pad_id):
        super().__init__()
        self.encoder, self.pad_id = encoder, pad_id
        self.detector = nn.Linear(encoder.embeddings.tokens.embedding_dim, 1)

    def forward(self, shown, original, picked, rng=None):
        states = self.encoder(shown, shown.eq(self.pad_id))
        real = original.ne(self.pad_id)
        logits = self.detector(states).squeeze(-1)
        return F.binary_cross_entropy_with_logits(logits[real], picked[real].float())


@OBJECTIVES.register("swap", SwapConfig)
class Swap(Objective):
    loss_name = "swap loss"

    @classmethod
    def model(cls, run, tokenizer):
        return SwapDetector(classifier_encoder(run, tokenizer), tokenizer.specials.pad)

    @classmethod
    def corruption(cls, cfg, tokenizer, device):
        def corrupt(original, generator):
            picked = pick_tokens(original, tokenizer.specials, cfg.swap_p, 0, generator)
            return torch.where(picked, original.roll(1, dims=1), original), picked

        return corrupt
"""


@pytest.mark.integration
@pytest.mark.slow
def test_an_objective_is_one_module_and_pretrains_through_the_command_line(tmp_path, headlines_tsv):
    root = copy_repo(tmp_path / "repo")
    (root / "klue_tc" / "objectives" / "swap.py").write_text(TOY_OBJECTIVE, encoding="utf-8")
    run_dir = tmp_path / "run"
    tiny = [f"data.path={headlines_tsv}", "cv.folds=2", "cv.fold=0", "trainer.max_epochs=1", "logger=none"]
    pretraining = ["pretrain=swap", "pretrain.swap_p=0.3", "pretrain.max_steps=3", "pretrain.batch_size=16"]
    args = ["-m", "klue_tc", "+experiment=transformer", *pretraining, f"hydra.run.dir={run_dir}", *tiny, *TINY_MODEL]
    done = run(root, args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "swap loss" in done.stdout + done.stderr  # the pretraining's progress line names its loss
    metrics = json.loads((run_dir / "metrics.json").read_text())
    (fold,) = metrics["folds"]
    assert metrics["pretrain"] == "swap" and fold["pretrained"]["objective"] == "swap"
    assert fold["pretrained"]["steps"] == 3 and 0.0 <= fold["f1"] <= 1.0
    assert "swap_p: 0.3" in (run_dir / "config.yaml").read_text()

    done = run(root, ["-m", "klue_tc", "+experiment=transformer", "pretrain=mlm", "pretrain.swap_p=0.3"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: unknown config key pretrain.swap_p: only pretrain=swap has swap_p"
    ]


@pytest.mark.parametrize(
    "build, config, missing",
    [
        (object, "PretrainConfig", "register a subclass of klue_tc.pretraining.objectives.Objective"),
        ("Objective", "EncoderConfig", "its config must subclass klue_tc.core.config.PretrainConfig"),
        ("Objective", "PretrainConfig", "set loss_name"),
        ("Named", "PretrainConfig", "define model(run, tokenizer)"),
    ],
)
def test_the_objective_contract_is_checked_at_registration(build, config, missing):
    from klue_tc.core import config as schemas
    from klue_tc.pretraining.objectives import Objective

    class Named(Objective):
        loss_name = "named loss"

    builds = {"Objective": type("Bare", (Objective,), {}), "Named": Named}
    registry = Registry(
        "objective",
        "klue_tc.pretraining.objectives",
        (),
        check="klue_tc.pretraining.objectives:check_objective_variant",
    )
    with pytest.raises(ConfigError, match=re.escape(missing)):
        registry.register("odd", getattr(schemas, config))(builds.get(build, build))
    assert "odd" not in registry._variants
