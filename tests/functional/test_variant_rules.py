"""The loader rules of kernels 0.17, 0.18 and 0.19 through the commands a user runs: kernels 0.19's build names
(dotted versions, the Python ABI) locked, synced and verified; the Python an environment runs on as an input of the
rule; a fleet whose nodes run different loaders; and the lock's `variant-rule` (an older one is stale, an unknown one
is refused with the upgrade to make)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from cli import run_cli
from projects import fresh_hub, own_repo

from kernlock import api
from kernlock.errors import ResolutionError
from kernlock.lock import file as lockfile
from kernlock.testing import Catalog, HubServer

pytestmark = pytest.mark.subprocess

CUDA = "torch213-cxx11-cu128-x86_64-linux"
ROCM = "torch213-cxx11-rocm72-x86_64-linux"
CPU = "torch213-cxx11-cpu-x86_64-linux"
LEGACY_CUDA = "torch213-cxx11-cu128-x86_64-linux"
NEW_CUDA = "torch-2.13-cuda-12.8-cpython-3.12-abi3-x86_64-linux"
NEW_CPU = "torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux"
ROCM_BUILDS = ["torch213-cxx11-rocm71-x86_64-linux", "torch213-cxx11-rocm72-x86_64-linux", "torch-rocm"]


@pytest.fixture(scope="module")
def mixed_repo(catalog: Catalog) -> str:
    """v1: a legacy CUDA build, a kernels 0.19 CUDA build for Python 3.12+, a 0.19 CPU build for 3.10+, noarch."""
    return own_repo(catalog, {"v1": [LEGACY_CUDA, NEW_CUDA, NEW_CPU, "torch-cuda", "torch-cpu"]})


def _declare(project: Path, environments: list, repo: str) -> None:
    rendered = [json.dumps(e) if isinstance(e, str) else "{ " + _pairs(e) + " }" for e in environments]
    text = "[tool.kernlock]\nenvironments = [\n" + "".join(f"  {r},\n" for r in rendered) + "]\n"
    (project / "pyproject.toml").write_text(f'{text}\n[tool.kernlock.kernels]\n"{repo}" = "v1"\n')


def _pairs(table: dict) -> str:
    return ", ".join(f"{key} = {json.dumps(value)}" for key, value in table.items())


def _chosen(project: Path, hub: HubServer, repo: str, environments: list) -> dict[str, str]:
    _declare(project, environments, repo)
    (entry,) = api.lock(project, hub=fresh_hub(hub)).lock.kernels
    return {env: entry.variant_for(env).name for env in entry.environments}


def test_the_python_an_environment_runs_picks_among_kernels_0_19_builds(
    mixed_repo: str, hub: HubServer, user_env: dict, project: Path
):
    """kernels 0.19 prefers the build for the newest Python the node runs (cpython-3.12 on 3.12, the legacy
    cpython-3.9 build on 3.11), never abi3 on a free-threaded Python; a node on kernels 0.17 cannot read the new
    names; a CPU node's only arch build needs Python 3.10+, which every Python torch 2.13 runs on has."""
    cu129, cxx98 = "torch213-cxx11-cu129-x86_64-linux", "torch213-cxx98-cu128-x86_64-linux"
    fleet = [{"name": CUDA, "python": "3.12"}, {"name": cu129, "python": "3.11"}, {"name": cxx98, "python": "3.13t"}]
    chosen = _chosen(project, hub, mixed_repo, [*fleet, CPU])
    assert chosen == {CUDA: NEW_CUDA, cu129: LEGACY_CUDA, cxx98: "torch-cuda", CPU: NEW_CPU}
    older = {"name": CUDA, "python": "3.13", "kernels": "0.17.2"}  # Python 3.13, but a loader that reads no new name
    assert _chosen(project, hub, mixed_repo, [older]) == {CUDA: LEGACY_CUDA}


def test_an_environment_whose_build_depends_on_its_python_must_declare_it(
    mixed_repo: str, hub: HubServer, user_env: dict, project: Path
):
    _declare(project, [CUDA], mixed_repo)
    with pytest.raises(ResolutionError) as err:
        api.lock(project, hub=fresh_hub(hub))
    message = str(err.value)
    assert f"environment {CUDA} does not declare its Python" in message
    assert f"3.10 loads {LEGACY_CUDA}" in message and f"3.14 loads {NEW_CUDA}" in message
    assert f'{{ name = "{CUDA}", python = "3.12" }}' in message
    result = run_cli("lock", "--project", str(project), env=user_env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "declare it in [tool.kernlock] environments" in result.stderr
    assert not (project / "kernels.lock").exists()


def test_a_kernels_0_19_build_syncs_and_verifies(mixed_repo: str, hub: HubServer, user_env: dict, project: Path):
    """A build folder named in kernels 0.19's form (dots in it) is downloaded, verified and checked again."""
    _declare(project, [{"name": CPU, "python": "3.11"}], mixed_repo)
    assert run_cli("lock", "--project", str(project), env=user_env).returncode == 0
    synced = run_cli("sync", "--project", str(project), env=user_env)
    assert synced.returncode == 0, synced.stderr
    folders = list(Path(user_env["HF_HUB_CACHE"]).glob(f"kernels--*/snapshots/*/build/{NEW_CPU}"))
    assert len(folders) == 1 and (folders[0] / "metadata.json").is_file()
    verified = run_cli("verify", "--project", str(project), env=user_env)
    assert verified.returncode == 0 and "all match kernels.lock" in verified.stdout, verified.stdout + verified.stderr
    again = run_cli("sync", "--project", str(project), env=user_env)
    assert again.returncode == 0 and "0 downloaded" in again.stdout + again.stderr, again.stdout + again.stderr


def test_a_fleet_on_three_loaders_gets_each_nodes_own_rocm_choice(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    """Each node's own loader decides: kernels 0.17 loads ROCm builds of its exact release only, 0.18 (declared)
    and 0.19 (undeclared: the newest rule) also those of an older minor release, the highest first."""
    repo = own_repo(catalog, {"v1": ROCM_BUILDS, "v2": [ROCM_BUILDS[0], "torch-rocm"]})
    rocm73, rocm74 = "torch213-cxx11-rocm73-x86_64-linux", "torch213-cxx11-rocm74-x86_64-linux"
    fleet = [{"name": ROCM, "kernels": "0.17.2"}, {"name": rocm73, "kernels": "0.18.3"}, rocm74]
    assert _chosen(project, hub, repo, fleet) == {ROCM: ROCM_BUILDS[1], rocm73: ROCM_BUILDS[1], rocm74: ROCM_BUILDS[1]}
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text().replace('"v1"', '"v2"'))
    (entry,) = api.lock(project, hub=fresh_hub(hub)).lock.kernels
    chosen = {env: entry.variant_for(env).name for env in entry.environments}
    assert chosen == {ROCM: "torch-rocm", rocm73: ROCM_BUILDS[0], rocm74: ROCM_BUILDS[0]}


def test_a_lock_of_an_older_rule_loads_and_is_stale_one_of_an_unknown_rule_is_refused(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    _declare(project, [CPU], own_repo(catalog, {"v1": [CPU, "torch-cpu"]}))  # legacy names: any rule reads them
    assert run_cli("lock", "--project", str(project), env=user_env).returncode == 0
    path = project / "kernels.lock"
    lock = lockfile.read(path)
    assert lock.variant_rule == "kernels-0.19"

    lockfile.write(path, dataclasses.replace(lock, variant_rule="kernels-0.17"))  # as kernlock 0.1 wrote it
    check = run_cli("lock", "--check", "--project", str(project), env=user_env)
    assert check.returncode == 1 and "kernels-0.17 loader rule; this kernlock follows kernels-0.19" in check.stderr
    frozen = run_cli("sync", "--frozen", "--project", str(project), env=user_env)  # the lock as it is
    assert frozen.returncode == 0 and lockfile.read(path).variant_rule == "kernels-0.17", frozen.stderr
    assert run_cli("sync", "--project", str(project), env=user_env).returncode == 0  # a stale lock is locked again
    assert lockfile.read(path).variant_rule == "kernels-0.19"

    lockfile.write(path, dataclasses.replace(lock, variant_rule="kernels-0.20"))  # from a newer kernlock
    for command in ("sync", "verify"):
        result = run_cli(command, "--project", str(project), env=user_env)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "kernels-0.20 loader rule, which this kernlock does not know" in result.stderr
        assert "upgrade kernlock (`pip install -U kernlock`)" in result.stderr
