"""The README's demo command works end to end (it is what a newcomer runs first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from envs import clean_env

pytestmark = pytest.mark.subprocess

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@pytest.mark.slow
def test_demo_runs_a_locked_training_and_an_upgrade() -> None:
    proc = subprocess.run([sys.executable, str(DEMO)], env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    first_screen = "\n".join(out.splitlines()[:20])
    assert "the branch moves, the locked run keeps its build" in first_screen  # what kernlock does, first
    assert "Resolver" not in first_screen and "load paths" not in first_screen  # internals: `kernlock env -v`
    assert 'added kernels-community/flash-attn2 = "v3"' in out
    assert "requests to the Hub during training: 0" in out
    assert "the lock wins over the moving branch" in out
    assert out.rstrip().endswith("Demo done.")
