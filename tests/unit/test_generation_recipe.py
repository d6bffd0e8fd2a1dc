"""Every kernels generation is named in every place that must name it (docs/architecture.md, "Adding a kernels
generation"): the recipe kept honest (it was redone for a made-up kernels 0.20 in a scratch branch, and each check
below was seen failing with its place left out).

The generations are kernlock's own (:data:`kernlock.generations.catalog.GENERATIONS`, generated from
tests/compat/matrix.toml; tests/unit/test_docs.py keeps the two in step). For each one this checks, by reading files
only (no Hub, no process, no kernels import):

1. its adapter module exists under kernlock/runtime/loaders/ with that ``ID``, and its ``SEAMS`` hold a seam the next
   older generation's lack (else the source probe cannot tell the two apart);
2. kernlock/runtime/loaders/__init__.py's docstring lists it;
3. tests/functional/test_loaders.py: ``RENAMED`` has its renamed internals, ``RESOLVING`` names it (with its
   package) exactly when its adapter asks resolver objects;
4. tests/compat/test_load_checks.py: ``RESOLVING`` and ``CHECKS_AT_LOAD`` name it exactly when its adapter asks
   resolvers / hooks kernels' load-time signature check;
5. tests/compat/test_matrix_cross.py names every tested kernels release;
6. docs/activation.md: the "patched" table, the coverage table's header and "Supported versions" name it;
   docs/architecture.md's module table names it;
7. environments/compat.TRANSFORMERS_RANGES agrees with every matrix set's ``transformers-gate`` (a transformers line
   that moved to the new kernels is written down).
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import kernlock
from kernlock.environments.compat import TRANSFORMERS_RANGES
from kernlock.generations.catalog import GENERATIONS, module_name

ROOT = Path(kernlock.__file__).resolve().parent.parent
IDS = [g.id for g in GENERATIONS]  # newest first
SIGNATURE_SEAM = "SignatureValidator.validate_kernel"


def _adapter(generation: str) -> Any:
    return importlib.import_module(f"kernlock.runtime.loaders.{module_name(generation)}")


def _module_strings(path: Path) -> dict[str, str]:
    """Module-level names bound to a string constant (``K19, K18 = "kernels-0.19", "kernels-0.18"`` included)."""
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=True))
            elif isinstance(target, ast.Name):
                pairs = [(target, node.value)]
            for name, value in pairs:
                if isinstance(name, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    names[name.id] = value.value
    return names


def _assigned(path: Path, name: str) -> ast.expr:
    """The expression module-level ``name`` is assigned (``RENAMED = {...}``)."""
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return node.value
    raise AssertionError(f"{path.relative_to(ROOT)} assigns no {name}")


def _string(node: ast.expr, names: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    raise AssertionError(f"not a string: {ast.unparse(node)}")


def _resolving(generation: str) -> str | None:
    """The package a generation's resolvers live in, or None for a loader that asks no resolver objects."""
    namespace = getattr(_adapter(generation), "NAMESPACE", None)
    return None if namespace is None else namespace.package


@pytest.mark.parametrize("generation", IDS)
def test_each_generation_has_its_adapter_module(generation: str) -> None:
    path = ROOT / "kernlock" / "runtime" / "loaders" / f"{module_name(generation)}.py"
    assert path.is_file(), f"{generation}: no adapter module {path.relative_to(ROOT)}"
    assert generation == _adapter(generation).ID


@pytest.mark.parametrize("newer, older", list(itertools.pairwise(IDS)))
def test_each_generation_holds_a_seam_the_older_one_lacks(newer: str, older: str) -> None:
    new, old = set(_adapter(newer).SEAMS), set(_adapter(older).SEAMS)
    assert {(module, path) for module, path, _ in new} - {(module, path) for module, path, _ in old}, (
        f"{newer}'s SEAMS hold nothing {older}'s lack: the source probe cannot tell them apart"
    )


def test_the_loaders_package_docstring_lists_every_generation() -> None:
    text = (ROOT / "kernlock" / "runtime" / "loaders" / "__init__.py").read_text()
    for generation in IDS:
        assert f"* ``{generation}``" in text and f"loaders.{module_name(generation)}`" in text, generation


def test_test_loaders_tables_name_every_generation() -> None:
    path = ROOT / "tests" / "functional" / "test_loaders.py"
    names = _module_strings(path)
    renamed = _assigned(path, "RENAMED")
    resolving = _assigned(path, "RESOLVING")
    assert isinstance(renamed, ast.Dict) and isinstance(resolving, ast.Dict)
    renamed_ids = {_string(k, names) for k in renamed.keys if k is not None}
    resolving_ids = {
        _string(k, names): _string(v, names) for k, v in zip(resolving.keys, resolving.values, strict=True) if k
    }
    assert set(IDS) <= renamed_ids, f"RENAMED lacks {sorted(set(IDS) - renamed_ids)}"
    expected = {g: package for g in IDS if (package := _resolving(g)) is not None}
    assert resolving_ids == expected, "RESOLVING: every generation that asks resolvers, with its package"


def _generations_in(path: Path, name: str) -> set[str]:
    """The ids of ``NAME = GENERATION in ("kernels-0.18", ...)``."""
    node = _assigned(path, name)
    assert isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Tuple | ast.Set | ast.List)
    return {_string(e, {}) for e in node.comparators[0].elts}


def test_test_load_checks_tables_name_every_generation() -> None:
    path = ROOT / "tests" / "compat" / "test_load_checks.py"
    resolving = {g for g in IDS if _resolving(g) is not None}
    checking = {g for g in IDS if any(p == SIGNATURE_SEAM for _, p, _ in _adapter(g).SEAMS)}
    assert _generations_in(path, "RESOLVING") == resolving
    assert _generations_in(path, "CHECKS_AT_LOAD") == checking


def test_the_cross_set_test_covers_every_tested_kernels_release() -> None:
    text = (ROOT / "tests" / "compat" / "test_matrix_cross.py").read_text()
    missing = [v for g in GENERATIONS for v in g.tested if f'"{v}"' not in text]
    assert not missing, f"tests/compat/test_matrix_cross.py does not require the sets of kernels {missing}"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def test_the_docs_name_every_generation() -> None:
    activation = (ROOT / "docs" / "activation.md").read_text()
    table = [line for line in activation.splitlines() if line.startswith("| `kernels-0.")]
    patched = set(re.findall(r"`(kernels-\d+\.\d+)`", "\n".join(table)))
    header = next(line for line in activation.splitlines() if line.startswith("| load path |"))
    supported = _section(activation, "## Supported versions")
    architecture = next(
        line for line in (ROOT / "docs" / "architecture.md").read_text().splitlines() if "`generations/`" in line
    )
    for generation in IDS:
        short = generation.removeprefix("kernels")  # the coverage header writes `-0.18` after the first
        assert generation in patched, f"docs/activation.md's table of what is patched has no row for {generation}"
        assert f"`{generation}`" in header or f"`{short}`" in header, (
            f"docs/activation.md's coverage table: {generation}"
        )
        assert f"`{generation}`" in supported, f"docs/activation.md, Supported versions: {generation}"
        assert f"`{generation}`" in architecture, f"docs/architecture.md's module table: {generation}"


def _pinned(requirements: tuple[str, ...], name: str) -> str | None:
    for requirement in requirements:
        if requirement.startswith(f"{name}=="):
            return requirement.split("==", 1)[1]
    return None


def test_transformers_ranges_agree_with_every_matrix_set() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "compat"))
    try:
        from compat_matrix import load
    finally:
        sys.path.remove(str(ROOT / "tests" / "compat"))
    for s in load().sets:
        transformers, kernels = _pinned(s.requirements, "transformers"), _pinned(s.requirements, "kernels")
        if s.transformers_gate is None or transformers is None or kernels is None:
            continue
        lines = [r for r in TRANSFORMERS_RANGES if Version(r[0]) <= Version(transformers) < Version(r[1])]
        assert len(lines) == 1, f"set {s.name}: transformers {transformers} is in {len(lines)} TRANSFORMERS_RANGES"
        _, _, low, below = lines[0]
        accepted = Version(low) <= Version(kernels) < Version(below)
        assert accepted is s.transformers_gate, (
            f"set {s.name}: TRANSFORMERS_RANGES says transformers {transformers} {'accepts' if accepted else 'refuses'}"
            f" kernels {kernels}, matrix.toml says transformers-gate = {str(s.transformers_gate).lower()}"
        )


def test_readme_names_the_install_pair_supported_py_holds() -> None:
    """README's prose around its generated table (the tested pair, the `pip install` lines) is written by hand:
    each pair it names is the one scripts/supported_versions.py wrote into ``INSTALL_PAIR``."""
    from kernlock.generations.supported import INSTALL_PAIR

    pair = re.findall(r"==([\d.]+)", INSTALL_PAIR)
    text = (ROOT / "README.md").read_text()
    named = re.findall(r"transformers[ =]=?=?([\d]+\.[\d]+\.[\d]+)'? ?\+? ?'?kernels[ =]=?=?(\d+\.\d+\.\d+)", text)
    assert named, "README.md names no transformers + kernels pair"
    assert {tuple(p) for p in named} == {tuple(pair)}, f"README.md names {sorted(set(named))}, INSTALL_PAIR {pair}"
