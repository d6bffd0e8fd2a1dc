"""Helpers for tests: write a project's pyproject.toml, run the kernlock CLI in a fresh process."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

from kernlock import variants

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


# -- generated (variant set x system) cases for the differential tests of kernlock's variant rule ------------

DIFF_TORCHES = ["28", "29", "210", "211", "212", "213"]
DIFF_BACKENDS = [
    *["cpu", "metal", "neuron", "tpu"],
    *["cu118", "cu120", "cu126", "cu128", "cu129", "cu130", "cu132"],
    *["rocm63", "rocm64", "rocm71", "xpu20253", "xpu20260", "cann80", "cann81"],
]
DIFF_PLATFORMS = [("x86_64", "linux"), ("aarch64", "linux"), ("aarch64", "darwin"), ("x86_64", "windows")]
DIFF_NOARCH = [f"torch-{b}" for b in variants.NOARCH_BACKENDS]


def diff_pool() -> dict[tuple[str, str], list[str]]:
    """Every arch name form (torch tagged and tagless, stable ABI, tvm-ffi) per (cpu, os)."""
    pool: dict[tuple[str, str], list[str]] = {}
    for cpu, os in DIFF_PLATFORMS:
        arch = [f"{b}-{cpu}-{os}" for b in DIFF_BACKENDS]
        names = [f"torch{t}{abi}-{a}" for t in DIFF_TORCHES for abi in ("-cxx11", "-cxx98", "") for a in arch]
        names += [f"torch-stable-abi{t}-{a}" for t in DIFF_TORCHES for a in arch]
        names += [f"tvm-ffi{v}-{a}" for v in ("01", "02", "10") for a in arch]
        pool[(cpu, os)] = names
    return pool


def random_system(rng: random.Random) -> dict:
    cpu, os = rng.choice(DIFF_PLATFORMS)
    # The loader passes no ABI off Linux; once in a while the facts are odd anyway.
    abi = rng.choice([True, True, False]) if os == "linux" else rng.choice([None] * 9 + [True])
    return {
        "backend": rng.choice(
            ["metal", "metal", "cpu", *DIFF_BACKENDS]
            if os == "darwin"
            else [*DIFF_BACKENDS, "cu129", "cu129", "cu130", "cpu", "cann80"]
        ),
        "cpu": cpu,
        "os": os,
        "torch_version": rng.choice([*(Version(f"{t[0]}.{t[1:]}") for t in DIFF_TORCHES), None]),
        "torch_cxx11_abi": abi,
        "tvm_ffi_version": rng.choice([None, None, Version("0.1"), Version("0.2"), Version("1.0")]),
        "macos_version": rng.choice([None, Version("15.5"), Version("26.0"), Version("26.1")]),
        "free_threaded": rng.random() < 0.08,
    }
