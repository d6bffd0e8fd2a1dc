"""Running the kernlock command line as a user does (a fresh process), and reading what it did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_cli(
    *args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``kernlock ARGS`` in a fresh process, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "kernlock", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_clean_error(result: subprocess.CompletedProcess, *needles: str, code: int = 1) -> None:
    """A command failed as the user should see it: exit ``code``, one message naming each of ``needles``."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") or "Error:" in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def kernlock_usage_problem(words: list[str]) -> str | None:
    """Why ``kernlock WORDS...`` names a command or flag the CLI does not have (click introspection), or None."""
    import click

    from kernlock.cli.app import main

    if words and words[0].startswith("-"):  # `kernlock --version`: an option of kernlock itself
        ours = {opt for p in main.params if isinstance(p, click.Option) for opt in p.opts} | {"-h", "--help"}
        return None if words[0] in ours else f"`kernlock {' '.join(words)}`: kernlock has no {words[0]}"
    command = main.commands.get(words[0]) if words else None
    if command is None:
        return f"`kernlock {' '.join(words)}`: {words[0] if words else 'nothing'} is not a command"
    if isinstance(command, click.Group):  # `kernlock hook install ...`: the subcommand's options
        sub = command.commands.get(words[1]) if len(words) > 1 else None
        if sub is None:
            return f"`kernlock {' '.join(words)}`: {' '.join(words[:2])} is not a command"
        command, words = sub, words[1:]
    options = {opt for p in command.params if isinstance(p, click.Option) for opt in [*p.opts, *p.secondary_opts]}
    for word in words[1 : words.index("--")] if "--" in words else words[1:]:
        if word.startswith("-") and word.split("=")[0] not in options:
            return f"`kernlock {' '.join(words)}`: no {word}"
    return None


_IMPORTS_PROBE = """
import atexit, os, runpy, sys

def _write():
    with open(os.environ["KERNLOCK_TEST_MODULES"], "w") as out:
        out.write("\\n".join(sorted(sys.modules)))

atexit.register(_write)
sys.argv = ["kernlock", *sys.argv[1:]]
runpy.run_module("kernlock", run_name="__main__", alter_sys=True)
"""


def run_cli_imports(
    *args: str, env: dict[str, str], cwd: Path, out: Path
) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``kernlock ARGS`` in a fresh process, as :func:`run_cli` does; also return the names of every module
    it had imported when it exited (``sys.modules``, written to ``out`` at exit)."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_PROBE, *args],
        env={**env, "KERNLOCK_TEST_MODULES": str(out)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, set(out.read_text().split("\n")) if out.exists() else set()
