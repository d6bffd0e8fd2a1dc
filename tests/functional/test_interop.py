"""Living beside the kernels library's own lock (issue #14): never clobbered, imported keeping its commits, exported
for `load_kernel`/`get_locked_kernel`; and `kernlock outdated`, `lock --upgrade` / `--dry-run` reports.

The kernels library's JSON lock is written by the real `kernels lock` CLI against the local Hub; loads go through
the real `kernels` and `transformers` in fresh processes, offline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import tomllib
from cli import assert_clean_error, run_cli
from processes import CHILD_HELPERS, CHILD_PRELUDE, Child
from projects import CPU_ENV, write_pyproject

from kernlock import api
from kernlock.errors import LockError
from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, Catalog, HubServer, create_kernel_repo, read_identity

pytestmark = pytest.mark.subprocess

CU128 = "torch213-cxx11-cu128-x86_64-linux"  # an environment and the variant it loads


def own_repo(catalog: Catalog, branches: dict[str, list[str]], kind: str = "activation") -> str:
    """A repo of this test alone (the catalog is shared): its branches may move."""
    repo_id = f"kernels-community/i-{uuid.uuid4().hex[:8]}"
    create_kernel_repo(catalog.root, repo_id, branches, kind=kind)
    return repo_id


def kernels_lock(project: Path, env: dict[str, str]) -> str:
    """Run the kernels library's own `kernels lock PROJECT`; returns the JSON lock it wrote."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "kernels"), "lock", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return (project / "kernels.lock").read_text()


def child(code: str, env: dict[str, str], cwd: Path) -> dict:
    """Run ``code`` in a fresh, offline Python (CHILD_PRELUDE and CHILD_HELPERS first); its REPORT, after checking
    that no socket was connected."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + CHILD_HELPERS + code],
        env={**env, "HF_HUB_OFFLINE": "1"},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ran = Child(result.returncode, result.stdout, result.stderr)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.report["connects"] == []
    return ran.report


# -- the kernels library's lock: never clobbered, then imported ------------------------------------------------


@pytest.mark.slow
def test_json_lock_is_never_clobbered_and_import_keeps_its_commits_for_offline_training(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    attn = own_repo(catalog, {"v1": [CPU_VARIANT, CU128]}, kind="attention")
    act = own_repo(catalog, {"v1": [CPU_VARIANT]})  # the commit kernels locks has no build for CU128
    (project / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1.0"\n\n'
        f'[tool.kernels.dependencies]\n"{attn}" = 1\n"{act}" = 1\n\n'
        f'[tool.kernlock]\nenvironments = ["{CPU_ENV}", "{CU128}"]\n'
    )
    json_lock = kernels_lock(project, user_env)
    theirs = {item["dependency"]["repo-id"]: item["lock"]["commit"] for item in json.loads(json_lock)}
    moved = catalog.repo(attn).move_branch("v1")  # both heads move on after `kernels lock`
    act_head = catalog.repo(act).move_branch("v1", add=[CU128])
    pyproject = (project / "pyproject.toml").read_text()

    for command in (
        ["lock"],
        ["lock", "--check"],
        ["lock", "--upgrade"],
        ["add", f"{act}@v1"],
        ["remove", act],
        ["sync"],
        ["sync", "--frozen"],
        ["show"],
        ["verify"],
        ["outdated"],
        ["export", "--format", "kernels", "-o", str(project / "out.json")],
    ):
        assert_clean_error(run_cli(*command, "--project", str(project), env=user_env), "kernlock import")
        assert (project / "kernels.lock").read_text() == json_lock, command
        assert (project / "pyproject.toml").read_text() == pyproject, command

    result = run_cli("import", "--project", str(project), env=user_env)
    assert result.returncode == 0, result.stderr
    assert f"kept {attn} v1 {theirs[attn][:12]}" in result.stdout
    assert f"not kept {act} v1 {theirs[act][:12]} -> {act_head[:12]}: commit {theirs[act][:12]}" in result.stdout
    assert f"no build for {CU128}" in result.stdout
    assert (project / "kernels.lock.json").read_text() == json_lock  # moved aside byte for byte
    lock = lockfile.read(project / "kernels.lock")
    locked = {(k.repo, k.requested, k.commit) for k in lock.kernels}
    assert locked == {(attn, "v1", theirs[attn]), (act, "v1", act_head)}
    assert theirs[attn] != moved
    data = tomllib.loads((project / "pyproject.toml").read_text())
    assert "kernels" not in data["tool"]  # `kernels lock` can no longer overwrite kernels.lock
    assert data["tool"]["kernlock"]["kernels"] == {attn: "v1", act: "v1"}
    assert data["project"] == {"name": "demo", "version": "0.1.0"}
    assert run_cli("lock", "--check", "--project", str(project), env=user_env).returncode == 0
    assert run_cli("sync", "--project", str(project), env=user_env).returncode == 0

    report = child(
        textwrap.dedent(f"""
        import kernlock.activate
        model, numbers = train_llama("{attn}")
        report(**numbers)
        """),
        user_env,
        project,
    )
    assert report["attn"] == attn and report["q_grad"] > 0
    assert report["loaded"][attn]["commit"] == theirs[attn]
    assert report["loaded"][attn]["identity"] == read_identity(catalog.root, attn, theirs[attn], CPU_VARIANT)


def test_import_refuses_to_overwrite_a_moved_lock_and_needs_something_to_import(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, "", [CPU_ENV])
    assert_clean_error(run_cli("import", "--project", str(project), env=user_env), "nothing to import")
    (project / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{catalog.activation}" = 1\n')
    for command in (["lock"], ["lock", "--check"], ["add", f"{catalog.activation}@v1"]):  # no lock, only the table
        assert_clean_error(
            run_cli(*command, "--project", str(project), env=user_env), "[tool.kernels.dependencies]", "kernlock import"
        )
        assert not (project / "kernels.lock").exists()
    (project / "kernels.lock").write_text("[]")
    (project / "kernels.lock.json").write_text("mine\n")
    assert_clean_error(run_cli("import", "--project", str(project), env=user_env), "kernels.lock.json already exists")
    assert (project / "kernels.lock").read_text() == "[]" and (project / "kernels.lock.json").read_text() == "mine\n"


def test_a_damaged_json_lock_is_never_clobbered(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    """A truncated or merge-mangled JSON lock is still the kernels library's: `lock` leaves it, `import` names it."""
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', [CPU_ENV])
    entry = f'{{"dependency": {{"repo-id": "{catalog.activation}", "version": 1}}, "lock": {{"commit": "{"a" * 40}"}}}}'
    for damaged in (
        f"[\n  {entry},\n",  # cut off mid-file
        f"<<<<<<< HEAD\n[\n  {entry}\n]\n=======\n[]\n>>>>>>> theirs\n",  # a merge conflict
    ):
        (project / "kernels.lock").write_text(damaged)
        assert_clean_error(run_cli("lock", "--project", str(project), env=user_env), "kernlock import")
        assert (project / "kernels.lock").read_text() == damaged
        assert_clean_error(run_cli("import", "--project", str(project), env=user_env), "restore it from version")
        assert (project / "kernels.lock").read_text() == damaged and not (project / "kernels.lock.json").exists()


def test_import_of_an_untrusted_publisher_names_import_trust(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    (project / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{catalog.untrusted}" = 1\n')
    assert_clean_error(run_cli("import", "--project", str(project), env=user_env), "`kernlock import --trust`")
    assert "[tool.kernels.dependencies]" in (project / "pyproject.toml").read_text()


def test_import_of_a_missing_version_names_the_fix_in_the_kernels_table(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    """`kernlock add` cannot run before the import, so the fix is named where it can be made."""
    (project / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{catalog.activation}" = 99\n')
    result = run_cli("import", "--project", str(project), env=user_env)
    assert_clean_error(result, "v99", f'"{catalog.activation}" = 2` in [tool.kernels.dependencies]', "kernlock import")
    assert "kernlock add" not in result.stderr
    assert not (project / "kernels.lock").exists()


def test_import_of_a_json_lock_naming_a_kernel_twice_keeps_the_first(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(project, "", [CPU_ENV])
    v1 = catalog.repo(catalog.activation).head("v1")
    entries = [{"dependency": {"repo-id": catalog.activation, "version": v}, "lock": {"commit": v1}} for v in (1, 2)]
    (project / "kernels.lock").write_text(json.dumps(entries))  # e.g. a merge that kept both sides
    result = run_cli("import", "--project", str(project), env=user_env)
    assert result.returncode == 0, result.stderr
    assert f"kept {catalog.activation} v1 {v1[:12]}" in result.stdout
    assert f'"{catalog.activation}" = "v1"' in (project / "pyproject.toml").read_text()
    assert [k.commit for k in lockfile.read(project / "kernels.lock").kernels] == [v1]


def test_import_refuses_a_kernels_table_naming_a_repo_twice(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    upper = catalog.activation.upper()
    text = f'[tool.kernels.dependencies]\n"{catalog.activation}" = 1\n"{upper}" = 2\n'
    (project / "pyproject.toml").write_text(text)
    assert_clean_error(run_cli("import", "--project", str(project), env=user_env), "twice", "keep one")
    assert (project / "pyproject.toml").read_text() == text and not (project / "kernels.lock").exists()


@pytest.mark.slow
def test_import_resumes_after_an_interruption_left_the_moved_copy(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    """An import stopped after copying the JSON lock to kernels.lock.json (and before anything else) runs again."""
    (project / "pyproject.toml").write_text(
        f'[tool.kernels.dependencies]\n"{catalog.activation}" = 1\n\n[tool.kernlock]\nenvironments = ["{CPU_ENV}"]\n'
    )
    json_lock = kernels_lock(project, user_env)
    (project / "kernels.lock.json").write_text(json_lock)  # what the interrupted run had written
    result = run_cli("import", "--project", str(project), env=user_env)
    assert result.returncode == 0, result.stderr
    assert (project / "kernels.lock.json").read_text() == json_lock
    commit = json.loads(json_lock)[0]["lock"]["commit"]
    assert [k.commit for k in lockfile.read(project / "kernels.lock").kernels] == [commit]


# -- export for the kernels loader ---------------------------------------------------------------------------

PACKAGE = '''\
"""A package that ships a kernels lock and loads its kernel through the kernels library's own locked API."""
from pathlib import Path

import kernels

LOCK = Path(__file__).with_name("kernels.lock")


def load(repo):
    return kernels.load_kernel(repo, lockfile=LOCK), kernels.get_locked_kernel(repo, lockfile=LOCK)
'''


@pytest.mark.slow
def test_exported_lock_loads_through_load_kernel_and_get_locked_kernel(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, tmp_path: Path
):
    write_pyproject(project, f'"{catalog.activation}" = "v2"\n"{catalog.dependent}" = "v2"\n', [CPU_ENV])
    for command in ("lock", "sync"):
        assert run_cli(command, "--project", str(project), env=user_env).returncode == 0
    site = tmp_path / "site"  # an installed package: its code, the lock it ships, its dist-info
    (site / "mypkg").mkdir(parents=True)
    (site / "mypkg" / "__init__.py").write_text(PACKAGE)
    shipped = site / "mypkg" / "kernels.lock"
    out = run_cli("export", "--format", "kernels", "-o", str(shipped), env=user_env, cwd=project)
    assert out.returncode == 0 and "2 kernels" in out.stdout, out.stderr
    (site / "mypkg-0.1.dist-info").mkdir()
    (site / "mypkg-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (site / "mypkg-0.1.dist-info" / "kernels.lock").write_text((site / "mypkg" / "kernels.lock").read_text())
    lock = lockfile.read(project / "kernels.lock")
    exported = json.loads((site / "mypkg" / "kernels.lock").read_text())
    assert [(e["dependency"], e["lock"]["commit"]) for e in exported] == [
        ({"repo-id": k.repo, "version": int(k.requested[1:])}, k.commit) for k in lock.kernels
    ]
    env = {**user_env, "PYTHONPATH": str(site)}
    for activate in ("", "import kernlock.activate\n"):
        report = child(
            activate
            + textwrap.dedent(f"""
            import mypkg
            by_load, by_get = mypkg.load("{catalog.dependent}")
            report(load=by_load.KERNEL_IDENTITY, get=by_get.KERNEL_IDENTITY)
            """),
            env,
            project,  # the application's folder: activation finds kernlock's kernels.lock there
        )
        entry = lock.entry_for(catalog.dependent, CPU_ENV)
        assert entry is not None
        identity = read_identity(catalog.root, catalog.dependent, entry.commit, CPU_VARIANT)
        assert report["load"] == report["get"] == identity  # the build uploaded at the locked commit


def test_export_refuses_kernlocks_own_lock_and_a_kernel_with_two_commits(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    write_pyproject(
        project,
        f'"{catalog.activation}" = [{{ rev = "v1", when = "cuda == 12.8" }}, {{ rev = "v2" }}]\n',
        [CPU_ENV, CU128],
    )
    assert run_cli("lock", "--project", str(project), env=user_env).returncode == 0
    own = (project / "kernels.lock").read_text()
    args = ("export", "--format", "kernels", "--project", str(project))
    assert_clean_error(run_cli(*args, "-o", str(project / "kernels.lock"), env=user_env), "kernlock's own lock")
    assert (project / "kernels.lock").read_text() == own
    assert_clean_error(run_cli(*args, "-o", str(project / "k.json"), env=user_env), "--environment ENV")
    assert not (project / "k.json").exists()
    one = run_cli(*args, "-o", str(project / "k.json"), "--environment", CU128, env=user_env)
    assert one.returncode == 0, one.stderr
    entry = lockfile.read(project / "kernels.lock").entry_for(catalog.activation, CU128)
    assert entry is not None
    assert json.loads((project / "k.json").read_text()) == [
        {"dependency": {"repo-id": catalog.activation, "version": 1}, "lock": {"commit": entry.commit}}
    ]
    # Refreshing an earlier export overwrites it; any other file (pyproject.toml, code) is never overwritten.
    again = run_cli(*args, "-o", str(project / "k.json"), "--environment", CPU_ENV, env=user_env)
    assert again.returncode == 0, again.stderr
    pyproject = (project / "pyproject.toml").read_text()
    for victim, text in ((project / "pyproject.toml", pyproject), (project / "train.py", "import torch\n")):
        victim.write_text(text)
        result = run_cli(*args, "-o", str(victim), "--environment", CPU_ENV, env=user_env)
        assert_clean_error(result, "not a kernels lock", "another path")
        assert victim.read_text() == text
    # A stale lock is not exported: the package would ship a lock without the kernel pyproject.toml asks for.
    exported = (project / "k.json").read_text()
    (project / "pyproject.toml").write_text(pyproject + f'"{catalog.universal}" = "v1"\n')
    result = run_cli(*args, "-o", str(project / "k.json"), "--environment", CPU_ENV, env=user_env)
    assert_clean_error(result, "kernels.lock is stale", "`kernlock lock`")
    assert (project / "k.json").read_text() == exported
    with pytest.raises(LockError) as stale:
        api.export(project, "kernels", project / "k.json", CPU_ENV)
    assert stale.value.fix == "run `kernlock lock`, then export again" and stale.value.why


# -- outdated, lock --upgrade / --dry-run --------------------------------------------------------------------


def outdated(project: Path, env: dict[str, str]) -> dict:
    result = run_cli("outdated", "--json", "--project", str(project), env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    return {row["repo"]: row for row in report["kernels"]} | {"upgrade": report["upgrade"]}


def test_outdated_says_why_newer_versions_were_skipped_and_what_to_paste_to_move(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    """A newer version without a build for every environment is not silently passed over (issue 42): `outdated`
    names it and what it lacks, and prints the per-environment pins that move to it; pasted, they lock."""
    x = own_repo(catalog, {"v1": [CPU_VARIANT, CU128], "v2": [CPU_VARIANT]})
    write_pyproject(project, f'"{x}" = "v1"\n', [CPU_ENV, CU128])
    assert run_cli("lock", "--project", str(project), env=user_env).returncode == 0
    rows = outdated(project, user_env)
    assert rows[x]["skipped_versions"] == [f"v2 lacks {CU128}"] and rows[x]["newest_version"] == "v1"
    text = run_cli("outdated", "--project", str(project), env=user_env).stdout
    assert f"newer versions skipped: v2 lacks {CU128}" in text, text
    pins = text[text.index(f'"{x}" = [') : text.index("]", text.index(f'"{x}" = [')) + 1]
    assert '{ rev = "v1", when = "cuda == 12.8" }' in pins and '{ rev = "v2" }' in pins, text
    write_pyproject(project, textwrap.dedent(pins) + "\n", [CPU_ENV, CU128])
    locked = run_cli("lock", "--project", str(project), env=user_env)
    assert locked.returncode == 0, locked.stderr
    lock = lockfile.read(project / "kernels.lock")
    assert {env: lock.entry_for(x, env).requested for env in (CPU_ENV, CU128)} == {CPU_ENV: "v2", CU128: "v1"}
    again = run_cli("outdated", "--project", str(project), env=user_env).stdout
    assert '{ rev = "v2" }' not in again  # pinned per environment already: no fix offered again


@pytest.mark.slow
def test_outdated_before_and_after_a_branch_moves_and_a_new_version_appears(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
):
    x = own_repo(catalog, {"v1": [CPU_VARIANT, CU128], "v2": [CPU_VARIANT, CU128]})
    y = own_repo(catalog, {"v1": [CPU_VARIANT, CU128]})
    write_pyproject(project, f'"{x}" = "v2"\n"{y}" = "v1"\n', [CPU_ENV])
    assert run_cli("lock", "--project", str(project), env=user_env).returncode == 0
    locked = lockfile.read(project / "kernels.lock")
    x_commit = locked.entries(x)[0].commit

    hub.log.clear()
    rows = outdated(project, user_env)
    assert len(hub.log) == 2 == hub.log.count(contains="/refs")  # one request per kernel, nothing moved
    for repo, version in ((x, "v2"), (y, "v1")):
        assert rows[repo]["moved"] is None and rows[repo]["newest_version"] == version
        assert not rows[repo]["outdated"] and rows[repo]["upgrade"] is None
    assert rows["upgrade"]["changes"] == []
    text = run_cli("outdated", "--project", str(project), env=user_env).stdout
    assert f"{x} v2 {x_commit[:12]}: v2 has not moved" in text and "would change nothing" in text

    catalog.repo(x).move_branch("v2")
    head = catalog.repo(x).move_branch("v2")
    catalog.repo(y).add_branch("v2", [CPU_VARIANT, CU128])
    rows = outdated(project, user_env)
    assert rows[x]["moved"]["head"] == head and rows[x]["moved"]["commits"] == 2 and rows[x]["moved"]["date"]
    assert rows[x]["upgrade"]["change"] == "updated" and rows[x]["upgrade"]["new"]["commit"] == head
    assert rows[y]["moved"] is None and rows[y]["newest_version"] == "v2" and rows[y]["newer_version"]
    assert rows[y]["outdated"] and rows[y]["upgrade"] is None  # v1 stays v1: a new version needs an edit
    text = run_cli("outdated", "--project", str(project), env=user_env).stdout
    assert f"v2 moved 2 commits to {head[:12]}" in text
    assert "newer version with builds for every environment: v2" in text
    assert f"Updated {x} v2 {x_commit[:8]} -> {head[:8]}" in text

    before = (project / "kernels.lock").read_bytes()
    dry = run_cli("lock", "--upgrade", "--dry-run", "--project", str(project), env=user_env)
    assert dry.returncode == 0, dry.stderr
    assert "would write kernels.lock" in dry.stdout and f"Updated {x} v2 {x_commit[:8]} -> {head[:8]}" in dry.stdout
    assert (project / "kernels.lock").read_bytes() == before
    up = run_cli("lock", "--upgrade-kernel", x, "--project", str(project), env=user_env)
    assert up.returncode == 0, up.stderr
    changes = up.stdout.split("not synced here yet")[0]  # the change lines; then what this machine lacks
    assert f"Updated {x} v2 {x_commit[:8]} -> {head[:8]}" in changes and y not in changes
    assert lockfile.read(project / "kernels.lock").entries(x)[0].commit == head

    write_pyproject(project, f'"{x}" = "v2"\n"{y}" = "v2"\n', [CPU_ENV, CU128])
    grown = run_cli("lock", "--project", str(project), env=user_env)
    assert grown.returncode == 0, grown.stderr
    assert f"Added environment {CU128}" in grown.stdout
    assert f"+ {CU128}: {CU128}" in grown.stdout  # x gains the environment, on the variant it loads there
    assert f"Updated {y} v1 " in grown.stdout and f"-> v2 {catalog.repo(y).head('v2')[:8]}" in grown.stdout

    catalog.repo(x).move_branch("v2", remove=[CU128], add=["torch-cuda"])  # the CUDA build becomes a noarch one
    swapped = run_cli("lock", "--upgrade-kernel", x, "--project", str(project), env=user_env)
    assert swapped.returncode == 0, swapped.stderr
    changes = swapped.stdout.split("not synced here yet")[0]
    assert f"~ {CU128}: {CU128} -> torch-cuda" in changes and y not in changes
