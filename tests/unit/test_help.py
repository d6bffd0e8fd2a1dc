"""Every command's `--help` is something a newcomer can act on (issue 30, item 5): it ends with real examples that
the CLI accepts, links the docs by URL (an installed wheel has no docs/ folder), and `kernlock --help` cuts no
description short. The same help, rendered, is docs/cli.md (tests/unit/test_docs.py keeps it current)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import click
import pytest
from cli import kernlock_usage_problem
from click.testing import CliRunner

from kernlock.cli.app import main
from kernlock.cli.common import DOCS_URL

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from cli_reference import commands, help_text

EVERY = commands()
LEAVES = [(words, command) for words, command, _ in EVERY if words and not isinstance(command, click.Group)]


def _examples(text: str) -> list[list[str]]:
    tail = text[text.rindex("Examples:") :]
    return [shlex.split(line.strip()[2:], comments=True) for line in tail.splitlines() if line.strip().startswith("$ ")]


@pytest.mark.parametrize(("words", "command", "ctx"), EVERY, ids=[w or "kernlock" for w, _, _ in EVERY])
def test_every_help_ends_with_real_examples_and_links_the_docs_by_url(
    words: str, command: click.Command, ctx: click.Context
):
    text = help_text(words)
    found = _examples(text)
    assert 1 <= len(found) <= 3, text
    assert text.splitlines()[-1].strip().startswith("$ kernlock"), text  # the examples are the end of it
    for example in found:
        assert example[0] == "kernlock", example
        assert kernlock_usage_problem([w for w in example[1:] if w not in ("-h", "--help")]) is None, example
        if words:  # a command's examples run that command
            assert " ".join(example[1:]).startswith(words), (words, example)
    pages = re.findall(r"Docs: (\S+)", text)
    assert len(pages) == 1 and pages[0].startswith(DOCS_URL), text
    page = Path(__file__).resolve().parents[2] / "docs" / pages[0].removeprefix(DOCS_URL).split("#")[0]
    assert page.is_file(), pages[0]
    assert not re.search(r"(?<!/)docs/\w+\.md", text), text  # no path into a checkout


def test_the_examples_run_as_the_help_shows_them(tmp_path: Path):
    """`--help` of every command, through the real parser: what a user gets at a terminal."""
    for words, _command in LEAVES:
        result = CliRunner().invoke(main, [*words.split(), "--help"], terminal_width=80)
        assert result.exit_code == 0, result.output
        assert "Examples:" in result.output and f"$ kernlock {words}" in result.output


@pytest.mark.parametrize("group", [[], ["hook"]])
def test_command_lists_cut_no_description_short(group: list[str]):
    result = CliRunner().invoke(main, [*group, "--help"], terminal_width=80)
    assert result.exit_code == 0
    listed = result.output.split("Commands:")[1].split("Docs:")[0]
    assert "..." not in listed, listed
    command = main.commands[group[0]] if group else main
    assert isinstance(command, click.Group)
    for name in command.commands:
        assert re.search(rf"^  {name} +\S", listed, re.M), name


@pytest.mark.parametrize(("words", "command"), LEAVES, ids=[w for w, _ in LEAVES])
def test_every_command_takes_v_after_its_name(words: str, command: click.Command):
    """`kernlock sync -v` is `kernlock -v sync`."""
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    assert {"-v", "--verbose"} <= options, words


def test_options_of_one_meaning_read_the_same_everywhere():
    """`--environment` shows as ENV in every command; `--python` says what it does to the environment, per
    command."""
    metavars = {}
    pythons = {}
    for words, command in LEAVES:
        for param in command.params:
            if isinstance(param, click.Option) and "--environment" in param.opts:
                metavars[words] = param.metavar
            if isinstance(param, click.Option) and "--python" in param.opts:
                pythons[words] = param.help
    assert set(metavars.values()) == {"ENV"} and len(metavars) >= 2, metavars
    assert len(set(pythons.values())) == len(pythons) == 3, pythons
    assert "to change" not in pythons["hook status"]


def test_a_failure_under_sync_v_shows_the_traceback(tmp_path: Path):
    """-v after the command's name works as before it: the traceback, then the one line."""
    quiet = CliRunner().invoke(main, ["sync", "--project", str(tmp_path)])
    loud = CliRunner().invoke(main, ["sync", "-v", "--project", str(tmp_path)])
    assert quiet.exit_code == loud.exit_code == 1
    assert "Traceback" not in quiet.output and quiet.output.startswith("error:")
    assert "Traceback" in loud.output and "error:" in loud.output
