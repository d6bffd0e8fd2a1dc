"""A damaged or conflicted kernels.lock never moves a pin (issue 22): every command that only reads the lock
refuses it, and `kernlock lock` (`add`, `remove`) repairs it, keeping every pin it can still read and printing a
line for every pin that moves. Each test below asserts that no commit moves unless a printed line says so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from click.testing import CliRunner, Result
from envs import clean_env
from projects import CPU_ENV, own_repo, write_pyproject

from kernlock.cli.app import main
from kernlock.lock import file as lockfile
from kernlock.testing import Catalog, HubServer, move_branch

pytestmark = pytest.mark.subprocess

FIXES = ("`kernlock lock`", "`git checkout HEAD -- kernels.lock`")


@dataclass
class Locked:
    """A project locked at the first commits of its branches; the branches moved upstream afterwards, so a lock
    resolved anew from the Hub would move every pin."""

    template: Path
    a: str
    b: str
    pins: dict[str, str]  # repo -> the locked commit
    heads: dict[str, str]  # repo -> where its branch is now

    def copy(self, where: Path) -> Path:
        shutil.copytree(self.template, where)
        return where


@pytest.fixture(scope="module")
def locked(catalog: Catalog, hub_server: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Locked:
    base = tmp_path_factory.mktemp("repair")
    a = own_repo(catalog, {"v1": [CPU_ENV], "v2": [CPU_ENV]})
    b = own_repo(catalog, {"v1": [CPU_ENV]})
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{a}" = "v1"\n"{b}" = "v1"\n', environments=[CPU_ENV])
    env = clean_env(**hub_server.env(), HF_HOME=str(base / "hf-home"), HF_HUB_CACHE=str(base / "hf-cache"))
    done = run_cli("lock", "--project", str(project), env=env)
    assert done.returncode == 0, done.stderr
    pins = commits(project)
    heads = {repo: move_branch(catalog.root, repo, "v1") for repo in (a, b)}
    return Locked(project, a, b, pins, heads)


@pytest.fixture
def project(locked: Locked, user_env: dict[str, str], tmp_path: Path) -> Path:
    """A copy of the locked project, with a user's environment pointed at the Hub."""
    return locked.copy(tmp_path / "locked")


def commits(project: Path) -> dict[str, str]:
    """repo -> the commit kernels.lock pins (the lock must pass every check)."""
    return {k.repo: k.commit for k in lockfile.read(project / "kernels.lock").kernels}


def cli(project: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--project", str(project)])


def edit(project: Path, pattern: str, new: str, count: int = 1) -> bytes:
    """Replace ``pattern`` (a regex) in kernels.lock; returns the bytes it had before."""
    path = project / "kernels.lock"
    before = path.read_bytes()
    text, n = re.subn(pattern, new, before.decode(), count=count)
    assert n == count, pattern
    path.write_text(text)
    return before


def block(text: str, repo: str) -> str:
    """The [[kernel]] block of ``repo`` (up to the next one, or the end)."""
    start = text.index(f'[[kernel]]\nrepo = "{repo}"')
    end = text.find("\n[[kernel]]\n", start + 1)
    return text[start : end + 1 if end >= 0 else len(text)]


def moved_only_where_printed(before: dict[str, str], after: dict[str, str], output: str) -> None:
    """Every pin that moved has an Added/Updated line naming its new commit; every other pin a Repaired line."""
    for repo, commit in after.items():
        if before.get(repo) == commit:
            assert f"Repaired {repo} v1 {commit[:8]}" in output, output
        else:
            assert re.search(rf"^(Added|Updated) {re.escape(repo)} .*{commit[:8]}", output, re.M), output


# -- reading commands refuse a damaged lock ------------------------------------------------------------------


def test_sync_refused_an_edited_lock_and_moved_no_pin(locked: Locked, project: Path, user_env: dict[str, str]):
    """The bug of issue 22: a plain `kernlock sync` re-locked an edited lock from the Hub (exit 0) and moved
    every pin to the branches' new heads, printing no `Updated` line."""
    before = edit(project, r"size = (\d+)", r"size = 1\1")
    done = run_cli("sync", "--project", str(project), env=user_env)
    assert_clean_error(done, "was edited after kernlock wrote it", *FIXES)
    assert (project / "kernels.lock").read_bytes() != before  # still the edited file: nothing was written
    assert "re-locked" not in done.stdout and "downloaded" not in done.stdout
    assert not (Path(user_env["HF_HUB_CACHE"])).exists() or not any(Path(user_env["HF_HUB_CACHE"]).rglob("*.py"))


@pytest.mark.binds
def test_every_command_that_reads_the_lock_refuses_it(
    locked: Locked, project: Path, user_env: dict[str, str], hub: HubServer, tmp_path: Path
):
    """sync in every mode, verify, show, outdated, export, bundle, serve, run and run-time activation: exit 1 with
    one message naming both fixes, nothing downloaded, written or run."""
    bundle = tmp_path / "site.tar"
    assert cli(project, "bundle", "-o", str(bundle)).exit_code == 0  # made while the lock was intact
    before = edit(project, r'hash = "git-sha1:[0-9a-f]{40}"', f'hash = "git-sha1:{"0" * 40}"')
    edited = (project / "kernels.lock").read_bytes()
    assert edited != before
    hub.log.clear()
    commands = [
        ["sync"],
        ["sync", "--locked"],
        ["sync", "--frozen"],
        ["sync", "--offline"],
        ["sync", "--all-environments"],
        ["sync", "--from", str(bundle)],
        ["lock", "--check"],
        ["verify"],
        ["show"],
        ["show", "--json"],
        ["outdated"],
        ["export", "--format", "kernels", "-o", str(tmp_path / "kernels.json")],
        ["bundle", "-o", str(tmp_path / "other.tar")],
    ]
    for args in commands:
        done = cli(project, *args)
        assert done.exit_code == 1, (args, done.output)
        assert done.output.startswith("error: ") and "was edited after kernlock wrote it" in done.output, args
        assert all(fix in done.output for fix in FIXES), (args, done.output)
    assert (project / "kernels.lock").read_bytes() == edited
    assert not (tmp_path / "kernels.json").exists() and not (tmp_path / "other.tar").exists()
    assert hub.log.count(contains="/resolve/") == 0  # not one file was downloaded

    for argv in (["serve", "--port", "0"], ["run", "--", sys.executable, "-c", "print('CMD ran')"]):
        done = run_cli(*argv[:1], "--project", str(project), *argv[1:], env=user_env, timeout=120)
        assert_clean_error(done, "was edited after kernlock wrote it", *FIXES)
        assert "CMD ran" not in done.stdout and "serving" not in done.stdout
    code = f"import kernlock.activate, kernels; kernels.get_kernel({locked.a!r}, version=1); print('loaded')"
    child = subprocess.run(
        [sys.executable, "-c", code], cwd=project, env=user_env, capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 1 and "loaded" not in child.stdout
    assert "was edited after kernlock wrote it" in child.stderr and all(fix in child.stderr for fix in FIXES)
    assert (project / "kernels.lock").read_bytes() == edited
    assert hub.log.count(contains="/resolve/") == 0


# -- `kernlock lock` keeps every pin it can read -------------------------------------------------------------

EDITS = {
    "hash": (r'hash = "git-sha1:[0-9a-f]{40}"', f'hash = "git-sha1:{"0" * 40}"'),
    "size": (r"size = (\d+)", r"size = 1\1"),
    "path": (r'path = "__init__.py"', 'path = "__init__2.py"'),
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_lock_keeps_every_pin_of_an_edited_lock(locked: Locked, project: Path, field: str):
    original = edit(project, *EDITS[field])
    edited = (project / "kernels.lock").read_bytes()
    check = cli(project, "lock", "--check")
    assert check.exit_code == 1 and "was edited after kernlock wrote it" in check.output
    dry = cli(project, "lock", "--dry-run")
    assert dry.exit_code == 0 and "would write kernels.lock" in dry.output, dry.output
    assert (project / "kernels.lock").read_bytes() == edited  # neither wrote anything

    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert "kernels.lock failed its checks: it was edited after kernlock wrote it" in done.output
    assert "2 pins could still be read" in done.output
    moved_only_where_printed(locked.pins, commits(project), done.output)
    assert not re.search(r"^(Added|Updated|Removed) ", done.output, re.M), done.output
    assert (project / "kernels.lock").read_bytes() == original  # every pin kept; files read again from the Hub
    assert cli(project, "lock", "--check").exit_code == 0


def test_an_edited_commit_the_hub_lacks_is_an_error(locked: Locked, project: Path):
    pin = locked.pins[locked.a]
    edit(project, pin, ("1" if pin[0] != "1" else "2") + pin[1:])
    edited = (project / "kernels.lock").read_bytes()
    done = cli(project, "lock")
    assert done.exit_code == 1, done.output
    assert "which the Hub does not have: the pin may have been edited by hand" in done.output
    assert "`git checkout HEAD -- kernels.lock`" in done.output
    assert f"`kernlock lock --upgrade-kernel {locked.a}`" in done.output
    assert (project / "kernels.lock").read_bytes() == edited
    upgraded = cli(project, "lock", "--upgrade-kernel", locked.a)  # the fix it names: resolved anew, and said
    assert upgraded.exit_code == 0, upgraded.output
    assert re.search(rf"^Updated {locked.a} v1 [0-9a-f]{{8}} -> {locked.heads[locked.a][:8]}$", upgraded.output, re.M)
    assert commits(project) == {locked.a: locked.heads[locked.a], locked.b: locked.pins[locked.b]}


def test_an_edit_past_the_short_sha_is_told_apart_from_the_new_commit(locked: Locked, project: Path):
    """A pin edited in its last digit shares its first 8 with the commit the upgrade moves to: the line shows as
    many digits as tell them apart (issue 42: `Updated ... v1 d1c05426 -> d1c05426`)."""
    pin, head = locked.pins[locked.a], locked.heads[locked.a]
    edited = head[:-1] + ("0" if head[-1] != "0" else "1")  # a commit the Hub lacks, one digit from the new head
    edit(project, pin, edited)
    upgraded = cli(project, "lock", "--upgrade-kernel", locked.a)
    assert upgraded.exit_code == 0, upgraded.output
    found = re.search(rf"^Updated {locked.a} v1 ([0-9a-f]+) -> ([0-9a-f]+)$", upgraded.output, re.M)
    assert found is not None, upgraded.output
    old, new = found.groups()
    assert old != new and edited.startswith(old) and head.startswith(new) and len(old) >= 8, upgraded.output


def test_a_deleted_entry_is_resolved_anew_and_said(locked: Locked, project: Path):
    text = (project / "kernels.lock").read_text()
    (project / "kernels.lock").write_text(text.replace(block(text, locked.b), ""))
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert "1 pin could still be read" in done.output
    after = commits(project)
    assert after == {locked.a: locked.pins[locked.a], locked.b: locked.heads[locked.b]}
    moved_only_where_printed(locked.pins, after, done.output)
    assert f"Added {locked.b} v1 {locked.heads[locked.b][:8]}" in done.output


def test_a_duplicated_entry_is_kept_once(locked: Locked, project: Path):
    path = project / "kernels.lock"
    original = path.read_text()
    path.write_text(original + block(original, locked.a))
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert "two entries of" in done.output and "lock the same commit" in done.output
    assert path.read_text() == original

    # A duplicate at another commit of the same branch: the newer one on the branch wins, and the choice is said.
    newer = block(original, locked.a).replace(locked.pins[locked.a], locked.heads[locked.a])
    path.write_text(original + newer)
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    kept = f"kept {locked.heads[locked.a][:8]} (line "
    assert f"chose: {locked.a} v1: " in done.output and kept in done.output and "the newer commit on v1" in done.output
    assert commits(project) == {locked.a: locked.heads[locked.a], locked.b: locked.pins[locked.b]}


def test_a_broken_toml_line_keeps_the_pins_around_it(locked: Locked, project: Path):
    path = project / "kernels.lock"
    original = path.read_text()
    # A files line of a's entry loses a brace: its block is read line by line, and its pin is kept.
    path.write_text(original.replace('"},\n', '",\n', 1))
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert "it is not valid TOML" in done.output and "2 pins could still be read" in done.output
    assert path.read_text() == original
    # b's commit line itself is broken: only that entry is resolved anew, and said.
    at = original.index(f'commit = "{locked.pins[locked.b]}"')
    path.write_text(original[:at] + original[at:].replace(f'"{locked.pins[locked.b]}"', locked.pins[locked.b], 1))
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert "1 pin could still be read; 1 entry could not be read (resolved anew):" in done.output
    line = original[:at].count("\n") + 1
    assert re.search(rf"line \d+ \(\[\[kernel\]\] #\d\) \({locked.b}\)", done.output), (line, done.output)
    after = commits(project)
    assert after == {locked.a: locked.pins[locked.a], locked.b: locked.heads[locked.b]}
    assert f"Added {locked.b} v1 {locked.heads[locked.b][:8]} (resolved anew: its entry could not be read)" in (
        done.output
    )
    moved_only_where_printed(locked.pins, after, done.output)


def test_add_and_remove_repair_a_damaged_lock_too(locked: Locked, project: Path, catalog: Catalog):
    edit(project, *EDITS["size"])
    done = cli(project, "add", f"{catalog.universal}@v1", "--no-sync")
    assert done.exit_code == 0, done.output
    assert f"Repaired {locked.a} v1 {locked.pins[locked.a][:8]}" in done.output
    assert f"Repaired {locked.b} v1 {locked.pins[locked.b][:8]}" in done.output
    assert re.search(rf"^Added {catalog.universal} v1 [0-9a-f]{{8}}$", done.output, re.M), done.output
    assert {k: v for k, v in commits(project).items() if k != catalog.universal} == locked.pins

    edit(project, *EDITS["size"])
    done = cli(project, "remove", locked.b)
    assert done.exit_code == 0, done.output
    assert f"Repaired {locked.a} v1 {locked.pins[locked.a][:8]}" in done.output
    assert f"Removed {locked.b} v1 {locked.pins[locked.b][:8]}" in done.output
    assert commits(project)[locked.a] == locked.pins[locked.a] and locked.b not in commits(project)


# -- merge conflicts -------------------------------------------------------------------------------------------


def git(where: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com", "-c", "commit.gpgsign=false", *args],
        cwd=where,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )
    assert not check or done.returncode == 0, (args, done.stdout, done.stderr)
    return done


@pytest.mark.parametrize("style", ["merge", "diff3"])
def test_conflict_markers_of_a_real_merge_keep_both_sides_pins(
    catalog: Catalog, user_env: dict[str, str], tmp_path: Path, style: str
):
    """Two branches lock x at different commits of v1, and y at v1 (feature) and v2 (main, whose pyproject.toml
    asks for v2); `git merge` leaves conflict markers in kernels.lock. Reading commands refuse it, naming fixes
    that work on an unmerged path; `kernlock lock` keeps the newer x and main's y, printing each choice. In both
    of git's conflict styles (diff3 adds the merge base between the sides)."""
    x = own_repo(catalog, {"v1": [CPU_ENV]})
    y = own_repo(catalog, {"v1": [CPU_ENV], "v2": [CPU_ENV]})
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, f'"{x}" = "v1"\n"{y}" = "v1"\n', environments=[CPU_ENV])
    git(project, "init", "-q", "-b", "main")
    git(project, "config", "merge.conflictStyle", style)
    assert cli(project, "lock").exit_code == 0
    git(project, "add", "-A")
    git(project, "commit", "-qm", "lock")

    git(project, "checkout", "-qb", "feature")  # a teammate upgrades x and y after new uploads
    move_branch(catalog.root, x, "v1"), move_branch(catalog.root, y, "v1")
    assert cli(project, "lock", "--upgrade").exit_code == 0
    feature = commits(project)
    git(project, "commit", "-qam", "upgrade")

    git(project, "checkout", "-q", "main")  # meanwhile main upgrades x again and moves y to v2
    newest_x = move_branch(catalog.root, x, "v1")
    write_pyproject(project, f'"{x}" = "v1"\n"{y}" = "v2"\n', environments=[CPU_ENV])
    assert cli(project, "lock", "--upgrade-kernel", x).exit_code == 0
    main_pins = commits(project)
    assert main_pins[x] == newest_x != feature[x] and main_pins[y] != feature[y]
    git(project, "commit", "-qam", "x again, y v2")

    git(project, "checkout", "-q", "feature")
    merge = git(project, "merge", "main", check=False)
    assert merge.returncode != 0 and "CONFLICT (content): Merge conflict in kernels.lock" in merge.stdout
    conflicted = (project / "kernels.lock").read_text()
    assert "<<<<<<< HEAD\n" in conflicted and ">>>>>>> main\n" in conflicted
    assert ("\n||||||| " in conflicted) == (style == "diff3")

    sync = run_cli("sync", "--project", str(project), env=user_env)
    assert_clean_error(sync, "it holds git merge-conflict markers", *FIXES)
    assert (project / "kernels.lock").read_text() == conflicted
    # The advice the issue found failing, and the one the message gives: it works on the unmerged path.
    assert "unmerged" in git(project, "checkout", "kernels.lock", check=False).stderr
    git(project, "checkout", "HEAD", "--", "kernels.lock")
    assert commits(project) == feature
    git(project, "merge", "--abort")
    assert git(project, "merge", "main", check=False).returncode != 0

    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert "kernels.lock failed its checks: it holds git merge-conflict markers." in done.output
    after = commits(project)
    assert after == {x: main_pins[x], y: main_pins[y]}
    assert re.search(
        rf"^chose: {x} v1: ours \(HEAD\) locks {feature[x][:8]}, theirs \(main\) {main_pins[x][:8]}; kept "
        rf"{main_pins[x][:8]} \(theirs \(main\)\), the newer commit on v1$",
        done.output,
        re.M,
    ), done.output
    assert re.search(
        rf"^chose: {y}: ours \(HEAD\) v1 {feature[y][:8]}, theirs \(main\) v2 {main_pins[y][:8]}; kept v2, the "
        "revision pyproject.toml asks for$",
        done.output,
        re.M,
    ), done.output
    for repo, requested in ((x, "v1"), (y, "v2")):
        assert f"Repaired {repo} {requested} {after[repo][:8]}" in done.output
    assert not re.search(r"^(Added|Updated|Removed) ", done.output, re.M), done.output
    assert "`git add kernels.lock` ends the merge" in done.output

    git(project, "add", "kernels.lock")
    git(project, "commit", "-q", "--no-edit")
    assert cli(project, "lock", "--check").exit_code == 0
    assert (project / "kernels.lock").read_bytes() == git(project, "show", "main:kernels.lock").stdout.encode()


# -- a kept pin must be on the revision it claims (issue 29, item 4) ---------------------------------------------


def head(catalog: Catalog, repo: str, rev: str) -> str:
    """The commit ``rev`` (a branch, tag or ``rev^``) names in the catalog's git repository."""
    return git(catalog.repo(repo).path, "rev-parse", f"{rev}^{{commit}}").stdout.strip()


def locked_at(project: Path, repo: str, rev: str, env: str = CPU_ENV) -> str:
    write_pyproject(project, f'"{repo}" = "{rev}"\n', environments=[env])
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    return commits(project)[repo]


def test_a_pin_edited_to_a_commit_of_another_branch_is_resolved_anew(
    catalog: Catalog, user_env: dict[str, str], hub: HubServer, tmp_path: Path
):
    """The bug: flash-attn2 v4's commit replaced by one that exists on the Hub, but only on v3. `lock` printed
    `Repaired ... v4 <v3 commit> (pin kept ...)`, `show` reported it as v4 and `outdated` said `v4 was rewritten`.
    Now the pin is resolved anew, and a line says it was not on v4."""
    project = tmp_path / "project"
    project.mkdir()
    repo = catalog.flash_attn2
    v4, v3 = locked_at(project, repo, "v4"), head(catalog, repo, "v3")
    assert v4 == head(catalog, repo, "v4") and v3 != v4
    edit(project, v4, v3, count=1)
    hub.log.clear()
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert re.search(
        rf"^Re-resolved {repo} v4: the pin {v3[:8]} is not on v4 \(the lock was edited\?\) -> {v4[:8]}$",
        done.output,
        re.M,
    ), done.output
    assert f"Repaired {repo}" not in done.output and "Updated" not in done.output, done.output
    assert commits(project) == {repo: v4}
    # What the check cost: the refs of the repo and v4's history (one page here); no refs request for nothing else.
    assert hub.log.count(contains=f"/api/kernels/{repo}/refs") == 1
    assert hub.log.count(contains=f"/api/kernels/{repo}/commits/") == 1
    assert cli(project, "lock", "--check").exit_code == 0
    show = cli(project, "show")
    assert show.exit_code == 0 and v4[:12] in show.output and v3[:12] not in show.output, show.output
    outdated = cli(project, "outdated")
    assert outdated.exit_code == 0 and "rewritten" not in outdated.output, outdated.output


def test_a_pin_on_its_branch_is_kept_at_the_cost_of_its_refs(
    locked: Locked, project: Path, hub: HubServer, catalog: Catalog
):
    """A repair keeps a pin that is on its branch, even far behind its head (the branches of `locked` moved on):
    one refs request per repo and one page of history; a pin at its branch's head costs the refs alone."""
    at_head = own_repo(catalog, {"v1": [CPU_ENV]})
    path = project / "kernels.lock"
    write_pyproject(project, f'"{locked.a}" = "v1"\n"{locked.b}" = "v1"\n"{at_head}" = "v1"\n', [CPU_ENV])
    assert cli(project, "lock").exit_code == 0
    intact = path.read_bytes()
    edit(project, *EDITS["size"])
    hub.log.clear()
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert path.read_bytes() == intact
    for repo in (locked.a, locked.b, at_head):
        assert f"Repaired {repo} v1" in done.output, done.output
        assert hub.log.count(contains=f"/api/kernels/{repo}/refs") == 1
    assert hub.log.count(contains=f"/api/kernels/{at_head}/commits/") == 0
    assert hub.log.count(contains="/commits/") == 2
    hub.log.clear()  # an intact lock asks nothing
    assert cli(project, "lock").exit_code == 0 and len(hub.log) == 0


def test_a_tag_pin_must_be_the_tags_commit(catalog: Catalog, user_env: dict[str, str], tmp_path: Path):
    """A tag names one commit: a pin at the commit before it (on the tag's history) is not the tag's."""
    project = tmp_path / "project"
    project.mkdir()
    repo, tag = catalog.light_tag
    tagged = locked_at(project, repo, tag)
    before = head(catalog, repo, f"{tag}^")
    edit(project, tagged, before)
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert f"Re-resolved {repo} {tag}: the pin {before[:8]} is not on {tag} (the lock was edited?) -> {tagged[:8]}" in (
        done.output
    )
    assert commits(project) == {repo: tagged}


def test_a_sha_pin_is_kept_without_asking_the_hub_where_it_is(
    catalog: Catalog, user_env: dict[str, str], hub: HubServer, tmp_path: Path
):
    """A revision that is a commit sha is trivially on itself: no refs, no history."""
    project = tmp_path / "project"
    project.mkdir()
    repo = catalog.flash_attn2
    v3 = head(catalog, repo, "v3")
    assert locked_at(project, repo, v3) == v3
    original = edit(project, *EDITS["size"])
    hub.log.clear()
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    assert f"Repaired {repo} {v3} {v3[:8]}" in done.output
    assert (project / "kernels.lock").read_bytes() == original
    assert hub.log.count(contains="/refs") == 0 and hub.log.count(contains="/commits/") == 0


def conflicted(text: str, repo: str, ours: str, theirs: str) -> str:
    """``text`` with ``repo``'s entry as a merge conflict: its commit ``ours`` on HEAD's side, ``theirs`` on main's."""
    entry = block(text, repo)
    pin = re.search(r'^commit = "([0-9a-f]{40})"$', entry, re.M)
    assert pin is not None
    sides = [entry.replace(pin.group(1), commit) for commit in (ours, theirs)]
    return text.replace(entry, f"<<<<<<< HEAD\n{sides[0]}=======\n{sides[1]}>>>>>>> main\n")


def relock(project: Path, text: str) -> str:
    """What `kernlock lock` prints after kernels.lock was given ``text`` (it must succeed)."""
    (project / "kernels.lock").write_text(text)
    done = cli(project, "lock")
    assert done.exit_code == 0, done.output
    return done.output


def test_a_conflict_side_whose_pin_is_not_on_its_branch_loses(
    catalog: Catalog, user_env: dict[str, str], tmp_path: Path
):
    """One side of a merge pins v4 at a commit of v3: the other side's pin wins, and the choice says why; when
    neither side's pin is on v4, v4 is resolved anew and said."""
    project = tmp_path / "project"
    project.mkdir()
    repo = catalog.flash_attn2
    v4, v3, v2 = locked_at(project, repo, "v4"), head(catalog, repo, "v3"), head(catalog, repo, "v2")
    original = (project / "kernels.lock").read_text()
    said = relock(project, conflicted(original, repo, v3, v4))
    chose = f"chose: {repo} v4: ours (HEAD) locks {v3[:8]}, theirs (main) {v4[:8]}; kept {v4[:8]} (theirs (main)), "
    assert f"\n{chose}{v3[:8]} is not on v4\n" in said and f"Repaired {repo} v4 {v4[:8]}" in said, said
    assert (project / "kernels.lock").read_text() == original

    said = relock(project, conflicted(original, repo, v3, v2))
    pins = f"the pins {v3[:8]} (ours (HEAD)) and {v2[:8]} (theirs (main)) are not on v4"
    assert f"\nRe-resolved {repo} v4: {pins} (the lock was edited?) -> {v4[:8]}\n" in said and "chose:" not in said
    assert (project / "kernels.lock").read_text() == original


def test_a_pin_whose_branch_is_gone_is_not_kept(catalog: Catalog, user_env: dict[str, str], tmp_path: Path):
    """A branch deleted on the Hub holds no pin: the repair fails as resolving it would, and writes nothing."""
    project = tmp_path / "project"
    project.mkdir()
    repo = own_repo(catalog, {"v1": [CPU_ENV], "v2": [CPU_ENV]})
    locked_at(project, repo, "v1")
    git(catalog.repo(repo).path, "branch", "-D", "v1")
    edit(project, *EDITS["size"])
    edited = (project / "kernels.lock").read_bytes()
    done = cli(project, "lock")
    assert done.exit_code == 1 and f"{repo} has no revision 'v1'" in done.output, done.output
    assert (project / "kernels.lock").read_bytes() == edited
