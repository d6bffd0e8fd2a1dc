"""kernlock as a new user installs it (issue 30, items 1 and 2).

1. The README's install lines: the wheel `uv build` makes, installed into a fresh environment of every Python kernlock
   claims (3.10-3.13), gives `kernlock --version` and locks.
2. A machine without torch (a `uv tool install`, a laptop that locks for the cluster): real Python 3.12 with the wheel
   and no torch. It locks for the declared environments, `add`, `sync` and `sync --locked` say in one line that
   nothing was synced here and exit 0 (`sync --locked` still fails on a stale lock), and `show` says why its variant
   column is empty. (`sync --all-environments` there fills a cache for every locked environment:
   tests/compat/test_pythons.py, in the matrix sets of Python 3.10, 3.12 and 3.13.)
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from cli import run_cli
from envs import user_env_for
from installs import ROOT, venv_env
from projects import CPU_ENV, write_pyproject

from kernlock._version import __version__
from kernlock.lock import file as lockfile
from kernlock.testing import Catalog, HubServer

pytestmark = pytest.mark.subprocess  # every test here starts kernlock, Python or a server process

CU128 = "torch211-cxx11-cu128-x86_64-linux"
ACTIVATION = "kernels-community/activation"
FA2 = "kernels-community/flash-attn2"
NOT_SYNCED = (
    "not synced: this machine loads no kernels (torch is not installed); run `kernlock sync` where training runs, "
    "or `kernlock sync --all-environments` here to fill a shared cache for every locked environment"
)


def _user(bin_folder: Path, base: Path, hub: HubServer) -> dict[str, str]:
    """A user's shell with that environment's `kernlock` first on PATH, fresh caches, pointed at the session's Hub."""
    return venv_env(bin_folder, user_env_for(base, hub))


def _kernlock(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``kernlock ARGS`` as a shell runs it: the first `kernlock` on PATH."""
    return subprocess.run(["kernlock", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0 and "Traceback" not in done.stderr, (done.args, done.stdout, done.stderr)
    return done.stdout


# -- 1. the wheel on every Python ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_the_wheel_installs_and_locks_on_every_python(
    version: str, wheel_installed: Callable[[str], Path], catalog: Catalog, hub: HubServer, tmp_path: Path
) -> None:
    bin_folder = wheel_installed(version)
    env = _user(bin_folder, tmp_path, hub)
    probe = "import sys, importlib.util as u; print('%d.%d' % sys.version_info[:2], u.find_spec('torch'))"
    assert _ok(subprocess.run(["python", "-c", probe], env=env, capture_output=True, text=True)) == f"{version} None\n"
    assert _ok(_kernlock("--version", env=env, cwd=tmp_path)) == f"kernlock, version {__version__}\n"
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', environments=[CPU_ENV, CU128])
    locked = _ok(_kernlock("lock", env=env, cwd=project))
    assert locked.startswith("wrote kernels.lock (no kernels.lock yet)"), locked
    lock = lockfile.read(project / "kernels.lock")
    assert lock.environments == (CU128, CPU_ENV) and [k.repo for k in lock.kernels] == [ACTIVATION]


# -- 2. a machine without torch -----------------------------------------------------------------------------------


@pytest.fixture
def no_torch(wheel_installed: Callable[[str], Path], hub: HubServer, tmp_path: Path) -> dict[str, str]:
    """A shell on Python 3.12 with the kernlock wheel and no torch, pointed at the session's Hub."""
    return _user(wheel_installed("3.12"), tmp_path, hub)


def test_without_torch_add_needs_the_environments_first_and_writes_nothing(
    no_torch: dict[str, str], catalog: Catalog, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    failed = _kernlock("add", FA2, env=no_torch, cwd=empty)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert failed.stderr.startswith("error: torch is not installed, so this machine has no environment of its own")
    assert 'environments = ["torch213-cxx11-cpu-x86_64-linux"]' in failed.stderr and "kernlock env" in failed.stderr
    assert list(empty.iterdir()) == []  # no pyproject.toml, no kernels.lock


def test_without_torch_add_sync_and_show_succeed_and_say_why_nothing_was_synced(
    no_torch: dict[str, str], catalog: Catalog, hub: HubServer, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV, CU128])
    added = _ok(_kernlock("add", FA2, env=no_torch, cwd=project)).splitlines()
    assert added[0] == f'added {FA2} = "v3"' and added[1] == f"wrote kernels.lock (added {FA2})"
    assert added[-1] == NOT_SYNCED  # `lock` without torch: test_the_wheel_installs_and_locks_on_every_python

    hub.log.clear()
    for sync in (["sync"], ["sync", "--locked"]):
        done = _kernlock(*sync, env=no_torch, cwd=project)
        assert _ok(done) == NOT_SYNCED + "\n" and done.stderr == "", (sync, done.stderr)
    assert hub.log.count() == 0  # an up-to-date lock and nothing to fetch: no request

    shown = _ok(_kernlock("show", env=no_torch, cwd=project)).splitlines()
    assert shown[1].split() == [FA2, "v3", "v3", shown[1].split()[3], "-", "-", "-"]
    assert shown[-1] == (
        f"no variant here: this machine loads no kernels (torch is not installed); it locks for {CU128}, {CPU_ENV}"
    )

    # a stale lock: `sync --locked` still fails (what CI runs it for); plain `sync` re-locks, then says the same line
    write_pyproject(project, f'"{FA2}" = "v3"\n"{ACTIVATION}" = "v1"\n', environments=[CPU_ENV, CU128])
    stale = _kernlock("sync", "--locked", env=no_torch, cwd=project)
    assert stale.returncode == 1 and "kernels.lock is stale" in stale.stderr, stale.stderr
    relocked = _ok(_kernlock("sync", env=no_torch, cwd=project)).splitlines()
    assert relocked == [
        "re-locked kernels.lock first ([tool.kernlock] in pyproject.toml changed since kernels.lock was written)",
        NOT_SYNCED,
    ]


def test_show_names_the_environment_the_lock_lacks(catalog: Catalog, user_env: dict[str, str], project: Path) -> None:
    """With torch, on a machine the lock does not cover: the empty column is explained too."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', environments=[CU128])
    assert run_cli("lock", env=user_env, cwd=project).returncode == 0
    shown = run_cli("show", env=user_env, cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == (
        f"no variant here: this machine ({CPU_ENV}) is not an environment of kernels.lock; add it to `environments` "
        "in [tool.kernlock] and run `kernlock lock`"
    )


@pytest.mark.subprocess
def test_the_wheel_ships_py_typed_and_the_testing_hub(tmp_path: Path) -> None:
    """What `pip install kernlock` gets: the type information (py.typed) and the supported test Hub."""
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path)]
    done = subprocess.run([sys.executable, "-m", "pip", *build, str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, "building the wheel failed (hatchling is in the test extra):\n" + done.stderr[-3000:]
    [wheel] = tmp_path.glob("kernlock-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kernlock/py.typed", "kernlock/testing/__init__.py", "kernlock/testing/server/__init__.py"} <= names
    assert {"kernlock/testing/fixtures/__init__.py", "kernlock/runtime/state.py"} <= names
    assert "kernlock/testing/fixtures/_kernel_sources/init_head.py" in names  # the fixture builds' sources
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]
