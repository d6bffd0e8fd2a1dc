"""Builds without metadata.json, in whichever matrix set is installed.

Every kernels release kernlock knows (0.15 on) reads a build's metadata.json to load it, so a build without one
(older Hub builds) fails at load with a raw ``OSError`` ("Failed to open .../metadata.json"), plain kernels or not.
`kernlock lock` refuses such a build for every environment (tests/functional/test_lock_metadata.py); here, with
the loader each matrix set installs:

* a lock that holds one anyway (made before kernlock refused them; here: the good lock with the bad build's commit
  and files put in) stops every activated load of it with one line naming the fix, no traceback, whatever kernels
  is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from cli import run_cli
from envs import user_env_for
from projects import CPU_ENV, LockedProject, strip_metadata, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo

pytestmark = pytest.mark.subprocess

BARE = "kernels-community/bare"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedProject]:
    """A lock of a build without metadata.json, synced: v1 locked, then v1's build loses its metadata.json on the
    Hub, and the lock is given that commit and its files (the rest unchanged; its content-hash made again), as a
    kernlock that locked such builds wrote it."""
    base = tmp_path_factory.mktemp("bare")
    repo = create_kernel_repo(base / "hub", BARE, {"v1": [CPU_VARIANT]})
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{BARE}" = "v1"\n', [CPU_ENV])
    with HubServer(base / "hub") as server:
        env = user_env_for(base, server)
        assert run_cli("lock", "--project", str(project), env=env).returncode == 0
        stripped = strip_metadata(repo, "v1")
        lock = lockfile.read(project / "kernels.lock")
        ((entry,), (variant,)) = lock.kernels, lock.kernels[0].variants
        files = tuple(f for f in variant.files if not f.path.startswith("metadata.json"))
        bad = replace(variant, files=files, signature="unsigned")
        lockfile.write(
            project / "kernels.lock", replace(lock, kernels=(replace(entry, commit=stripped, variants=(bad,)),))
        )
        synced = run_cli("sync", "--frozen", "--project", str(project), env=env)
        assert synced.returncode == 0, synced.stderr
    yield LockedProject(base / "hub", project, lockfile.read(project / "kernels.lock"), env)


LOAD_TWICE = f"""
import kernels
seen = []
for _ in range(2):
    try:
        kernels.get_kernel("{BARE}", version=1)
    except Exception as err:
        seen.append([type(err).__name__, str(err)])
report(seen=seen)
kernels.get_kernel("{BARE}", version=1)
"""


def test_every_loader_refuses_a_locked_build_without_metadata_in_one_line(bare: LockedProject) -> None:
    variant = bare.entry(BARE).variant_for(CPU_ENV)
    assert variant is not None and "metadata.json" not in {f.path for f in variant.files}
    child = bare.run(LOAD_TWICE)
    assert child.returncode == 1, child.stderr[-3000:]
    seen = child.report["seen"]
    assert len(seen) == 2 and seen[0] == seen[1], seen
    assert seen[0][0] == "ActivationError", seen
    assert f"{BARE} {CPU_VARIANT}" in seen[0][1] and "has no metadata.json" in seen[0][1], seen
    assert f"kernlock add {BARE}@" in seen[0][1], seen
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    assert child.error_line().startswith("kernlock: error:") and "has no metadata.json" in child.error_line()
