"""Helpers for tests: write a project's pyproject.toml, run the kernlock CLI in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"
# Variables that change what huggingface_hub/kernels do and must come from the test alone.
SCRUBBED = (
    "HF_HUB_OFFLINE",
    "HF_TOKEN",
    "HF_HUB_CACHE",
    "HF_HOME",
    "KERNELS_CACHE",
    "KERNLOCK_CACHE",
    "KERNLOCK_LOCKFILE",
    "KERNLOCK_MODE",
    "KERNLOCK_VERIFY",
    "LOCAL_KERNELS",
    "HF_HUB_DISABLE_TELEMETRY",
    "DO_NOT_TRACK",
    "DISABLE_TELEMETRY",
)


def write_pyproject(project: Path, kernels: str, environments: list[str] | None = None, head: str = "") -> Path:
    """Write pyproject.toml with a [tool.kernlock] table (``kernels`` is the body of [tool.kernlock.kernels])."""
    text = head or '[project]\nname = "demo"\nversion = "0.1.0"\n'
    text += "\n[tool.kernlock]\n"
    if environments is not None:
        text += "environments = [" + ", ".join(f'"{e}"' for e in environments) + "]\n"
    text += "\n[tool.kernlock.kernels]\n" + kernels
    path = project / "pyproject.toml"
    path.write_text(text)
    return path


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
