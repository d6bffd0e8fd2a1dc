"""The installed command (`kernlock`, `python -m kernlock`) ends without the interpreter's teardown: what it
prints, its exit status and the program's exit handlers must be exactly those of an ordinary exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernlock.cli.app import main

pytestmark = pytest.mark.subprocess


def _kernlock(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernlock", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_output_and_status_are_those_of_the_command(tmp_path: Path):
    """Everything the command printed reaches a pipe (nothing is lost in a buffer), and the status is the
    command's: 0, a usage error's 2, an error's 1."""
    for args, status in ((["--help"], 0), (["lock", "--help"], 0), (["--version"], 0), (["lock", "--nope"], 2)):
        done = _kernlock(*args, cwd=tmp_path, env={**os.environ, "COLUMNS": "80"})
        # click formats help for a terminal COLUMNS wide to COLUMNS - 2 columns
        expected = CliRunner().invoke(main, args, prog_name="python -m kernlock", terminal_width=78)
        assert (done.returncode, done.stdout) == (status, expected.stdout), args
    missing = _kernlock("lock", "--check", cwd=tmp_path)
    assert missing.returncode == 1 and missing.stderr.startswith("error: ") and "pyproject.toml" in missing.stderr


def test_exit_handlers_still_run(tmp_path: Path):
    """A handler registered with atexit (by a sitecustomize, a profiler, a coverage tool) runs before the quick
    exit, and sees the command's output already written."""
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "ran"
    (site / "sitecustomize.py").write_text(
        f"import atexit, pathlib\natexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('handler ran'))\n"
    )
    done = _kernlock("--version", cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.startswith("kernlock, version")
    assert marker.read_text() == "handler ran"


def test_a_run_that_asks_for_warnings_takes_the_ordinary_exit(tmp_path: Path):
    """`python -X dev`, `-W` and `PYTHONWARNINGS` ask for warnings, and the interpreter's teardown is where an
    unclosed file's ResourceWarning is raised: such a run gets it, as it would from any program. Without them the
    quick exit stays (no teardown, no warning)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins._left_open = open(__file__)\n")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    for flags, extra in ((["-X", "dev"], {}), (["-W", "default"], {}), ([], {"PYTHONWARNINGS": "default"})):
        done = subprocess.run(
            [sys.executable, *flags, "-m", "kernlock", "--version"],
            cwd=tmp_path, env={**env, **extra}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0 and done.stdout.startswith("kernlock, version"), flags
        assert "ResourceWarning: unclosed file" in done.stderr, (flags, extra)
    quick = _kernlock("--version", cwd=tmp_path, env=env)
    assert quick.returncode == 0 and quick.stderr == ""
