"""The package's folders are its stages, and imports run one way between them: the layers contract
in pyproject.toml, checked by lint-imports (`make lint`)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
ENTRY_POINTS = {"__init__.py", "__main__.py", "predict.py", "diagnose.py", "prune.py"}


def lint_imports(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=repo, env={"PYTHONPATH": str(repo)}, capture_output=True, text=True
    )


def test_only_the_entry_points_stand_at_the_top_and_each_folder_says_what_it_holds():
    package = REPO / "klue_tc"
    assert {path.name for path in package.glob("*.py")} == ENTRY_POINTS
    for init in package.rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring and docstring.splitlines()[0].strip(), f"{init} has no docstring"


@pytest.mark.integration
def test_the_package_imports_downward():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_an_import_against_the_layers_breaks_the_contract(tmp_path):
    shutil.copytree(REPO / "klue_tc", tmp_path / "klue_tc", ignore=shutil.ignore_patterns("__pycache__", "resources"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    heads = tmp_path / "klue_tc" / "models" / "heads.py"
    # inside a function, as an import kept from the module's load would be: still an import
    heads.write_text(
        heads.read_text(encoding="utf-8")
        + "\n\ndef upward():\n    from klue_tc.training.module import TopicClassifierModule\n\n"
        + "    return TopicClassifierModule\n",
        encoding="utf-8",
    )

    result = lint_imports(tmp_path)

    assert result.returncode == 1
    assert "klue_tc.models is not allowed to import klue_tc.training" in result.stdout
    assert "klue_tc.models.heads -> klue_tc.training.module" in result.stdout
