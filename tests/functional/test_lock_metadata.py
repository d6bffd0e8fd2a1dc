"""`kernlock lock` and a build without metadata.json (older Hub builds): every kernels release kernlock knows (0.15
on) reads it to load a build, so such a build is refused for every environment, its loader declared or not, in one
line naming the build and the missing file; `kernlock add` without a revision skips that version for one whose build
has one. (What activation does with a lock that holds one anyway, under each loader: tests/compat/
test_builds_without_metadata.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from envs import user_env_for
from projects import CPU_ENV, strip_metadata

from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo

pytestmark = pytest.mark.subprocess

BARE = "kernels-community/bare"


def _pyproject(project: Path, environment: str, kernels: str) -> None:
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "demo"\nversion = "0.1.0"\n\n[tool.kernlock]\nenvironments = [{environment}]\n\n'
        f"[tool.kernlock.kernels]\n{kernels}"
    )


def test_lock_refuses_a_build_without_metadata_for_every_environment(tmp_path: Path) -> None:
    """v2 (its build without metadata.json) asked for: refused in one line naming the build and the file, for an
    undeclared loader and for kernels 0.17.2 alike (which cannot load it either); `kernlock add` without a revision
    skips v2 for v1, whose build has one."""
    repo = create_kernel_repo(tmp_path / "hub", BARE, {"v1": [CPU_VARIANT], "v2": [CPU_VARIANT]})
    strip_metadata(repo, "v2")
    project = tmp_path / "project"
    project.mkdir()
    with HubServer(tmp_path / "hub") as server:
        env = user_env_for(tmp_path, server)
        for environment in (f'"{CPU_ENV}"', f'{{ name = "{CPU_ENV}", kernels = "0.17.2" }}'):
            _pyproject(project, environment, f'"{BARE}" = "v2"\n')
            refused = run_cli("lock", "--project", str(project), env=env)
            assert_clean_error(refused, BARE, CPU_VARIANT, "has no metadata.json")
            assert not (project / "kernels.lock").exists()
        _pyproject(project, f'"{CPU_ENV}"', "")
        added = run_cli("add", BARE, "--no-sync", "--project", str(project), env=env)
        assert added.returncode == 0, added.stderr
        assert lockfile.read(project / "kernels.lock").kernels[0].requested == "v1"
