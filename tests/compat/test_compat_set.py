"""The compatibility subset: real clients end to end, in whichever matrix set is installed (tests/compat/matrix.toml).

Runs in the main suite (set D, .venv) and, through scripts/matrix.sh, in every other set's venv under .matrix/.
`kernlock add` -> `lock` -> `sync` against the local Hub; then, with that Hub **stopped**, a tiny Llama trains
through the locked flash-attn2 build, a locked layer is kernelized, `kernels.get_kernel(repo, version=N)` and a
kernel dependency load: each in a fresh process whose socket audit must stay empty, each proving its build by the
``KERNEL_IDENTITY`` at the locked commit. flash-attn2 is pinned at v2 while every transformers release asks for
another version (5.13: 1, 5.16: 3, 5.20+: 4; matrix.toml's ``flash-attn2-version``): the lock wins. A branch moved
on the Hub after locking still loads the locked commit. Where the installed transformers does not accept the
installed kernels (set E), `kernlock env` says so, kernels' own loads stay locked, and transformers' attention
path is off as transformers itself reports it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli import run_cli
from compat_matrix import MatrixSet, current, load
from envs import user_env_for
from processes import kernelize_silu_and_mul
from projects import CPU_ENV, LockedProject, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, Catalog, HubServer, create_kernel_repo, move_branch, read_identity

FA2 = "kernels-community/flash-attn2"
ACTIVATION = "kernels-community/activation"
PAGED = "kernels-community/paged-attention"  # kernel-depends on activation version 2 (at v2)
SPECS = [f"{FA2}@v2", f"{ACTIVATION}@v2", f"{PAGED}@v2"]


@pytest.fixture(scope="session")
def matrix_set() -> MatrixSet:
    found = current()
    if found is None:
        names = ", ".join(s.name for s in load().sets if not s.lock_only)
        pytest.skip(f"the installed transformers/kernels/huggingface_hub match no set of matrix.toml ({names})")
    return found


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def locked(catalog: Catalog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedProject]:
    """`kernlock add` -> `lock` -> `sync` against the session's catalog, served by a Hub stopped afterwards."""
    base = tmp_path_factory.mktemp("compat")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV])
    env = user_env_for(base)
    with HubServer(catalog.root) as server:
        online = {**env, **server.env()}
        where = ("--project", str(project))
        added = _ok(run_cli("add", *SPECS, "--no-sync", *where, env=online))
        assert 'added kernels-community/flash-attn2 = "v2"' in added.stdout, added.stdout
        written = (project / "kernels.lock").read_bytes()
        _ok(run_cli("lock", *where, env=online))
        assert (project / "kernels.lock").read_bytes() == written  # nothing changed: the same bytes
        _ok(run_cli("sync", *where, env=online))
        env["HF_ENDPOINT"] = server.url
    _ok(run_cli("lock", "--check", *where, env=env))  # asks no Hub
    _ok(run_cli("verify", *where, env=env))
    yield LockedProject(catalog.root, project, lockfile.read(project / "kernels.lock"), env)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package does not exist (kernels._internals before kernels 0.19)
        return False


def test_the_matrix_file_describes_this_set(matrix_set: MatrixSet) -> None:
    """The installed loader generation is the one matrix.toml declares (so its expectations apply here), whether
    probed by importing kernels (activation) or by reading its files (`kernlock env`)."""
    from kernlock.runtime import loaders

    has_resolver = any(_has_module(f"{p}.resolver") for p in ("kernels", "kernels._internals"))
    assert has_resolver is (matrix_set.loader != "kernels-0.15")
    assert loaders.probe() == loaders.Probe(generation=matrix_set.loader, kernels=importlib.metadata.version("kernels"))
    assert loaders.probe_files().generation == matrix_set.loader
    import kernels

    assert hasattr(kernels, "get_kernel_dep") is bool(matrix_set.kernel_dependencies)


@pytest.mark.subprocess
def test_lock_pins_the_branch_heads(locked: LockedProject, catalog: Catalog) -> None:
    for spec in SPECS:
        repo, rev = spec.split("@")
        assert locked.entry(repo).commit == catalog.repo(repo).head(rev), spec
        assert locked.entry(repo).variant_for(CPU_ENV).name == CPU_VARIANT


@pytest.mark.subprocess
def test_kernlock_env_reports_the_transformers_gate(locked: LockedProject, matrix_set: MatrixSet) -> None:
    result = _ok(run_cli("env", "--json", "--project", str(locked.project), env=locked.env))
    report = json.loads(result.stdout)
    assert report["environment"] == CPU_ENV
    assert {row["repo"]: row["variant"] for row in report["kernels"]} == {
        repo: CPU_VARIANT for repo in {s.split("@")[0] for s in SPECS}
    }
    gate = report["transformers_gate"]
    assert gate["ok"] is matrix_set.transformers_gate, gate
    assert report["loader"]["generation"] == matrix_set.loader, report["loader"]  # what activation probed
    if not matrix_set.transformers_gate:
        text = _ok(run_cli("env", "--project", str(locked.project), env=locked.env)).stdout
        assert "WARNING: transformers" in text and "silently OFF" in text
    # `show` (like add, lock and sync) says it in one line on stderr where the pair is off, and nothing where it is on
    shown = _ok(run_cli("show", "--project", str(locked.project), env=locked.env)).stderr
    warnings = [line for line in shown.splitlines() if line.startswith("warning: transformers")]
    assert len(warnings) == (0 if matrix_set.transformers_gate else 1), shown


@pytest.mark.slow
@pytest.mark.subprocess
def test_transformers_attention_path(locked: LockedProject, matrix_set: MatrixSet) -> None:
    """Gate on: a tiny Llama trains through the locked flash-attn2 v2 whatever version transformers asks for.
    Gate off (transformers rejects the installed kernels): the user sees transformers' own "incompatible kernels"
    error, nothing loads, nothing is asked; `kernlock env` names the pair (test above)."""
    child = locked.run(
        f"""
        import logging
        logging.basicConfig(level=logging.INFO)
        try:
            _model, result = train_llama("{FA2}")
        except Exception as err:
            result = {{"error": [type(err).__name__, str(err)]}}
        report(**result)
        """
    )
    if not matrix_set.transformers_gate:
        report = child.report
        assert report["loaded"] == {} and report["connects"] == []
        name, message = report["error"]
        assert name == "ImportError", (name, message)
        assert "`kernels` is either not installed or uses an incompatible version" in message, message
        return
    report = locked.assert_locked(child, FA2)
    assert "error" not in report, report["error"]
    assert report["attn"] == FA2 and report["q_grad"] > 0
    assert report["loaded"][FA2]["identity"]["version"] == 2
    assert report["loaded"][FA2]["calls"]["flash_attn_func"] == 2  # one call per layer: the kernel ran
    asked = matrix_set.flash_attn2_version
    assert f"asked for version={asked}" in child.stderr and "kernels.lock pins v2" in child.stderr, child.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.subprocess
def test_kernelize_a_locked_layer(locked: LockedProject) -> None:
    """``LayerRepository(version=1)`` of a repo locked at v2: kernelize swaps in the locked build's layer."""
    child = locked.run(
        kernelize_silu_and_mul(ACTIVATION)
        + "x = torch.randn(3, 8)\n"
        + "same = bool(torch.allclose(layer(x), nn.functional.silu(x[:, :4]) * x[:, 4:]))\n"
        + "report(same=same)\n"
    )
    report = locked.assert_locked(child, ACTIVATION)
    assert report["same"] is True
    assert report["loaded"][ACTIVATION]["calls"]["silu_and_mul"] == 1
    assert report["loaded"][ACTIVATION]["identity"]["version"] == 2  # asked version=1


@pytest.mark.slow
@pytest.mark.subprocess
def test_get_kernel_by_version_loads_the_locked_build(locked: LockedProject) -> None:
    child = locked.run(
        f"""
        import kernels
        asked = {{n: kernels.get_kernel("{FA2}", version=n).KERNEL_IDENTITY for n in (1, 4, 5)}}
        report(asked=asked)
        """
    )
    report = locked.assert_locked(child, FA2)
    assert all(identity == locked.identity(FA2) for identity in report["asked"].values())


@pytest.mark.slow
@pytest.mark.subprocess
def test_kernel_dependencies_load_locked(locked: LockedProject, matrix_set: MatrixSet) -> None:
    if not matrix_set.kernel_dependencies:
        pytest.skip(matrix_set.note)
    child = locked.run(
        f"""
        import kernels
        paged = kernels.get_kernel("{PAGED}", version=1)  # kernel-depends on {ACTIVATION} version 2
        report(dependency=paged.DEPENDENCY_IDENTITIES)
        """
    )
    report = locked.assert_locked(child, PAGED, ACTIVATION)
    assert report["dependency"] == {ACTIVATION: locked.identity(ACTIVATION)}


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_branch_moved_after_locking_still_loads_the_locked_commit(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
) -> None:
    """The Hub is up and the branch has a new head: the load still gives the locked build, asking the Hub nothing."""
    repo = f"kernels-community/compat-{uuid.uuid4().hex[:8]}"  # the catalog is shared: a repo of this test alone
    create_kernel_repo(catalog.root, repo, {"v1": [CPU_VARIANT]}, kind="activation")
    write_pyproject(project, f'"{repo}" = "v1"\n', environments=[CPU_ENV])
    where = ("--project", str(project))
    _ok(run_cli("lock", *where, env=user_env))
    _ok(run_cli("sync", *where, env=user_env))
    before = (project / "kernels.lock").read_bytes()
    commit = lockfile.read(project / "kernels.lock").entry_for(repo, CPU_ENV).commit
    moved = move_branch(catalog.root, repo, "v1")
    assert moved != commit
    _ok(run_cli("lock", *where, env=user_env))
    assert (project / "kernels.lock").read_bytes() == before  # the pin is kept

    hub.log.clear()
    child = LockedProject(catalog.root, project, lockfile.read(project / "kernels.lock"), user_env).run(
        f"""
        import kernels
        kernels.get_kernel("{repo}", version=1)
        report()
        """
    )
    assert child.returncode == 0, child.stderr[-4000:]
    loaded = child.report["loaded"][repo]
    assert loaded["commit"] == commit
    assert loaded["identity"] == read_identity(catalog.root, repo, commit, CPU_VARIANT)
    assert loaded["identity"] != read_identity(catalog.root, repo, moved, CPU_VARIANT)
    assert child.report["connects"] == [] and hub.log.count(contains=f"/{repo}") == 0
