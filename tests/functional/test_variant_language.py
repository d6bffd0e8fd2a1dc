"""The lock speaks the real Hub's whole build-variant language: every row of the real matrix (HUB_MATRIX), the
optional facts of an environment, and lock-time refusals of builds the loader would refuse at load time."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kernels import backends as kernels_backends
from kernels import variants as kernels_variants
from packaging.version import Version
from projects import fresh_hub, own_repo

from kernlock import api
from kernlock.cli.app import main
from kernlock.environments.environment import Environment
from kernlock.errors import ProjectError, ResolutionError
from kernlock.lock import file as lockfile
from kernlock.lock import model as lockmodel
from kernlock.testing import HUB_MATRIX, Catalog, HubServer, hub_variants

SM90 = "torch213-cxx11-cu130-x86_64-linux"
#: Machines of the real matrix and the build each loads from a repo that publishes every form of HUB_MATRIX.
MATRIX_ROWS = {
    "torch213-cxx11-cu132-x86_64-linux": "torch-stable-abi29-cu130-x86_64-linux",  # stable ABI, same CUDA major
    "torch213-cxx11-cu132-aarch64-linux": "torch213-cxx11-cu132-aarch64-linux",  # cu132 (torch 2.12/2.13)
    "torch212-cxx11-cu129-x86_64-linux": "torch-stable-abi210-cu126-x86_64-linux",  # stable ABI first
    "torch213-cxx11-rocm72-x86_64-linux": "torch-stable-abi210-rocm71-x86_64-linux",  # ROCm 7.1 on 7.2 (0.18+)
    "torch211-cxx11-rocm71-x86_64-linux": "torch-stable-abi210-rocm71-x86_64-linux",
    "torch213-cxx11-xpu20260-x86_64-linux": "torch213-cxx11-xpu20260-x86_64-linux",
    "torch212-cxx11-xpu20253-x86_64-linux": "torch-stable-abi210-xpu20253-x86_64-linux",
    "torch210-cxx11-cu128-x86_64-linux": "torch-stable-abi210-cu126-x86_64-linux",
    "torch212-cpu-aarch64-darwin": "torch-stable-abi210-cpu-aarch64-darwin",
    "torch213-cu130-aarch64-windows": "torch213-cu130-aarch64-windows",  # Windows ARM64
    "torch213-cu130-x86_64-windows": "torch213-cu130-x86_64-windows",
    "torch213-cxx11-cann80-x86_64-linux": "torch-universal",  # no CANN build: 0.19 dropped the torch-npu alias
    "torch213-cxx11-neuron-x86_64-linux": "torch-neuron",
    "torch213-cxx11-tpu-x86_64-linux": "torch-tpu",
    "torch29-cxx11-cu128-x86_64-linux": "torch-cuda",  # no arch build, no tvm-ffi declared
}


@pytest.fixture(scope="module")
def matrix_repo(catalog: Catalog) -> str:
    """Every variant of HUB_MATRIX on v1."""
    return own_repo(catalog, {"v1": hub_variants()})


@pytest.fixture(scope="module")
def sm90_repo(catalog: Catalog) -> str:
    """v1 and v2 with CUDA 13.0 and CPU builds for torch 2.13; v2's CUDA builds lack sm90 (8.0, 8.6, 10.0)."""
    builds = [SM90, "torch213-cxx11-cpu-x86_64-linux"]
    return own_repo(catalog, {"v1": builds, "v2": builds}, cuda_archs={"v2": ["8.0", "8.6", "10.0"]})


def _lock(project: Path, hub: HubServer, repo: str, environments: list, rev: str | None = "v1") -> lockmodel.Lock:
    _declare(project, environments, f'"{repo}" = "{rev}"\n' if rev else "")
    return api.lock(project, hub=fresh_hub(hub)).lock


def _declare(project: Path, environments: list, kernels: str) -> None:
    rendered = [json.dumps(e) if isinstance(e, str) else _inline(e) for e in environments]
    text = "[tool.kernlock]\nenvironments = [\n" + "".join(f"  {r},\n" for r in rendered) + "]\n"
    (project / "pyproject.toml").write_text(f"{text}\n[tool.kernlock.kernels]\n{kernels}")


def _inline(table: dict) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + " }"


def _loader_choice(env: Environment, names: list[str]) -> str | None:
    """The installed loader's own pick for the machine ``env`` describes (its facts included)."""
    chosen, _ = kernels_variants._resolve_variant_for_system(
        variants=[kernels_variants.parse_variant(n) for n in sorted(names)],
        selected_backend=kernels_backends.parse_backend(env.backend),
        cpu=env.cpu,
        os=env.os,
        torch_version=env.torch,
        torch_cxx11_abi={"cxx11": True, "cxx98": False}.get(env.name.split("-")[1]),
        tvm_ffi_version=env.extras.tvm_ffi_minor,
        macos_version=env.extras.macos or (Version("26.0") if env.os == "darwin" else None),
    )
    return chosen[0].variant_str if chosen else None


#: Where the rules of older loaders choose otherwise (kernels 0.17 and before: ROCm builds of the same release only;
#: before 0.19: CANN machines load the torch-npu noarch build).
BEFORE_0_18 = {"torch213-cxx11-rocm72-x86_64-linux": "torch213-cxx11-rocm72-x86_64-linux"}
BEFORE_0_19 = {"torch213-cxx11-cann80-x86_64-linux": "torch-npu"}
INSTALLED = importlib.metadata.version("kernels")


def _rows_for(kernels: str) -> dict[str, str]:
    """MATRIX_ROWS as the rule of kernels release ``kernels`` chooses them."""
    release = Version(kernels)
    rows = dict(MATRIX_ROWS)
    if release < Version("0.19"):
        rows.update(BEFORE_0_19)
    if release < Version("0.18"):
        rows.update(BEFORE_0_18)
    return rows


def test_every_row_of_the_real_matrix_locks_what_the_loader_loads(
    matrix_repo: str, hub: HubServer, user_env: dict, project: Path
):
    """Undeclared environments follow the newest loader's rule (kernels 0.19); an environment that declares the
    installed kernels gets exactly the installed loader's own choice; one on kernels 0.17.2 that loader's rule."""
    (entry,) = _lock(project, hub, matrix_repo, list(MATRIX_ROWS)).kernels
    for env, expected in MATRIX_ROWS.items():
        assert entry.variant_for(env).name == expected, env
    installed = [{"name": env, "kernels": INSTALLED} for env in MATRIX_ROWS]
    (entry,) = _lock(project, hub, matrix_repo, installed).kernels
    for env, expected in _rows_for(INSTALLED).items():
        assert entry.variant_for(env).name == expected, env
        assert _loader_choice(Environment.parse(env), hub_variants()) == expected, env
    older = [{"name": env, "kernels": "0.17.2"} for env in MATRIX_ROWS]
    (entry,) = _lock(project, hub, matrix_repo, older).kernels
    assert {env: entry.variant_for(env).name for env in MATRIX_ROWS} == _rows_for("0.17.2")


def test_tagless_names_are_preferred_over_cxx11(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    tagged, tagless = "torch211-cxx11-cu128-x86_64-linux", "torch211-cu128-x86_64-linux"
    repo = own_repo(catalog, {"v1": [tagged, tagless]})
    lock = _lock(project, hub, repo, [tagged])
    assert lock.kernels[0].variant_for(tagged).name == tagless
    assert _loader_choice(Environment.parse(tagged), [tagged, tagless]) == tagless


def test_tvm_ffi_builds_only_where_tvm_ffi_is_declared(matrix_repo: str, hub: HubServer, user_env: dict, project: Path):
    plain = "torch29-cxx11-cu128-x86_64-linux"
    declared = {"name": "torch29-cxx98-cu128-x86_64-linux", "tvm-ffi": "0.1.4"}
    lock = _lock(project, hub, matrix_repo, [plain, declared])
    entry = lock.kernels[0]
    assert entry.variant_for(plain).name == "torch-cuda"
    assert entry.variant_for(declared["name"]).name == "tvm-ffi01-cu128-x86_64-linux"
    assert lock.facts_for(declared["name"]) == {"tvm-ffi": "0.1.4"}
    other = {"name": "torch29-cxx98-cu128-x86_64-linux", "tvm-ffi": "0.2"}
    assert _lock(project, hub, matrix_repo, [other]).kernels[0].variant_for(other["name"]).name == "torch-cuda"


def test_free_threaded_targets_get_no_arch_build(
    catalog: Catalog, matrix_repo: str, hub: HubServer, user_env: dict, project: Path
):
    threaded = {"name": SM90, "python": "3.13t"}
    lock = _lock(project, hub, matrix_repo, [threaded])
    assert lock.kernels[0].variant_for(SM90).name == "torch-cuda"  # the noarch build of its backend
    newer = {"name": SM90, "python": "3.15t", "kernels": "0.17.2"}  # before 0.19, 3.15t loads abi3 builds again
    chosen = _lock(project, hub, matrix_repo, [newer]).kernels[0].variant_for(SM90).name
    assert chosen == "torch-stable-abi29-cu130-x86_64-linux" == _loader_choice(Environment.parse(SM90), hub_variants())
    newest = {"name": SM90, "python": "3.15t"}  # kernels 0.19: abi3 never loads free-threaded, only abi3t builds
    assert _lock(project, hub, matrix_repo, [newest]).kernels[0].variant_for(SM90).name == "torch-cuda"

    arch_only = own_repo(catalog, {"v1": [SM90], "v2": [SM90, "torch-universal"]})
    with pytest.raises(ResolutionError) as err:
        _lock(project, hub, arch_only, [threaded])
    message = str(err.value)
    assert f"{SM90}: free-threaded Python 3.13t loads no arch build" in message
    assert f"versions with a build for {SM90}: v2" in message


def test_macos_version_is_passed_to_the_rule(matrix_repo: str, hub: HubServer, user_env: dict, project: Path):
    old = {"name": "torch212-metal-aarch64-darwin", "macos": "15.5"}
    assert _lock(project, hub, matrix_repo, [old]).kernels[0].variant_for(old["name"]).name == "torch-metal"
    new = {"name": "torch212-metal-aarch64-darwin", "macos": "26.1"}
    chosen = _lock(project, hub, matrix_repo, [new]).kernels[0].variant_for(new["name"]).name
    assert chosen == "torch-stable-abi210-metal-aarch64-darwin"
    assert chosen == _loader_choice(Environment.from_declared(new), hub_variants())


def test_a_build_without_the_targets_compute_capability_is_refused_at_lock_time(
    sm90_repo: str, hub: HubServer, user_env: dict, project: Path
):
    """v2's CUDA builds lack sm90: an H100/H200 environment cannot use v2 (the loader would raise at load), a
    Blackwell (10.0) one can; `add` without a revision skips v2, and the error names the environment, the reason
    and the version that works."""
    h200 = {"name": SM90, "cuda-capabilities": ["9.0"]}
    with pytest.raises(ResolutionError) as err:
        _lock(project, hub, sm90_repo, [h200, "torch213-cxx11-cpu-x86_64-linux"], rev="v2")
    message = str(err.value)
    assert f"cannot be loaded on {SM90}:" in message
    assert f"{SM90}: its build {SM90} lacks CUDA capability 9.0 (built for 8.0, 8.6, 10.0)" in message
    assert f"versions with a build for {SM90}: v1" in message and f"kernlock add {sm90_repo}@v1" in message
    assert not (project / "kernels.lock").exists()

    blackwell = {"name": SM90, "cuda-capabilities": ["10.0"]}
    assert _lock(project, hub, sm90_repo, [blackwell], rev="v2").kernels[0].commit

    _declare(project, [h200], "")
    assert api.add(project, [sm90_repo], hub=fresh_hub(hub)).added == {sm90_repo: "v1"}  # v2 is skipped
    lock = lockfile.read(project / "kernels.lock")
    assert lock.kernels[0].variant_for(SM90).name == SM90
    assert lock.facts_for(SM90) == {"cuda-capabilities": ["9.0"]}


def test_capability_and_loader_refusals_on_several_environments(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    cpu = "torch213-cxx11-cpu-x86_64-linux"
    repo = own_repo(catalog, {"v1": [SM90, cpu], "v2": [SM90, cpu]}, kernels_minver={"v2": "0.18.0"})
    envs = [{"name": SM90, "cuda-capabilities": ["9.0"], "kernels": "0.17.2"}, {"name": cpu, "kernels": "0.16.2"}]
    with pytest.raises(ResolutionError) as err:
        _lock(project, hub, repo, envs, rev="v2")
    message = str(err.value)
    assert f"{cpu}: declares kernels 0.16.2, but its build {cpu} needs kernels >= 0.18.0" in message
    assert f"{SM90}: declares kernels 0.17.2, but its build {SM90} needs kernels >= 0.18.0" in message
    assert f"versions with a build for {cpu}, {SM90}: v1" in message
    lock = _lock(project, hub, repo, envs, rev="v1")
    assert [lock.kernels[0].variant_for(e["name"]).name for e in envs] == [SM90, cpu]


def test_the_lock_records_each_environments_facts(matrix_repo: str, hub: HubServer, user_env: dict, project: Path):
    envs = [
        "torch213-cxx11-cpu-x86_64-linux",
        {"name": SM90, "cuda-capabilities": ["10.0", "9.0"], "python": "3.13", "tvm-ffi": "0.1", "kernels": "0.17.2"},
        {"name": "torch212-cpu-aarch64-darwin", "macos": "15.0"},
    ]
    _lock(project, hub, matrix_repo, envs)
    text = (project / "kernels.lock").read_text()
    assert (
        "environment-facts = [\n"
        '    {name = "torch212-cpu-aarch64-darwin", macos = "15.0"},\n'
        f'    {{name = "{SM90}", cuda-capabilities = ["9.0", "10.0"], python = "3.13", tvm-ffi = "0.1", '
        'kernels = "0.17.2"},\n]\n'
    ) in text
    lock = lockfile.read(project / "kernels.lock")
    assert lock.facts_for("torch213-cxx11-cpu-x86_64-linux") == {}
    runner = CliRunner()
    assert runner.invoke(main, ["lock", "--check", "--project", str(project)]).exit_code == 0
    envs[2] = {"name": "torch212-cpu-aarch64-darwin", "macos": "26.0"}  # a changed fact makes the lock stale
    _declare(project, envs, f'"{matrix_repo}" = "v1"\n')
    assert runner.invoke(main, ["lock", "--check", "--project", str(project)]).exit_code == 1


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"name": SM90, "cuda-capabilities": ["sm90"]}, r"'sm90' is not a compute capability .*mean \"9\.0\"\?"),
        ({"name": SM90, "cuda_capabilities": ["9.0"]}, r"unknown key `cuda_capabilities`; did you mean `cuda-capab"),
        ({"name": "torch213-cxx11-cpu-x86_64-linux", "cuda-capabilities": ["9.0"]}, r"is for CUDA environments"),
        ({"name": SM90, "python": 3.13}, r'`python` must be .*"3\.13t" when it is free-threaded'),
        ({"name": SM90, "macos": "15.0"}, r"`macos` is for darwin environments"),
        ({"name": SM90, "tvm-ffi": "latest"}, r'`tvm-ffi` must be the apache-tvm-ffi version installed there, like "0'),
        ({"name": SM90, "kernels": "new"}, r'`kernels` must be the kernels version installed there, like "0\.17\.2"'),
        ({"cuda-capabilities": ["9.0"]}, r"an environment table needs a string `name`"),
    ],
)
def test_bad_facts_are_refused_with_the_fix(project: Path, table: dict, expected: str):
    from kernlock.project import inputs as projects

    _declare(project, [table], "")
    with pytest.raises(ProjectError, match=expected):
        projects.load(project)
    result = CliRunner().invoke(main, ["lock", "--project", str(project)])
    assert result.exit_code == 1 and "Traceback" not in result.output


def test_kernlock_env_prints_this_machine_in_the_declared_form(tmp_path: Path):
    result = CliRunner().invoke(main, ["env", "--json", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    declared = report["declared"]
    assert declared["name"] == report["environment"]
    assert set(declared) <= {"name", "cuda-capabilities", "python", "tvm-ffi", "kernels", "macos"}
    assert declared["kernels"] == report["versions"]["kernels"] and "python" in declared
    assert "cuda-capabilities" not in declared  # a CPU machine: no GPU, and torch was not imported to ask
    assert Environment.from_declared(declared).declared() == declared  # what it prints is a valid declaration
    text = CliRunner().invoke(main, ["env", "--project", str(tmp_path)])
    assert f'declare as: {{name = "{report["environment"]}", python = "{declared["python"]}"' in text.output


def test_the_fixture_table_is_the_real_matrix():
    names = hub_variants()
    assert {"torch212-cxx11-cu132-x86_64-linux", "torch213-cxx11-xpu20260-x86_64-linux"} <= set(names)
    assert HUB_MATRIX["torch"]["2.13"]["cuda"] == ("cu126", "cu130", "cu132")
    assert {f"torch-{b}" for b in ("npu", "neuron", "tpu", "universal")} <= set(names)
    for name in names:  # every name is one the loader parses
        assert kernels_variants.parse_variant(name).variant_str == name


def _kernels_test_variant_lists() -> dict[str, list[str]]:
    """``*_VARIANT_STRINGS`` lists of the installed kernels' own tests/test_variants.py, where it ships them."""
    import ast

    found: dict[str, list[str]] = {}
    for file in importlib.metadata.files("kernels") or []:
        if file.name != "test_variants.py":
            continue
        tree = ast.parse(Path(str(file.locate())).read_text())
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else None
            if isinstance(target, ast.Name) and target.id.endswith("_VARIANT_STRINGS"):
                found[target.id] = list(ast.literal_eval(node.value))
    return found


def test_the_fixture_table_holds_every_variant_of_kernels_own_tests():
    lists = _kernels_test_variant_lists()
    if not lists:
        pytest.skip("the installed kernels ships no tests/test_variants.py (the 0.15.2-0.17.2 wheels carry no tests)")
    ours = set(hub_variants())
    for name, theirs in lists.items():
        assert not sorted(set(theirs) - ours), name


def test_fixture_metadata_has_the_real_fields_and_parses_with_the_loaders_parser(catalog: Catalog):
    from kernels._rust import Metadata

    from kernlock.testing.fixtures.gitstream import git as _git

    repo = own_repo(catalog, {"v1": [SM90, "torch-universal"]}, kernels_minver={"v1": "0.17.0"})
    path = catalog.repo(repo).path
    raw = _git(path, "show", f"v1:build/{SM90}/metadata.json")
    data = json.loads(raw)
    assert {"name", "id", "version", "license", "source", "python-depends", "backend", "digest", "provenance"} <= set(
        data
    )
    parsed = Metadata.from_bytes(raw)
    assert tuple(parsed.backend.archs) == HUB_MATRIX["cuda-archs"][0][1] and "9.0" in parsed.backend.archs
    assert str(parsed.kernels_minver) == "0.17.0" and parsed.source == data["source"]
    assert parsed.provenance is not None
    noarch = Metadata.from_bytes(_git(path, "show", "v1:build/torch-universal/metadata.json"))
    assert noarch.backend.archs is None  # a pure-Python build declares no archs


def test_kernlock_env_warns_when_this_machine_contradicts_the_locked_facts(
    matrix_repo: str, hub: HubServer, user_env: dict, project: Path
):
    here = Environment.parse(api.env_report(project)["environment"])
    lock = _lock(project, hub, matrix_repo, [{"name": here.name, "python": "3.13t"}])
    assert lock.kernels[0].variant_for(here.name).name.startswith("torch-")  # free-threaded: a noarch build
    report = json.loads(CliRunner().invoke(main, ["env", "--json", "--project", str(project)]).output)
    python = report["declared"]["python"]
    assert report["facts_differ"] == [f"python is {python} here, the lock was made for 3.13t"]
    text = CliRunner().invoke(main, ["env", "--project", str(project)]).output
    assert f"WARNING: python is {python} here, the lock was made for 3.13t" in text
    _lock(project, hub, matrix_repo, [{"name": here.name, "python": python}])
    assert "facts_differ" not in api.env_report(project)
