"""kernlock on every Python it claims: the matrix sets py310, py312 and py313 (tests/compat/matrix.toml).

Those sets hold kernlock, kernels, huggingface_hub and gunicorn without torch (the only torch wheel here is 3.11's
CPU build), so they run every command that needs no torch, as a user types it, against the local Hub: `add` and
`lock` for declared environments, `sync --all-environments`, `show`, `verify`, `env` (it reports the versions and the
loader, and says why this machine's environment is unknown), `outdated`, `bundle` and `sync --from` with no network,
`serve` (gunicorn) with a node syncing from it, `run`, and a damaged lock refused in one message. `import
kernlock.activate` works too; kernels itself answers `has_kernel` without torch, and under activation that load is
refused, naming torch, since every environment of a lock is a torch machine. Skipped outside those sets (3.11 runs
the whole suite).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from compat_matrix import current
from envs import user_env_for
from projects import CPU_ENV, write_pyproject

from kernlock.testing import Catalog, HubServer
from kernlock.testing.mirror_process import MirrorProcess, client_env, free_port

_SET = current()
pytestmark = [
    pytest.mark.skipif(
        _SET is None or _SET.python is None, reason="runs in the matrix sets of other Pythons (py310, py312, py313)"
    ),
    pytest.mark.subprocess,
]

CUDA_ENV = "torch212-cxx11-cu128-x86_64-linux"
ACTIVATION = "kernels-community/activation"
FA2 = "kernels-community/flash-attn2"


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    project: Path
    env: dict[str, str]  # the user's environment, HF_ENDPOINT pointing at the (running) Hub
    offline: dict[str, str]  # the same with HF_ENDPOINT pointing where nothing listens

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``kernlock COMMAND --project PROJECT ARGS...`` (before ``run``'s ``--``)."""
        return run_cli(args[0], "--project", str(self.project), *args[1:], env=self.env if env is None else env)


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def site(catalog: Catalog, hub_server: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """`add` -> `lock` -> `sync --all-environments` for two declared environments against the session's Hub."""
    base = tmp_path_factory.mktemp("pythons")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV, CUDA_ENV])
    env = user_env_for(base, hub_server)
    site = Site(project=project, env=env, offline={**env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"})
    added = _ok(site.cli("add", f"{ACTIVATION}@v2", f"{FA2}@v4", "--no-sync"))
    assert f'added {ACTIVATION} = "v2"' in added.stdout
    written = (project / "kernels.lock").read_bytes()
    _ok(site.cli("lock"))
    assert (project / "kernels.lock").read_bytes() == written
    synced = _ok(site.cli("sync", "--all-environments"))
    assert "synced 4 variants of 2 kernels" in synced.stdout, synced.stdout
    yield site


def test_this_is_the_sets_python_without_torch() -> None:
    import importlib.util

    assert _SET is not None and f"{sys.version_info.major}.{sys.version_info.minor}" == _SET.python
    assert importlib.util.find_spec("torch") is None


def test_local_commands_with_the_hub_gone(site: Site) -> None:
    """`lock --check`, `show`, `verify` and a no-op sync ask no Hub."""
    assert "up to date" in _ok(site.cli("lock", "--check", env=site.offline)).stdout
    shown = _ok(site.cli("show", env=site.offline)).stdout
    assert ACTIVATION in shown and FA2 in shown
    assert "all match kernels.lock" in _ok(site.cli("verify", "--all-environments", env=site.offline)).stdout
    again = _ok(site.cli("sync", "--all-environments", env=site.offline)).stdout
    assert "(0 downloaded, 4 already verified)" in again, again
    offline = _ok(site.cli("sync", "--all-environments", "--offline", env=site.offline)).stdout
    assert "synced 4 variants of 2 kernels" in offline and "(checked offline)" in offline, offline


def test_env_without_torch_reports_what_it_can_and_says_why(site: Site) -> None:
    report = json.loads(_ok(site.cli("env", "--json", env=site.offline)).stdout)
    assert report["environment"] is None and "torch is not installed" in report["environment_error"]
    assert report["versions"]["torch"] is None and report["versions"]["kernels"] == "0.17.2"
    assert report["loader"]["generation"] == (_SET.loader if _SET else None)
    assert report["load_paths"] and all(row["covered"] for row in report["load_paths"])
    text = _ok(site.cli("env", env=site.offline)).stdout
    assert text.startswith("environment: unknown (cannot detect this environment: torch is not installed")
    assert "torch: not installed" in text and "loader: kernels 0.17.2 (kernels-0.17 generation)" in text


def test_outdated(site: Site) -> None:
    assert "would change nothing" in _ok(site.cli("outdated")).stdout


def test_environments_names_the_strings_to_declare_without_torch(site: Site) -> None:
    """A machine without torch has no environment of its own; `environments` reads the strings off the kernels."""
    shown = _ok(site.cli("environments")).stdout
    assert f"{ACTIVATION} v2" in shown and f"{FA2} v4" in shown
    assert f"  {CPU_ENV}" in shown and "torch 2.13, CPU, x86_64 Linux" in shown, shown


def test_bundle_and_sync_from_it_with_no_network(site: Site, tmp_path: Path) -> None:
    bundle = tmp_path / "site.tar"
    assert "bundled 4 variants" in _ok(site.cli("bundle", "-o", str(bundle), env=site.offline)).stdout
    node = {**site.offline, "HF_HUB_CACHE": str(tmp_path / "node-cache"), "HF_HUB_OFFLINE": "1"}
    installed = _ok(site.cli("sync", "--from", str(bundle), "--all-environments", env=node)).stdout
    assert "synced 4 variants" in installed
    assert "all match kernels.lock" in _ok(site.cli("verify", "--all-environments", env=node)).stdout


@pytest.mark.subprocess
def test_serve_with_gunicorn_and_a_node_syncs_from_it(site: Site, tmp_path: Path) -> None:
    args = ["--cache", site.env["HF_HUB_CACHE"], "--project", str(site.project)]
    with MirrorProcess(args, site.offline, tmp_path / "access.log") as server:
        node = client_env(site.offline, server.url, tmp_path / "node-cache")
        _ok(site.cli("sync", "--all-environments", env=node))
        assert "all match kernels.lock" in _ok(site.cli("verify", "--all-environments", env=node)).stdout
    assert "serving 2 kernels" in server.output()


@pytest.mark.binds  # `kernlock run` by this set's interpreter binds its environment while it runs
def test_run_activates_the_lock_in_the_child(site: Site) -> None:
    code = "from kernlock.runtime import state as activated; print(activated.settings().lockfile)"
    done = _ok(site.cli("run", "--", sys.executable, "-c", code, env=site.offline))
    assert done.stdout.strip() == str(site.project / "kernels.lock")


@pytest.mark.subprocess
def test_import_kernlock_activate_and_a_load_without_torch(site: Site) -> None:
    """kernels answers `has_kernel` without torch; under activation kernlock refuses that load, naming torch (a lock
    names torch machines only), and `import kernlock.activate` itself works."""
    plain = "import kernels; print(kernels.has_kernel('kernels-community/activation', version=2))"
    assert _ok(subprocess.run([sys.executable, "-c", plain], env=site.env, capture_output=True, text=True)).stdout == (
        "True\n"
    )
    code = (
        "import kernlock.activate, kernels\n"
        "from kernlock.runtime import state as activated\n"
        "print(activated.settings().mode)\n"
        "try:\n"
        "    kernels.has_kernel('kernels-community/activation', version=2)\n"
        "except ImportError as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    done = _ok(
        subprocess.run([sys.executable, "-c", code], env=site.env, cwd=site.project, capture_output=True, text=True)
    )
    first, second = done.stdout.splitlines()
    assert first == "strict"
    assert second.startswith("ActivationError kernlock cannot tell which locked build") and "torch" in second


@pytest.mark.subprocess
def test_a_damaged_lock_is_refused(site: Site, tmp_path: Path) -> None:
    damaged = tmp_path / "project"
    damaged.mkdir()
    (damaged / "pyproject.toml").write_bytes((site.project / "pyproject.toml").read_bytes())
    text = (site.project / "kernels.lock").read_text()
    digest = text.split('hash = "git-sha1:', 1)[1][:40]
    (damaged / "kernels.lock").write_text(text.replace(digest, "0" * 40, 1))
    for args in (["lock", "--check"], ["verify", "--all-environments"], ["sync", "--all-environments", "--frozen"]):
        done = run_cli(*args, "--project", str(damaged), env=site.offline)
        assert_clean_error(done, "kernels.lock")
