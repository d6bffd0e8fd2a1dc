"""The suite's check that it wrote nothing into the real home (tests/hygiene.py), end to end: a pytest of its own
(``-p hygiene``) whose real home is a scratch folder, so that what its tests leak lands there and nowhere else.
A test that gives kernlock the real home back (as the tests did whose answers the issue found in
~/.cache/kernlock/answers) fails the run, in one process and under pytest-xdist (the controller checks); one that
keeps the session's home passes, and leaves the scratch home as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import hygiene
import pytest

pytestmark = pytest.mark.subprocess

TESTS = Path(__file__).resolve().parents[1]

# The tests the inner pytest runs: kernlock remembers an answer in its cache (kernlock.util.memo, what left the
# 156 answers), with the session's home, or with the real one given back.
INNER = """
import os
from pathlib import Path

from kernlock.util import hfenv, memo

REAL = Path(os.environ["PYTEST_KERNLOCK_REAL_HOME"])


def test_keeps_the_sessions_home():
    memo.remember("leak", ["kept"], {}, 1)
    assert memo.recall("leak", ["kept"]) == 1
    assert not hfenv.cache_root().is_relative_to(REAL)


def test_gives_the_real_home_back(monkeypatch):
    monkeypatch.setenv("HOME", str(REAL))
    memo.remember("leak", ["given back"], {}, 1)
"""


def _inner_pytest(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the INNER tests (``args`` pick them) in a pytest whose HOME is a fresh scratch folder; (its run, that
    folder)."""
    scratch = tmp_path / "scratch-home"
    (scratch / ".cache" / "kernlock").mkdir(parents=True)
    (tmp_path / "test_inner.py").write_text(INNER)
    inherited = (hygiene.SESSION_HOME, hygiene.REAL_HOME, *hygiene.FOLDERS)
    env = {k: v for k, v in os.environ.items() if k not in inherited and not k.startswith("PYTEST_XDIST")}
    env["HOME"] = str(scratch)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "hygiene", "-p", "no:cacheprovider"]
    command += ["--basetemp", str(tmp_path / "inner-tmp"), *args, "test_inner.py"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done, scratch


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one process", "xdist"])
def test_a_test_that_gives_kernlock_the_real_home_back_fails_the_run(tmp_path: Path, workers: list[str]) -> None:
    done, scratch = _inner_pytest(tmp_path, *workers)
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, output
    assert "2 passed" in output, output  # the tests themselves pass: the check fails the run
    [leaked] = (scratch / ".cache" / "kernlock" / "answers").iterdir()
    assert "the suite wrote into the real home" in output and f"new: {leaked}" in output, output
    assert f"new: {leaked.parent}" in output, output


def test_a_test_that_keeps_the_sessions_home_passes_and_leaves_the_home_alone(tmp_path: Path) -> None:
    done, scratch = _inner_pytest(tmp_path, "-k", "keeps")
    assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
    assert "the suite wrote into the real home" not in done.stdout
    assert [path.name for path in scratch.rglob("*")] == [".cache", "kernlock"]
