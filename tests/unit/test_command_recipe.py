"""The places a new command must reach, checked, so that docs/architecture.md's recipe ("Adding a command") cannot
drift from what the house holds.

What the existing checks already catch is left to them: docs/cli.md regenerated and every command shown in a console
block (tests/unit/test_docs.py), each module named in docs/architecture.md's table (test_docs), examples and a docs
link in every --help (tests/unit/test_help.py), floors and ``__all__`` (tests/unit/test_code_health.py). This file
adds what nothing caught when a command (`kernlock why`, in a scratch branch) was added by the recipe:

- every command reaches its job in ``commands/``, through ``kernlock.api`` or its own module of ``commands/``;
- ``kernlock.api`` names each function in its three places alike (``_HOMES``, ``__all__``, the typed imports:
  a name missing from the typed imports is ``Any`` to mypy, so ``mypy --strict`` does not notice);
- the page a command's ``--help`` links to mentions the command;
- README's command table lists every command;
- some test under tests/functional or tests/system runs it.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import click
import pytest

from kernlock import api
from kernlock.cli.app import main
from kernlock.cli.common import DOCS_URL

ROOT = Path(__file__).resolve().parents[2]

#: Commands that reach their job elsewhere than ``commands/``, and why.
NOT_THROUGH_COMMANDS = {
    "ray-env": "it prints the runtime_env of kernlock.runtime.ray_jobs (what the driver's hook gives Ray): no job of "
    "its own beyond that module",
}
#: Commands README's table leaves to their page, and that page.
NOT_IN_README = {"ray-env": "docs/ray.md"}


def _leaves() -> list[tuple[str, click.Command]]:
    found = []
    for name, command in sorted(main.commands.items()):
        if isinstance(command, click.Group):
            found += [(f"{name} {sub}", c) for sub, c in sorted(command.commands.items())]
        else:
            found.append((name, command))
    return found


LEAVES = _leaves()
WORDS = [words for words, _ in LEAVES]


def _callback_source(command: click.Command) -> str:
    callback = command.callback
    assert callback is not None
    return inspect.getsource(inspect.unwrap(callback))


@pytest.mark.parametrize(("words", "command"), LEAVES, ids=WORDS)
def test_every_command_reaches_its_job_in_commands(words: str, command: click.Command) -> None:
    """The CLI parses and prints; the job is a module of ``commands/``, reached through ``kernlock.api`` (the
    recipe's way) or, for a command with a CLI module of its own, by importing its ``commands`` module."""
    if words in NOT_THROUGH_COMMANDS:
        return
    source = _callback_source(command)
    homes = {api._HOMES[name] for name in re.findall(r"\bapi\.(\w+)", source) if name in api._HOMES}
    direct = set(re.findall(r"\bkernlock\.commands(?:\.\w+)*|\bfrom kernlock\.commands\b", source))
    assert {h for h in homes if h.startswith("commands.")} or direct, (
        f"`kernlock {words}` calls no function of kernlock.api whose home is in commands/, and imports no module of "
        "kernlock.commands: put its job in a module of commands/ and name its function in kernlock.api "
        "(docs/architecture.md, 'Where a new piece goes')"
    )


def _typed_imports() -> dict[str, str]:
    """``name -> module`` (without ``kernlock.``) of api.py's ``if TYPE_CHECKING:`` imports."""
    found = {}
    for node in ast.parse((ROOT / "kernlock" / "api.py").read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for item in node.body:
                if isinstance(item, ast.ImportFrom) and item.module:
                    found.update({a.asname or a.name: item.module.removeprefix("kernlock.") for a in item.names})
    return found


def test_the_api_names_each_function_alike_in_its_three_places() -> None:
    """``_HOMES`` (what is imported on first use), ``__all__`` and the typed imports (what mypy and editors see)."""
    homes = dict(api._HOMES)
    assert sorted(homes) == sorted(api.__all__), (
        f"in _HOMES only: {sorted(set(homes) - set(api.__all__))}; "
        f"in __all__ only: {sorted(set(api.__all__) - set(homes))}"
    )
    typed = _typed_imports()
    assert typed == homes, {
        n: (homes.get(n), typed.get(n)) for n in set(homes) | set(typed) if homes.get(n) != typed.get(n)
    }


@pytest.mark.parametrize(("words", "command"), LEAVES, ids=WORDS)
def test_the_page_a_command_links_mentions_it(words: str, command: click.Command) -> None:
    """`--help` ends with ``Docs: URL``: that page says something of the command (of its group, for a group's
    command), not only docs/cli.md."""
    found = re.search(r"Docs: (\S+)", command.epilog or "")
    assert found and found.group(1).startswith(DOCS_URL), words
    page = ROOT / "docs" / found.group(1).removeprefix(DOCS_URL).split("#")[0]
    text = page.read_text()
    first = words.split()[0]  # a group's command: the group's name will do (`kernlock hook`)
    mentioned = re.search(rf"`(kernlock )?{re.escape(first)}[ `]", text)
    assert mentioned, f"{page.relative_to(ROOT)} (linked by `kernlock {words} --help`) never mentions `{words}`"


@pytest.mark.parametrize("name", sorted(main.commands))
def test_readme_lists_every_command(name: str) -> None:
    table = (ROOT / "README.md").read_text().split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    if name in NOT_IN_README:
        assert f"kernlock {name}" in (ROOT / NOT_IN_README[name]).read_text()
        return
    assert re.search(rf"^\| `kernlock {re.escape(name)}\b", table, re.M), f"README.md's Commands table has no `{name}`"


def _test_texts() -> str:
    return "\n".join(
        path.read_text()
        for folder in ("functional", "system")
        for path in sorted((ROOT / "tests" / folder).glob("*.py"))
    )


TEST_TEXTS = _test_texts()


@pytest.mark.parametrize("words", WORDS)
def test_some_test_runs_every_command(words: str) -> None:
    """A command's words appear as the arguments of a command line in tests/functional or tests/system."""
    quoted = ", ".join(f'"{word}"' for word in words.split())
    assert quoted in TEST_TEXTS, f"no test under tests/functional or tests/system runs `kernlock {words}`"
