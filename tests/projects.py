"""A test's project and kernels: its pyproject.toml, a repository of its own, a locked and synced project to run
children in, the receipts of its synced builds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli import run_cli
from envs import user_env_for
from processes import CHILD_HELPERS, CHILD_PRELUDE, Child

from kernlock.hub.client import Hub
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock, LockedKernel
from kernlock.testing import CPU_VARIANT, Catalog, HubServer, KernelRepo, create_kernel_repo, read_identity

CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"


def strip_metadata(repo: KernelRepo, branch: str) -> str:
    """Commit on ``branch`` the removal of its CPU build's metadata.json (and its signature), as older Hub builds
    are: no kernels release loads it. The new head sha."""
    folder = f"build/{CPU_VARIANT}"
    return repo.delete_files(branch, [f"{folder}/metadata.json", f"{folder}/metadata.json.sigstore"])


def locked_offline(root: Path, project: Path, env: dict[str, str]) -> LockedProject:
    """``project`` locked and synced with ``env`` from a Hub serving ``root``, which is stopped on return: the
    project's environment keeps the endpoint of a Hub that is no longer there."""
    with HubServer(root) as server:
        for command in ("lock", "sync"):
            result = run_cli(command, "--project", str(project), env={**env, **server.env()})
            assert result.returncode == 0, result.stderr
        env = {**env, **server.env()}
    return LockedProject(root, project, lockfile.read(project / "kernels.lock"), env)


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


def fresh_hub(server: HubServer) -> Hub:
    """A new Hub client (empty caches) for the test server, retrying quickly."""
    return Hub(endpoint=server.url, backoff=0.01)


def own_repo(catalog: Catalog, branches: dict[str, list[str]], **kwargs: object) -> str:
    """A repo of this test alone (the catalog is shared and read-only)."""
    repo_id = f"kernels-community/t-{uuid.uuid4().hex[:8]}"
    create_kernel_repo(catalog.root, repo_id, branches, **kwargs)
    return repo_id


@dataclass
class LockedProject:
    """A locked and synced project, its Hub's repositories, and a user's environment to run children in."""

    root: Path  # the Hub's repositories
    project: Path
    lock: Lock
    env: dict[str, str]  # a user's environment: synced cache, HF_ENDPOINT of the (usually stopped) Hub
    environment: str = CPU_ENV

    def entry(self, repo: str) -> LockedKernel:
        entry = self.lock.entry_for(repo, self.environment)
        assert entry is not None, repo
        return entry

    def identity(self, repo: str) -> dict[str, Any]:
        """KERNEL_IDENTITY of the locked build, read from git at the locked commit."""
        entry = self.entry(repo)
        variant = entry.variant_for(self.environment)
        assert variant is not None
        return read_identity(self.root, repo, entry.commit, variant.name)

    def run(
        self,
        body: str,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        activate: bool = True,
        args: list[str] | None = None,
    ) -> Child:
        """Run CHILD_PRELUDE, ``import kernlock.activate`` (unless not ``activate``), CHILD_HELPERS and ``body``."""
        activation = "import kernlock.activate\n" if activate else ""
        code = CHILD_PRELUDE + activation + CHILD_HELPERS + textwrap.dedent(body)
        return self.run_argv([sys.executable, "-c", code, *(args or [])], env=env, cwd=cwd)

    def run_argv(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Child:
        result = subprocess.run(
            argv, env={**self.env, **(env or {})}, cwd=cwd or self.project, capture_output=True, text=True, timeout=300
        )
        return Child(result.returncode, result.stdout, result.stderr)

    def assert_locked(self, child: Child, *repos: str) -> dict[str, Any]:
        """Each of ``repos`` was loaded at its locked commit, as the locked build; no socket was connected."""
        assert child.returncode == 0, child.stderr[-4000:]
        report = child.report
        for repo in repos:
            assert repo in report["loaded"], (repo, list(report["loaded"]), child.stderr[-2000:])
            assert report["loaded"][repo]["commit"] == self.entry(repo).commit
            assert report["loaded"][repo]["identity"] == self.identity(repo)
        assert report["connects"] == []
        return report


def receipt_file(entry: LockedKernel, variant: Any, cache: Path | None = None) -> Path:
    """Where the receipt of ``variant`` is kept (kernlock's cache in the tests is the user's alone)."""
    from kernlock.sync import cache as caches

    path = caches.receipt_path(entry, variant, cache)
    assert path is not None, "kernlock's cache is not private"
    return path


def has_receipt(entry: LockedKernel, variant: Any, cache: Path | None = None) -> bool:
    """Whether a receipt vouches for ``variant`` (none before a sync, none after a failed one)."""
    from kernlock.sync import cache as caches

    path = caches.receipt_path(entry, variant, cache)
    return path is not None and path.exists()


# -- a small locked project for cluster tests (launchers, hooks, spawned children) ---------------------------------

TINY_ATTENTION = "kernels-community/flash-attn2"
TINY_ACTIVATION = "kernels-community/activation"


def tiny_locked_project(base: Path) -> LockedProject:
    """Two kernels (attention v2, activation v1; CPU builds only) locked and synced from a local Hub, which is
    stopped on return: ``env`` still points HF_ENDPOINT at it, so any request would fail."""
    from kernlock.testing import CPU_VARIANT

    root = base / "hub"
    create_kernel_repo(root, TINY_ATTENTION, {"v2": [CPU_VARIANT], "v4": [CPU_VARIANT]}, kind="attention")
    create_kernel_repo(root, TINY_ACTIVATION, {"v1": [CPU_VARIANT]}, kind="activation")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{TINY_ATTENTION}" = "v2"\n"{TINY_ACTIVATION}" = "v1"\n', environments=[CPU_ENV])
    return locked_offline(root, project, user_env_for(base))
