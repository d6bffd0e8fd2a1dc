"""kernlock add / remove / lock against the local Hub and the realistic catalog."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from projects import CPU_ENV, fresh_hub, own_repo, write_pyproject

from kernlock import api
from kernlock.cli.app import main
from kernlock.errors import (
    HubError,
    LockError,
    NotFoundError,
    ProjectError,
    ResolutionError,
    SpecError,
)
from kernlock.hub.client import Hub
from kernlock.lock import file as lockfile
from kernlock.lock import model as lockmodel
from kernlock.project.inputs import Upgrade
from kernlock.testing import Catalog, HubServer, move_branch, standard_variants

CU126 = "torch210-cxx11-cu126-x86_64-linux"
CU128 = "torch211-cxx11-cu128-x86_64-linux"
CU130 = "torch211-cxx11-cu130-x86_64-linux"
CU129_212 = "torch212-cxx11-cu129-x86_64-linux"


def read(project: Path) -> lockmodel.Lock:
    return lockfile.read(project / "kernels.lock")


def entry(lock: lockmodel.Lock, repo: str, env: str) -> lockmodel.LockedKernel:
    found = lock.entry_for(repo, env)
    assert found is not None, (repo, env)
    return found


# -- resolution --------------------------------------------------------------------------------------------


def test_multi_environment_lock_with_when_pins(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(
        project,
        '"kernels-community/flash-attn2" = [\n'
        '  { rev = "v2", when = "cuda < 12.8" },  # v3 broke GQA backward on old CUDA\n'
        '  { rev = "v3" },\n]\n',
        environments=[CPU_ENV, CU126, CU128, CU130],
    )
    result = api.lock(project, hub=fresh_hub(hub))
    assert result.written
    lock = read(project)
    fa2 = catalog.repo(catalog.flash_attn2)
    v2, v3 = entry(lock, catalog.flash_attn2, CU126), entry(lock, catalog.flash_attn2, CPU_ENV)
    assert (v2.requested, v2.ref, v2.commit) == ("v2", "v2", fa2.head("v2"))
    assert v2.environments == (CU126,)
    assert (v3.requested, v3.commit) == ("v3", fa2.head("v3"))
    assert v3.environments == tuple(sorted([CPU_ENV, CU128, CU130]))
    assert v3.variant_for(CU128).name == "torch211-cxx11-cu128-x86_64-linux"
    assert v3.variant_for(CU130).name == "torch211-cxx11-cu130-x86_64-linux"
    assert v3.variant_for(CPU_ENV).name == CPU_ENV  # the arch build is preferred over torch-cpu
    assert v2.variant_for(CU126).name == "torch210-cxx11-cu126-x86_64-linux"
    assert lock.environments == tuple(sorted([CPU_ENV, CU126, CU128, CU130]))


def test_file_hashes_come_from_the_tree_and_no_build_file_is_downloaded(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, '"kernels-community/activation" = "v2"\n', environments=[CPU_ENV, CU129_212])
    api.lock(project, hub=fresh_hub(hub))
    files = {f.path: f for v in read(project).kernels[0].variants for f in v.files}
    so = [f for name, f in files.items() if name.endswith(".so")]
    assert so and all(f.hash.startswith("sha256:") and f.size == 4096 for f in so)
    assert files["__init__.py"].hash.startswith("git-sha1:")
    downloads = [r.path for r in hub.log.snapshot() if "/resolve/" in r.path]
    # the small git files a signature covers (metadata.json, its bundle, the Python sources: checked against the
    # signed digest at lock time, docs/security.md); never a build's LFS file
    git_files = [p for p, f in files.items() if f.hash.startswith("git-sha1:")]
    assert downloads and all(path.rsplit("/", 1)[1] in git_files for path in downloads), downloads
    assert not any(path.endswith(".so") for path in downloads)


def test_add_without_revision_records_newest_version_with_builds_everywhere(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, "", environments=[CPU_ENV])
    # rotary: v2 is newest but has no CPU build -> v1.
    result = api.add(project, [catalog.newest_without_cpu], hub=fresh_hub(hub))
    assert result.added == {catalog.newest_without_cpu: "v1"}
    assert f'"{catalog.newest_without_cpu}" = "v1"' in (project / "pyproject.toml").read_text()
    # flash-attn2: v5 is newest (no CPU build), v4 has one.
    api.add(project, [catalog.flash_attn2], hub=fresh_hub(hub))
    assert f'"{catalog.flash_attn2}" = "v4"' in (project / "pyproject.toml").read_text()
    assert entry(read(project), catalog.flash_attn2, CPU_ENV).requested == "v4"


def test_v0_only_when_asked(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, "", environments=[CPU_ENV])
    with pytest.raises(ResolutionError, match=r"@v0"):
        api.add(project, [catalog.v0_only], hub=fresh_hub(hub))
    api.add(project, [f"{catalog.v0_only}@v0"], hub=fresh_hub(hub))
    assert entry(read(project), catalog.v0_only, CPU_ENV).variant_for(CPU_ENV).name == "torch-cpu"


def test_universal_only_kernel_serves_every_environment(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    envs = [CPU_ENV, CU128, "torch212-metal-aarch64-darwin"]
    write_pyproject(project, f'"{catalog.universal}" = "v1"\n', environments=envs)
    api.lock(project, hub=fresh_hub(hub))
    (kernel,) = read(project).kernels
    assert [(v.name, v.environments) for v in kernel.variants] == [("torch-universal", tuple(sorted(envs)))]


def test_revisions_by_tag_branch_commit_and_short_sha(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    fa2 = catalog.repo(catalog.flash_attn2)
    old = fa2.head("v1.0.0")
    assert old != fa2.head("v1")  # the annotated tag is an old commit of v1
    activation = catalog.repo(catalog.activation)
    write_pyproject(project, "", environments=[CPU_ENV])
    api.add(project, [f"{catalog.activation}@v2.0.0"], hub=fresh_hub(hub))
    tagged = entry(read(project), catalog.activation, CPU_ENV)
    assert (tagged.ref, tagged.commit) == ("v2.0.0", activation.head("v2.0.0"))

    v3 = fa2.head("v3")
    api.add(project, [f"{catalog.flash_attn2}@{v3[:10]}"], hub=fresh_hub(hub))
    pinned = entry(read(project), catalog.flash_attn2, CPU_ENV)
    assert (pinned.requested, pinned.ref, pinned.commit) == (v3[:10], v3, v3)

    api.add(project, [f"{catalog.flash_attn2}@{v3}"], hub=fresh_hub(hub))
    assert entry(read(project), catalog.flash_attn2, CPU_ENV).ref == v3


@pytest.mark.slow
def test_ambiguous_and_unknown_short_sha(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    repo_id = own_repo(catalog, {"v1": [CPU_ENV]})
    repo = catalog.repo(repo_id)
    seen: dict[str, str] = {}
    for i in itertools.count():  # re-uploads until two commits share a 4-hex prefix
        sha = repo.move_branch("v1", message=f"upload {i}")
        if sha[:4] in seen:
            break
        seen[sha[:4]] = sha
    write_pyproject(project, "", environments=[CPU_ENV])
    with pytest.raises(NotFoundError, match="ambiguous"):
        api.add(project, [f"{repo_id}@{sha[:4]}"], hub=fresh_hub(hub))
    with pytest.raises(NotFoundError, match=r"has no revision 'deadbeef'; versions with a build for .*: v1"):
        api.add(project, [f"{repo_id}@deadbeef"], hub=fresh_hub(hub))


def test_kernel_dependencies_are_locked_as_their_own_entries(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, f'"{catalog.dependent}" = "v1"\n', environments=[CPU_ENV, CU129_212])
    api.lock(project, hub=fresh_hub(hub))
    lock = read(project)
    dep = entry(lock, catalog.activation, CPU_ENV)
    assert (dep.requested, dep.commit) == ("v1", catalog.repo(catalog.activation).head("v1"))
    assert dep.required_by == (catalog.dependent,)
    assert dep.environments == tuple(sorted([CPU_ENV, CU129_212]))


def test_conflicting_requirements_are_refused(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    # paged-attention v2 needs activation version 2; the project pins activation v1.
    write_pyproject(project, f'"{catalog.dependent}" = "v2"\n"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    with pytest.raises(ResolutionError, match=r"conflicting requirements for kernels-community/activation"):
        api.lock(project, hub=fresh_hub(hub))
    assert not (project / "kernels.lock").exists()


# -- errors --------------------------------------------------------------------------------------------------


def test_no_build_for_an_environment_names_env_versions_and_variants(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, f'"{catalog.flash_attn2}" = "v5"\n', environments=[CPU_ENV, CU129_212])
    with pytest.raises(ResolutionError) as err:
        api.lock(project, hub=fresh_hub(hub))
    message = str(err.value)
    assert f"{catalog.flash_attn2}@v5 has no build for {CPU_ENV}" in message
    assert "versions with a build for torch213-cxx11-cpu-x86_64-linux: v2, v3, v4" in message
    assert "builds at v5 (32):" in message  # the variants that do exist, one group per line
    assert "\n    torch213-cxx11: cu126-aarch64-linux, cu126-x86_64-linux, cu130-aarch64-linux" in message
    assert not (project / "kernels.lock").exists()


def test_untrusted_publisher_needs_trust(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, "# keep me\n", environments=[CPU_ENV])
    before = (project / "pyproject.toml").read_text()
    with pytest.raises(ResolutionError, match=r"not mark as a trusted.*--trust"):
        api.add(project, [catalog.untrusted], hub=fresh_hub(hub))
    assert (project / "pyproject.toml").read_text() == before
    assert not (project / "kernels.lock").exists()
    api.add(project, [catalog.untrusted], trust=True, hub=fresh_hub(hub))
    text = (project / "pyproject.toml").read_text()
    assert f'"{catalog.untrusted}" = {{rev = "v1", trust = true}}' in text
    assert "# keep me" in text
    assert entry(read(project), catalog.untrusted, CPU_ENV)


@pytest.mark.parametrize("spec", ["activation", "org/name@", "a/b/c", "org/na me", "@v1", "org/name@v1@v2"])
def test_malformed_spec(spec: str, project: Path):
    with pytest.raises(SpecError, match="expected org/name or org/name@rev"):
        api.add(project, [spec], hub=Hub(endpoint="http://127.0.0.1:9"))


def test_unknown_repo_and_revision(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, "", environments=[CPU_ENV])
    with pytest.raises(NotFoundError, match="kernels-community/nope was not found"):
        api.add(project, ["kernels-community/nope@v1"], hub=fresh_hub(hub))
    with pytest.raises(
        NotFoundError,
        match=rf"no revision 'v9'; versions with a build for {CPU_ENV}: v1, v2.*kernlock add {catalog.activation}@v2",
    ):
        api.add(project, [f"{catalog.activation}@v9"], hub=fresh_hub(hub))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('environments = "torch213"\n', "must be a non-empty list"),
        ('environments = ["torch213-cuda"]\n', "is not an environment string"),
        ("colour = 1\n", "unknown key"),
        ('[tool.kernlock.kernels]\n"x/y" = 3\n', "expected a revision string"),
        ('[tool.kernlock.kernels]\n"x/y" = [{ rev = "v1", when = "gpu > 1" }]\n', "invalid `when`"),
        ('[tool.kernlock.kernels]\n"not-a-repo" = "v1"\n', "must be a repo id"),
        ('[tool.kernlock.kernels]\n"x/y" = [{ when = "cuda == 12.8" }]\n', "needs a string `rev`"),
    ],
)
def test_malformed_tool_kernlock(project: Path, table: str, message: str):
    (project / "pyproject.toml").write_text("[tool.kernlock]\n" + table)
    with pytest.raises(ProjectError, match=message):
        api.lock(project, hub=Hub(endpoint="http://127.0.0.1:9"))


def test_hub_unreachable(project: Path, user_env: dict):
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', environments=[CPU_ENV])
    with pytest.raises(HubError, match=r"cannot reach the Hub at http://127.0.0.1:9"):
        api.lock(project, hub=Hub(endpoint="http://127.0.0.1:9", retries=1, backoff=0.01))
    assert not (project / "kernels.lock").exists()


def test_rate_limits_and_server_errors_are_retried(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    hub.faults.status(429, times=2, match="/refs", retry_after=0.05)
    hub.faults.status(503, times=1, match="/tree/")
    api.lock(project, hub=fresh_hub(hub))
    assert hub.log.count(contains="/refs") == 3
    assert entry(read(project), catalog.activation, CPU_ENV).requested == "v1"

    hub.faults.status(500, times=100, match="/refs")
    (project / "kernels.lock").unlink()
    with pytest.raises(HubError, match=r"answered HTTP 500 .* after 4 attempt"):
        api.lock(project, hub=fresh_hub(hub))


# -- pins, upgrades, staleness ----------------------------------------------------------------------------


def test_relock_keeps_pins_after_branch_moves_and_upgrade_moves_them(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    a = own_repo(catalog, {"v1": [CPU_ENV, "torch-universal"]})
    b = own_repo(catalog, {"v1": [CPU_ENV]})
    write_pyproject(project, f'"{a}" = "v1"\n"{b}" = "v1"\n', environments=[CPU_ENV])
    api.lock(project, hub=fresh_hub(hub))
    first = read(project)
    new_a, new_b = move_branch(catalog.root, a, "v1"), move_branch(catalog.root, b, "v1")

    hub.log.clear()
    assert not api.lock(project, hub=fresh_hub(hub)).written
    assert len(hub.log) == 0  # up to date: not a single request
    # A changed requirement elsewhere re-resolves only that one; the others keep their pins.
    write_pyproject(project, f'"{a}" = "v1"\n"{b}" = "v1"\n"{catalog.universal}" = "v1"\n', environments=[CPU_ENV])
    api.lock(project, hub=fresh_hub(hub))
    assert entry(read(project), a, CPU_ENV).commit == entry(first, a, CPU_ENV).commit
    assert all(f"/{a}/" not in r.path and f"/{b}/" not in r.path for r in hub.log.snapshot())

    api.lock(project, Upgrade(kernels=frozenset({a})), hub=fresh_hub(hub))
    assert entry(read(project), a, CPU_ENV).commit == new_a
    assert entry(read(project), b, CPU_ENV).commit == entry(first, b, CPU_ENV).commit
    api.lock(project, Upgrade(all=True), hub=fresh_hub(hub))
    assert entry(read(project), b, CPU_ENV).commit == new_b


def test_lock_check(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV])
    with pytest.raises(LockError, match=r"no kernels\.lock yet"):
        api.lock(project, check=True)
    api.lock(project, hub=fresh_hub(hub))
    before = (project / "kernels.lock").read_bytes()
    hub.log.clear()
    api.lock(project, check=True)
    assert len(hub.log) == 0
    write_pyproject(project, f'"{catalog.activation}" = "v2"\n', environments=[CPU_ENV])
    with pytest.raises(LockError, match=r"stale: \[tool.kernlock\] in pyproject.toml changed"):
        api.lock(project, check=True)
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', environments=[CPU_ENV, CU129_212])
    with pytest.raises(LockError, match=r"kernels\.lock is stale") as stale:
        api.lock(project, check=True)
    assert stale.value.fix == "run `kernlock lock` and commit the result" and stale.value.why
    assert (project / "kernels.lock").read_bytes() == before


def test_lock_bytes_are_deterministic(catalog: Catalog, hub: HubServer, user_env: dict, tmp_path: Path):
    texts = []
    for name, order in (("one", [CU129_212, CPU_ENV]), ("two", [CPU_ENV, CU129_212])):
        project = tmp_path / name
        project.mkdir()
        write_pyproject(project, f'"{catalog.flash_attn2}" = "v4"\n"{catalog.dependent}" = "v1"\n', environments=order)
        api.lock(project, hub=fresh_hub(hub))
        texts.append((project / "kernels.lock").read_text())
    assert texts[0] == texts[1]
    assert texts[0].startswith("# This file is generated by kernlock.")
    assert lockfile.dumps(lockfile.loads(texts[0])) == texts[0]


def test_remove_drops_requirement_and_its_dependencies(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(
        project, f'# deps\n"{catalog.dependent}" = "v1"  # paged\n"{catalog.universal}" = "v1"\n', [CPU_ENV]
    )
    api.lock(project, hub=fresh_hub(hub))
    assert catalog.activation in read(project).repos
    api.remove(project, [catalog.dependent], hub=fresh_hub(hub))
    assert read(project).repos == [catalog.universal]
    text = (project / "pyproject.toml").read_text()
    assert catalog.dependent not in text and "# deps" in text
    with pytest.raises(ProjectError, match=r"not in \[tool\.kernlock\.kernels\]"):
        api.remove(project, ["kernels-community/nope"])


def test_add_keeps_pyproject_formatting(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    original = (
        '[project]\nname = "train"   # the trainer\ndependencies = [\n    "torch==2.13.0",\n]\n\n'
        "[tool.kernlock]\n# where we run\nenvironments = [\n"
        f'  "{CPU_ENV}",  # laptops\n]\n\n[tool.ruff]\nline-length = 99\n'
    )
    (project / "pyproject.toml").write_text(original)
    api.add(project, [f"{catalog.activation}@v1"], hub=fresh_hub(hub))
    text = (project / "pyproject.toml").read_text()
    assert text.startswith(original.split("[tool.ruff]")[0].rstrip())
    assert "[tool.ruff]\nline-length = 99" in text
    assert f'[tool.kernlock.kernels]\n"{catalog.activation}" = "v1"' in text


def test_corrupt_lock_is_reported_with_its_line(project: Path):
    text = (
        '# This file is generated by kernlock. Do not edit it by hand.\nlock-version = "2"\ncreated-by = "kernlock"\n'
        f'requires-hash = "sha256:{"0" * 64}"\nvariant-rule = "kernels-0.17"\ncontent-hash = "sha256:{"1" * 64}"\n'
        f'environments = ["{CPU_ENV}"]\n\n'
        f'[[kernel]]\nrepo = "a/b"\nrequested = "v1"\nref = "v1"\ncommit = "123"\nenvironments = ["{CPU_ENV}"]\n\n'
        f'[[kernel.variant]]\nname = "torch-cpu"\nenvironments = ["{CPU_ENV}"]\n'
        f'files = [{{path = "__init__.py", size = 1, hash = "git-sha1:{"a" * 40}"}}]\n'
    )
    with pytest.raises(LockError, match=r"line 9 \(\[\[kernel\]\] #1\): '123' is not a 40-hex"):
        lockfile.loads(text)
    with pytest.raises(LockError, match=r"lock-version '9'.*upgrade kernlock"):
        lockfile.loads(text.replace('lock-version = "2"', 'lock-version = "9"'))
    with pytest.raises(LockError, match=r"lock-version '1', written by an older kernlock.*kernlock lock"):
        lockfile.loads(text.replace('lock-version = "2"', 'lock-version = "1"'))
    with pytest.raises(LockError, match="not valid TOML"):
        lockfile.loads(text + "[[kernel\n")


# -- the command line ----------------------------------------------------------------------------------------


def test_cli_exit_codes_and_messages(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    runner = CliRunner()
    write_pyproject(project, "", environments=[CPU_ENV])
    ok = runner.invoke(main, ["add", f"{catalog.activation}@v1", "--no-sync", "--project", str(project)])
    assert ok.exit_code == 0, ok.output
    assert 'added kernels-community/activation = "v1"' in ok.output
    check = runner.invoke(main, ["lock", "--check", "--project", str(project)])
    assert check.exit_code == 0 and "up to date" in check.output

    bad = runner.invoke(main, ["add", "not-a-spec", "--project", str(project)])
    assert bad.exit_code == 1
    assert bad.output.startswith("error: invalid kernel spec 'not-a-spec'") and "Traceback" not in bad.output
    missing = runner.invoke(main, ["add", "kernels-community/nope", "--no-sync", "--project", str(project)])
    assert missing.exit_code == 1 and "was not found" in missing.output
    usage = runner.invoke(main, ["lock", "--frobnicate"])
    assert usage.exit_code == 2

    write_pyproject(project, f'"{catalog.activation}" = "v2"\n', environments=[CPU_ENV])
    stale = runner.invoke(main, ["lock", "--check", "--project", str(project)])
    assert stale.exit_code == 1 and "run `kernlock lock`" in stale.output


def test_lock_with_default_environment_is_this_machine(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n')
    api.lock(project, hub=fresh_hub(hub))
    assert read(project).environments == (CPU_ENV,)


def test_realistic_matrix_every_standard_environment(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    """activation v2 holds the standard ~26-variant matrix: every Linux CUDA/ROCm/XPU/CPU environment gets its own."""
    envs = [v for v in standard_variants(("2.12", "2.13")) if v.endswith("linux")]
    write_pyproject(project, f'"{catalog.activation}" = "v2"\n', environments=envs)
    api.lock(project, hub=fresh_hub(hub))
    (kernel,) = read(project).kernels
    assert {v.name: v.environments for v in kernel.variants} == {env: (env,) for env in envs}


def test_add_in_a_directory_without_pyproject_creates_it(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    api.add(project, [f"{catalog.activation}@v1"], hub=fresh_hub(hub))
    assert (project / "pyproject.toml").read_text() == (f'[tool.kernlock.kernels]\n"{catalog.activation}" = "v1"\n')
    assert read(project).environments == (CPU_ENV,)


def test_add_on_a_machine_outside_the_environments_locks_and_skips_sync(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, "", environments=[CU129_212])
    result = CliRunner().invoke(main, ["add", f"{catalog.activation}@v2", "--project", str(project)])
    assert result.exit_code == 0, result.output
    assert "not synced: this machine is not one of the lock's environments" in result.output
    assert read(project).environments == (CU129_212,)
    # Nothing is synced: the lock read only the small git files a signature covers (docs/security.md), no build
    fetched = [r.path for r in hub.log.snapshot() if "/resolve/" in r.path]
    assert fetched and all(path.endswith((".py", ".json", ".sigstore")) for path in fetched), fetched


def test_a_direct_requirement_that_is_also_a_dependency_stays_direct(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n"{catalog.dependent}" = "v1"\n', environments=[CPU_ENV])
    api.lock(project, hub=fresh_hub(hub))
    activation = entry(read(project), catalog.activation, CPU_ENV)
    assert activation.required_by == ()  # the project asked for it: not marked as a dependency
    assert "required-by" not in (project / "kernels.lock").read_text()


def test_malformed_kernel_depends_is_a_clear_error(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    repo_id = own_repo(catalog, {"v1": [CPU_ENV]})
    metadata = {"name": "x", "version": 1, "backend": {"type": "cpu"}, "kernel-depends": [{"version": 1}]}
    catalog.repo(repo_id).upload_files("v1", {f"build/{CPU_ENV}/metadata.json": json.dumps(metadata).encode()})
    write_pyproject(project, f'"{repo_id}" = "v1"\n', environments=[CPU_ENV])
    with pytest.raises(ResolutionError, match=r"metadata.json: kernel dependency \{'version': 1\} has no `repo-id`"):
        api.lock(project, hub=fresh_hub(hub))


def test_lock_outside_a_project_and_a_mistyped_project_dir(tmp_path: Path, user_env: dict):
    with pytest.raises(ProjectError, match=r"no pyproject\.toml in"):
        api.lock(tmp_path)
    missing = CliRunner().invoke(main, ["lock", "--project", str(tmp_path / "typo")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert not (tmp_path / "typo").exists()


def test_unreadable_pyproject_is_an_error_not_a_traceback(project: Path):
    (project / "pyproject.toml").write_bytes(b"[tool.kernlock]\nname = '\xff\xfe'\n")
    result = CliRunner().invoke(main, ["lock", "--project", str(project)])
    assert result.exit_code == 1
    assert "is not UTF-8 text" in result.output and "Traceback" not in result.output


def test_writes_keep_the_file_mode(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    pyproject = write_pyproject(project, "", environments=[CPU_ENV])
    pyproject.chmod(0o644)
    api.add(project, [f"{catalog.activation}@v1"], hub=fresh_hub(hub))
    assert pyproject.stat().st_mode & 0o777 == 0o644
    assert (project / "kernels.lock").stat().st_mode & 0o044 == 0o044  # readable by the group and others too


def test_a_full_disk_is_not_mistaken_for_a_network_fault(catalog: Catalog, hub: HubServer, tmp_path: Path):
    """A write error while downloading is reported at once (no retries, no 'cannot reach the Hub')."""
    import errno

    repo = catalog.repo(catalog.activation)
    dest = tmp_path / "blob.incomplete"
    dest.symlink_to("/dev/full")  # every write fails with ENOSPC
    so = next(p for p in repo.variants("v1") if p == CPU_ENV)
    files = [f for f in fresh_hub(hub).build_tree(catalog.activation, repo.head("v1"))[so]]
    big = next(f for f in files if f.path.endswith(".so"))
    hub.log.clear()
    with pytest.raises(OSError) as err:
        fresh_hub(hub).download(catalog.activation, repo.head("v1"), f"build/{so}/{big.path}", dest, size=big.size)
    assert err.value.errno == errno.ENOSPC
    assert hub.log.count(method="GET", contains="/resolve/") == 1


def test_a_lock_without_kernels_keeps_its_header(catalog: Catalog, hub: HubServer, user_env: dict, project: Path):
    write_pyproject(project, f'"{catalog.universal}" = "v1"\n', environments=[CPU_ENV])
    api.lock(project, hub=fresh_hub(hub))
    api.remove(project, [catalog.universal], hub=fresh_hub(hub))
    text = (project / "kernels.lock").read_text()
    assert text.startswith("# This file is generated by kernlock.") and "kernel =" not in text
    assert read(project).kernels == ()
    assert CliRunner().invoke(main, ["lock", "--check", "--project", str(project)]).exit_code == 0


def test_removing_trust_is_checked_again_on_the_next_lock(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    write_pyproject(project, f'"{catalog.untrusted}" = {{ rev = "v1", trust = true }}\n', environments=[CPU_ENV])
    api.lock(project, hub=fresh_hub(hub))
    write_pyproject(project, f'"{catalog.untrusted}" = "v1"\n', environments=[CPU_ENV])
    with pytest.raises(ResolutionError, match="not mark as a trusted kernel publisher"):
        api.lock(project, hub=fresh_hub(hub))


def test_a_build_that_needs_a_newer_loader_than_an_environment_declares(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
):
    """`kernels-minver` in a build's metadata.json against `{ name, kernels }` environments: refused at lock time
    naming both versions, skipped by `add` without a revision, fine where the loader is new enough or not declared."""
    repo_id = own_repo(catalog, {"v1": [CPU_ENV], "v2": [CPU_ENV]})
    metadata = {"name": "x", "version": 2, "backend": {"type": "cpu"}, "kernels-minver": "0.18.0"}
    catalog.repo(repo_id).upload_files("v2", {f"build/{CPU_ENV}/metadata.json": json.dumps(metadata).encode()})

    def declare(loader: str | None, kernels: str) -> None:
        env = f'"{CPU_ENV}"' if loader is None else f'{{ name = "{CPU_ENV}", kernels = "{loader}" }}'
        (project / "pyproject.toml").write_text(
            f"[tool.kernlock]\nenvironments = [{env}]\n\n[tool.kernlock.kernels]\n{kernels}"
        )

    declare("0.17.2", f'"{repo_id}" = "v2"\n')
    with pytest.raises(ResolutionError, match=r"declares kernels 0\.17\.2, but its build .* needs kernels >= 0\.18\.0"):
        api.lock(project, hub=fresh_hub(hub))
    with pytest.raises(ResolutionError, match=rf"versions with a build for {CPU_ENV}: v1\n  fix: pin one"):
        api.lock(project, hub=fresh_hub(hub))
    assert not (project / "kernels.lock").exists()

    declare("0.17.2", "")
    assert api.add(project, [repo_id], hub=fresh_hub(hub)).added == {repo_id: "v1"}  # v2 is skipped

    for loader in ("0.18.1", None):
        declare(loader, f'"{repo_id}" = "v2"\n')
        assert entry(api.lock(project, hub=fresh_hub(hub)).lock, repo_id, CPU_ENV).requested == "v2"


def test_declared_loader_counts_in_the_requirements_hash(project: Path):
    from kernlock.project import inputs as projects

    (project / "pyproject.toml").write_text(f'[tool.kernlock]\nenvironments = ["{CPU_ENV}"]\n')
    plain = projects.load(project).requires_hash()
    (project / "pyproject.toml").write_text(f'[tool.kernlock]\nenvironments = [{{ name = "{CPU_ENV}" }}]\n')
    assert projects.load(project).requires_hash() == plain  # the same environment, written as a table
    (project / "pyproject.toml").write_text(
        f'[tool.kernlock]\nenvironments = [{{ name = "{CPU_ENV}", kernels = "0.16.2" }}]\n'
    )
    assert projects.load(project).requires_hash() != plain
    (project / "pyproject.toml").write_text(
        f'[tool.kernlock]\nenvironments = [{{ name = "{CPU_ENV}", kernels = "new" }}]\n'
    )
    with pytest.raises(ProjectError, match=r'`kernels` must be the kernels version installed there, like "0\.17\.2"'):
        projects.load(project)
