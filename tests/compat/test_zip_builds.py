"""Builds only kernels 0.19 reads, in whichever matrix set is installed: the ZIP build layout (the package as one
``{id}.zip`` beside metadata.json, ``"build-layout": "zip"``) and build names in kernels 0.19's form
(``torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux``).

* `kernlock lock`, `sync` and `verify` take a ZIP build like any other, and its synced files match its signed digest
  as kernels' own ``Digest.hash_variant`` computes it.
* kernels 0.19 loads both under activation with the Hub stopped: ``get_kernel``, transformers' attention path and
  `kernlock check` through the ZIP build.
* An older loader cannot: activation stops every try with the same one line naming the fix, no traceback; an
  environment that declares such a loader (``kernels = "0.17.2"``) is refused the ZIP build at lock time, and the
  lock picks builds that loader reads (which every loader then loads).
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from envs import user_env_for
from packaging.version import Version
from projects import CPU_ENV, LockedProject, locked_offline

from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo

pytestmark = pytest.mark.subprocess

ZIPPED = "kernels-community/zipped"  # v1: a files-layout CPU build; v2: a ZIP build
ZIPPED_ATTENTION = "kernels-community/zipped-attention"  # v1: a ZIP build of an attention kernel
RENAMED = "kernels-community/renamed"  # v1: a CPU build named in kernels 0.19's form, and torch-cpu
NEW_CPU = "torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux"
INSTALLED = importlib.metadata.version("kernels")
READS_0_19 = Version(INSTALLED).release[:2] >= (0, 19)
only_0_19 = pytest.mark.skipif(not READS_0_19, reason=f"kernels {INSTALLED} cannot load these builds")
before_0_19 = pytest.mark.skipif(READS_0_19, reason=f"kernels {INSTALLED} loads these builds")


def _pyproject(project: Path, environment: str, kernels: str) -> None:
    text = f'[project]\nname = "demo"\nversion = "0.1.0"\n\n[tool.kernlock]\nenvironments = [{environment}]\n'
    (project / "pyproject.toml").write_text(text + f"\n[tool.kernlock.kernels]\n{kernels}")


@pytest.fixture(scope="module")
def zipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedProject]:
    """The three repos locked for this machine (its Python declared) and synced; the Hub is stopped on return."""
    base = tmp_path_factory.mktemp("zipped")
    root = base / "hub"
    create_kernel_repo(root, ZIPPED, {"v1": [CPU_VARIANT], "v2": [CPU_VARIANT]}, zip_builds={"v2": [CPU_VARIANT]})
    create_kernel_repo(
        root, ZIPPED_ATTENTION, {"v1": [CPU_VARIANT]}, kind="attention", zip_builds={"v1": [CPU_VARIANT]}
    )
    create_kernel_repo(root, RENAMED, {"v1": [NEW_CPU, "torch-cpu"]})
    project = base / "project"
    project.mkdir()
    requirements = f'"{ZIPPED}" = "v2"\n"{ZIPPED_ATTENTION}" = "v1"\n"{RENAMED}" = "v1"\n'
    _pyproject(project, f'{{ name = "{CPU_ENV}", python = "3.11" }}', requirements)
    yield locked_offline(root, project, user_env_for(base))


def _synced_folder(locked: LockedProject, repo: str) -> Path:
    entry = locked.entry(repo)
    variant = entry.variant_for(CPU_ENV)
    assert variant is not None
    cache = Path(locked.env["HF_HUB_CACHE"])
    (found,) = cache.glob(f"*/snapshots/{entry.commit}/build/{variant.name}")
    return found


def test_a_zip_build_locks_syncs_and_verifies(zipped: LockedProject) -> None:
    folder = _synced_folder(zipped, ZIPPED)
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["build-layout"] == "zip"
    archive = f"{metadata['id']}.zip"
    variant = zipped.entry(ZIPPED).variant_for(CPU_ENV)
    assert variant is not None and variant.name == CPU_VARIANT
    assert {f.path for f in variant.files} == {archive, "metadata.json", "metadata.json.sigstore"}
    assert sorted(p.name for p in folder.iterdir()) == sorted([archive, "metadata.json", "metadata.json.sigstore"])
    assert set(metadata["digest"]["files"]) == {archive}
    result = run_cli("verify", "--project", str(zipped.project), env=zipped.env)
    assert result.returncode == 0, result.stderr
    assert "3 variants" in result.stdout and "all match kernels.lock" in result.stdout, result.stdout
    try:  # kernels' own digest of the synced folder (0.17 on), as its load-time check computes it from 0.18 on
        from kernels._rust import Digest, DigestAlgorithm, Metadata
    except ImportError:
        return
    parsed = Metadata.read_from_file(folder / "metadata.json")
    parsed.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, folder))


@only_0_19
def test_kernels_0_19_loads_the_locked_zip_build_offline(zipped: LockedProject) -> None:
    child = zipped.run(
        f"""
        import kernels, torch
        module = kernels.get_kernel("{ZIPPED}", version=2)
        x = torch.randn(4, 8)
        module.silu_and_mul(torch.empty(4, 4), x)
        layers = module.layers  # a submodule, imported from the archive too
        report(file=module.__file__, layer=layers.SiluAndMul.__name__)
        """
    )
    report = zipped.assert_locked(child, ZIPPED)  # the locked commit and build; no socket connected
    assert report["file"].endswith(".zip/__init__.py"), report["file"]
    assert report["layer"] == "SiluAndMul" and report["loaded"][ZIPPED]["calls"]["silu_and_mul"] == 1
    assert report["loaded"][ZIPPED]["identity"]["version"] == 2


@only_0_19
@pytest.mark.slow
def test_transformers_attention_through_a_zip_build(zipped: LockedProject) -> None:
    child = zipped.run(f"model, result = train_llama({ZIPPED_ATTENTION!r})\nreport(**result)")
    report = zipped.assert_locked(child, ZIPPED_ATTENTION)
    assert report["attn"] == ZIPPED_ATTENTION
    assert report["q_grad"] > 0 and report["loaded"][ZIPPED_ATTENTION]["calls"]["flash_attn_func"] == 2


@pytest.mark.slow
def test_kernlock_check_runs_a_zip_build_where_the_loader_reads_it(zipped: LockedProject) -> None:
    result = run_cli("check", "--kernel", ZIPPED, "--json", "--project", str(zipped.project), env=zipped.env)
    if not READS_0_19:  # the load it checks is refused, in one line
        assert_clean_error(result, f"{ZIPPED} {CPU_VARIANT}", "is a ZIP build", "kernels to 0.19+")
        return
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert rows and all(row["kernel"] == ZIPPED and row["result"] == "pass" for row in rows), rows


@only_0_19
def test_kernels_0_19_loads_a_build_named_in_its_form(zipped: LockedProject) -> None:
    child = zipped.run(f'import kernels\nkernels.get_kernel("{RENAMED}", version=1)\nreport()')
    report = zipped.assert_locked(child, RENAMED)
    assert report["loaded"][RENAMED]["identity"]["variant"] == NEW_CPU


REFUSED_EVERY_TIME = """
import kernels
seen = []
for _ in range(2):
    try:
        kernels.get_kernel("{repo}", version={version})
    except Exception as err:
        seen.append([type(err).__name__, str(err)])
report(seen=seen)
kernels.get_kernel("{repo}", version={version})
"""


def _refused(locked: LockedProject, repo: str, version: int) -> str:
    """The one line activation stops a load of ``repo`` with, the same at every try; nothing loaded, no request."""
    child = locked.run(REFUSED_EVERY_TIME.format(repo=repo, version=version))
    report = child.report
    (name, message), again = report["seen"]
    assert name == "ActivationError" and again == [name, message], report
    assert report["loaded"] == {} and report["connects"] == []
    assert child.returncode == 1 and "Traceback" not in child.stderr, child.stderr[-3000:]
    assert child.error_line() == f"kernlock: error: {message}"
    assert f"kernels {INSTALLED}" in message and "kernels to 0.19+" in message, message
    assert f'{{ name = "{CPU_ENV}", kernels = "{INSTALLED}" }}' in message and "`kernlock lock`" in message
    return message


@before_0_19
def test_an_older_loader_refuses_a_zip_build_in_one_line_every_time(zipped: LockedProject) -> None:
    message = _refused(zipped, ZIPPED, 2)
    commit = zipped.entry(ZIPPED).commit[:12]
    assert message.startswith(f"{ZIPPED} {CPU_VARIANT} (commit {commit}) is a ZIP build"), message


@before_0_19
def test_an_older_loader_refuses_a_build_named_in_kernels_0_19s_form(zipped: LockedProject) -> None:
    message = _refused(zipped, RENAMED, 1)
    assert message.startswith(f"{RENAMED} {NEW_CPU} (commit "), message
    assert "in kernels 0.19's form" in message


def test_declaring_an_older_loader_locks_builds_it_reads(zipped: LockedProject, tmp_path: Path) -> None:
    """``kernels = "0.17.2"``: the ZIP build of v2 is refused at lock time (v1 named instead), `add` takes v1, and
    the renamed repo's torch-cpu build is locked; both load under the installed kernels, whatever its release."""
    project = tmp_path / "project"
    project.mkdir()
    declared = f'{{ name = "{CPU_ENV}", kernels = "0.17.2" }}'
    with HubServer(zipped.root) as server:
        env = user_env_for(tmp_path, server)
        _pyproject(project, declared, f'"{ZIPPED}" = "v2"\n"{RENAMED}" = "v1"\n')
        refused = run_cli("lock", "--project", str(project), env=env)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        reason = f"declares kernels 0.17.2, but its build {CPU_VARIANT} is a ZIP build, which kernels 0.19+ loads"
        assert reason in refused.stderr and f"kernlock add {ZIPPED}@v1" in refused.stderr, refused.stderr
        _pyproject(project, declared, f'"{RENAMED}" = "v1"\n')
        for command in (("add", ZIPPED), ("sync",)):
            result = run_cli(*command, "--project", str(project), env=env)
            assert result.returncode == 0, result.stderr
    lock = lockfile.read(project / "kernels.lock")
    locked = LockedProject(zipped.root, project, lock, env)
    assert locked.entry(ZIPPED).requested == "v1" and locked.entry(ZIPPED).commit != zipped.entry(ZIPPED).commit
    renamed = locked.entry(RENAMED).variant_for(CPU_ENV)
    assert renamed is not None and renamed.name == "torch-cpu"
    child = locked.run(
        f"""
        import kernels
        kernels.get_kernel("{ZIPPED}", version=1)
        kernels.get_kernel("{RENAMED}", version=1)
        report()
        """
    )
    locked.assert_locked(child, ZIPPED, RENAMED)
