"""The docs stay true: the CLI reference is generated from the code, every command and flag the docs show exists,
and every TOML, lock and Python block parses."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import tomllib
from cli import kernlock_usage_problem

import kernlock.testing
from kernlock.cli.app import main
from kernlock.lock import file as lockfile
from kernlock.project import inputs as project

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
sys.path.insert(0, str(ROOT / "scripts"))


def blocks(language: str) -> list[tuple[Path, str]]:
    found = []
    for path in DOCS:
        for match in re.finditer(rf"```{language}\n(.*?)```", path.read_text(), re.S):
            found.append((path, match.group(1)))
    return found


def kernlock_invocations() -> list[tuple[Path, list[str]]]:
    calls = []
    for path, block in blocks("console"):
        for line in block.splitlines():
            if not line.startswith("$ "):
                continue
            words = shlex.split(line[2:], comments=True)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words.pop(0)  # VAR=value prefixes
            if words and words[0] == "kernlock":
                calls.append((path, words[1:]))
    return calls


def test_cli_reference_is_generated_from_the_code() -> None:
    from cli_reference import DOC, render

    assert DOC.read_text() == render(), "docs/cli.md is out of date: run `python scripts/cli_reference.py`"


def test_every_documented_command_and_flag_exists() -> None:
    calls = kernlock_invocations()
    assert len(calls) >= 20
    used = set()
    for path, words in calls:
        problem = kernlock_usage_problem(words)
        assert problem is None, f"{path.name}: {problem}"
        if not words[0].startswith("-"):  # `kernlock --version` names no command
            used.add(words[0])
    assert used == set(main.commands), f"commands never shown in the docs: {set(main.commands) - used}"


def test_toml_blocks_parse_and_kernlock_tables_validate(tmp_path: Path) -> None:
    tables = 0
    for path, block in blocks("toml"):
        data = tomllib.loads(block)
        if "lock-version" in data:
            lock = lockfile.loads(block, str(path))
            assert lock.kernels
        elif "tool" in data and "kernlock" in data["tool"]:
            (tmp_path / "pyproject.toml").write_text(block)
            assert project.load(tmp_path).requirements, path
            tables += 1
    assert tables >= 3


@pytest.mark.parametrize(("path", "block"), blocks("python"), ids=lambda v: getattr(v, "name", "block"))
def test_python_blocks_compile(path: Path, block: str) -> None:
    compile(block, str(path), "exec")


TESTING_HUB = ROOT / "docs" / "testing-hub.md"


def test_the_testing_hub_doc_lists_every_supported_name() -> None:
    """The supported surface of kernlock.testing (its ``__all__``) is the list docs/testing-hub.md gives."""
    text = TESTING_HUB.read_text()
    table = text[text.index("## Supported names") :].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([A-Za-z_0-9]+)`", table))
    assert set(kernlock.testing.__all__) <= listed, set(kernlock.testing.__all__) - listed
    assert all(hasattr(kernlock.testing, name) for name in kernlock.testing.__all__)


def test_readme_links_exist() -> None:
    for target in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", (ROOT / "README.md").read_text()):
        assert (ROOT / target).exists(), target


def test_readme_supported_versions_table_is_generated_from_the_matrix() -> None:
    from supported_versions import README, render, updated

    text = README.read_text()
    assert updated(text, render()) == text, (
        "README.md's supported-versions table disagrees with tests/compat/matrix.toml: "
        "run `python scripts/supported_versions.py`"
    )


def test_supported_generations_module_is_generated_from_the_matrix() -> None:
    """kernlock/generations/supported.py (what an installed kernlock knows of the matrix) is the script's output."""
    from supported_versions import MODULE, render_module

    assert MODULE.read_text() == render_module(), (
        "kernlock/generations/supported.py disagrees with tests/compat/matrix.toml: "
        "run `python scripts/supported_versions.py`"
    )


def test_architecture_names_every_module_of_each_package() -> None:
    """docs/architecture.md's table is where a newcomer looks a module up: each package's row names all of them."""
    rows = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        found = re.match(r"\| `([a-z_]+)/` \|.*\| (.*) \|$", line)
        if found:
            rows[found.group(1)] = set(re.findall(r"`([a-z_0-9]+)/?`", found.group(2)))
    packages = sorted(p.name for p in (ROOT / "kernlock").iterdir() if (p / "__init__.py").is_file())
    assert sorted(rows) == packages
    for package, named in rows.items():
        folder = ROOT / "kernlock" / package
        modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        assert modules <= named, f"docs/architecture.md, {package}/: name {sorted(modules - named)}"
