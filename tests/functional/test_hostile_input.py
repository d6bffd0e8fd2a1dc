"""Hostile and careless input: a kernels.lock from a pull request, a broken pyproject, a command in a sub-folder.

Nothing kernlock reads may make it write outside its cache or project, or end in a traceback: every case is a
clear `error:` line, exit 1 (2 for usage errors), nothing written. Hostile paths point into the sentinel tree
(tests/conftest.py), which every test checks is untouched.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from projects import CPU_ENV, write_pyproject

from kernlock import api
from kernlock.cli.app import main
from kernlock.errors import LockError
from kernlock.lock import file as lockfile
from kernlock.lock.schema import LOCK_VERSION
from kernlock.testing import Catalog, HubServer
from kernlock.util import hfenv, names

ACTIVATION = "kernels-community/activation"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI in this process; an exception that escapes the error handler is re-raised (a traceback)."""
    runner = CliRunner()
    if cwd is None:
        result = runner.invoke(main, list(args))
    else:
        with _chdir(cwd):
            result = runner.invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


class _chdir:
    def __init__(self, path: Path) -> None:
        self.path, self.old = path, Path.cwd()

    def __enter__(self) -> None:
        import os

        os.chdir(self.path)

    def __exit__(self, *exc: object) -> None:
        import os

        os.chdir(self.old)


def rehash(text: str) -> str:
    """Recompute the content-hash, as an attacker (or a careless tool) would after editing the lock."""
    return re.sub(r'content-hash = "[^"]*"', f'content-hash = "{lockfile.content_hash(text)}"', text)


@pytest.fixture
def synced(catalog: Catalog, user_env: dict[str, str], project: Path) -> Path:
    """A project with activation v1 locked and synced for this machine."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    api.lock(project)
    api.sync(project, progress=False)
    return project


# -- a hostile kernels.lock ------------------------------------------------------------------------------------

VARIANT = 'name = "torch213-cxx11-cpu-x86_64-linux"'


def _first(pattern: str, replacement: str) -> Callable[[str, Path], str]:
    def edit(text: str, outside: Path) -> str:
        value = replacement.replace("OUTSIDE", str(outside))
        new = re.sub(pattern, lambda _: value, text, count=1)
        assert new != text, pattern
        return new

    return edit


def _duplicate_entry(text: str, outside: Path) -> str:
    head, _, entry = text.partition("\n[[kernel]]\n")
    other = re.sub(r'commit = "[0-9a-f]{40}"', f'commit = "{"e" * 40}"', entry, count=1)
    return f"{head}\n[[kernel]]\n{entry}\n[[kernel]]\n{other}"


def _duplicate_file(text: str, outside: Path) -> str:
    line = next(line for line in text.splitlines() if line.strip().startswith("{path = "))
    return text.replace(line, f"{line}\n{line}", 1)


MALICIOUS_LOCKS = {
    "variant name is an absolute path": (_first(VARIANT, 'name = "OUTSIDE/v"'), "variant name"),
    "variant name climbs with ..": (_first(VARIANT, 'name = "../../../../../outside"'), "variant name"),
    "variant outside the loader grammar": (_first(VARIANT, 'name = "torch999-bogus"'), "torch999-bogus"),
    "variant this environment cannot load": (_first(VARIANT, 'name = "torch-cuda"'), "does not load"),
    "ref is an absolute path": (_first(r'ref = "v1"', 'ref = "OUTSIDE"'), "branch or tag"),
    "commit is not a sha": (_first(r'commit = "[0-9a-f]{40}"', 'commit = "OUTSIDE"'), "40-hex"),
    "repo climbs with ..": (_first(r'repo = "[^"]+"', 'repo = "../outside"'), "not a repo id"),
    "repo with --": (_first(r'repo = "[^"]+"', 'repo = "kernels--community/x"'), "not a repo id"),
    "repo with three parts": (_first(r'repo = "[^"]+"', 'repo = "a/b/c"'), "not a repo id"),
    "file path climbs with ..": (_first(r'path = "__init__.py"', 'path = "../../../../outside/x.py"'), "path"),
    "file path is absolute": (_first(r'path = "__init__.py"', 'path = "OUTSIDE/x.py"'), "path"),
    "file path with ./": (_first(r'path = "__init__.py"', 'path = "./__init__.py"'), "path"),
    "file path with a NUL byte": (_first(r'path = "__init__.py"', r'path = "__init__\u0000.py"'), "path"),
    "file path is empty": (_first(r'path = "__init__.py"', 'path = ""'), "path"),
    "file path with a backslash": (_first(r'path = "__init__.py"', r'path = "a\\__init__.py"'), "path"),
    "file path in __pycache__": (_first(r'path = "__init__.py"', 'path = "__pycache__/x.pyc"'), "__pycache__"),
    "size is a boolean": (_first(r"size = \d+", "size = true"), "size"),
    "size is negative": (_first(r"size = \d+", "size = -1"), "size"),
    "size is huge": (_first(r"size = \d+", "size = 1125899906842624"), "size"),
    "size is a float": (_first(r"size = \d+", "size = 1.5"), "size"),
    "unknown hash algorithm": (_first(r'hash = "git-sha1:', 'hash = "md5:'), "hash"),
    "the same file twice": (_duplicate_file, "twice"),
    "conflicting duplicate entries": (_duplicate_entry, "two entries"),
    "environment with a typo": (
        lambda text, outside: text.replace(CPU_ENV, CPU_ENV + "x"),
        "did you mean",
    ),
    "unknown key in an entry": (_first(r'ref = "v1"', 'ref = "v1"\nscript = "rm -rf /"'), "unknown key"),
    # a regex `$` also matches before a final newline: each value with one appended must still be refused
    "commit ends in a newline": (_first(r'commit = "[0-9a-f]{40}"', f'commit = "{"e" * 40}\\n"'), "40-hex"),
    "repo ends in a newline": (_first(r'repo = "[^"]+"', 'repo = "kernels-community/activation\\n"'), "repo id"),
    "ref ends in a newline": (_first(r'ref = "v1"', 'ref = "v1\\n"'), "branch or tag"),
    "variant name ends in a newline": (_first(VARIANT, f'{VARIANT[:-1]}\\n"'), "variant name"),
    "file path ends in a newline": (_first(r'path = "__init__.py"', 'path = "__init__.py\\n"'), "path"),
    "hash ends in a newline": (_first(r'hash = "git-sha1:[0-9a-f]{40}"', f'hash = "git-sha1:{"0" * 40}\\n"'), "hash"),
}


NAME_CHECKS = {
    names.check_repo: "kernels-community/activation",
    names.check_commit: "e" * 40,
    names.check_ref: "v1",
    names.check_path: "torch_ext/__init__.py",
    names.check_hash: "git-sha1:" + "0" * 40,
    names.check_variant_folder: "torch213-cxx11-cpu-x86_64-linux",
}


@pytest.mark.parametrize("check", NAME_CHECKS, ids=lambda check: check.__name__)
def test_a_name_with_a_line_break_is_refused(check: Callable[[object], object]):
    """Each checked name holds no line break: not at its end (where a regex `$` would still match), nor inside."""
    valid = NAME_CHECKS[check]
    assert check(valid) == valid
    for bad in (valid + "\n", valid + "\r\n", "\n" + valid):
        with pytest.raises(ValueError):
            check(bad)


@pytest.mark.parametrize("case", sorted(MALICIOUS_LOCKS))
def test_malicious_lock_is_refused_before_anything_is_written(
    case: str, synced: Path, user_env: dict[str, str], outside: Path
):
    edit, needle = MALICIOUS_LOCKS[case]
    path = synced / "kernels.lock"
    text = rehash(edit(path.read_text(), outside))
    path.write_text(text)
    for command in (["sync", "--frozen"], ["verify"], ["show"], ["lock", "--check"]):
        assert_clean_error(cli(*command, "--project", str(synced)), needle)
    with pytest.raises(LockError, match=re.escape(needle)):
        lockfile.read(path, canonical=False)  # what run-time activation reads
    assert path.read_text() == text


@pytest.mark.subprocess
def test_malicious_lock_refused_by_activation_in_a_fresh_process(synced: Path, user_env: dict[str, str], outside: Path):
    path = synced / "kernels.lock"
    path.write_text(rehash(path.read_text().replace(VARIANT, f'name = "{outside}/v"', 1)))
    code = "import kernlock.activate, kernels; kernels.get_kernel('kernels-community/activation', version=1)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=synced, env=user_env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("kernlock: error:") and "Traceback" not in proc.stderr  # one line, as the CLI's
    assert "variant name" in proc.stderr and "ValueError" not in proc.stderr


def test_hand_edit_merge_and_reformat_are_named(synced: Path, user_env: dict[str, str]):
    path = synced / "kernels.lock"
    original = path.read_text()
    edited = re.sub(r'hash = "git-sha1:[0-9a-f]{40}"', f'hash = "git-sha1:{"0" * 40}"', original, count=1)
    path.write_text(edited)
    for command in (["lock", "--check"], ["sync", "--locked"], ["sync", "--frozen"], ["show"], ["verify"]):
        assert_clean_error(cli(*command, "--project", str(synced)), "edited after kernlock wrote it")
    path.write_text(f"<<<<<<< HEAD\n{original}=======\n{original}>>>>>>> branch\n")
    assert_clean_error(cli("lock", "--check", "--project", str(synced)), "merge-conflict markers")
    path.write_text(rehash(original.replace("\n\n[[kernel.variant]]", "\n[[kernel.variant]]")))
    assert_clean_error(cli("lock", "--check", "--project", str(synced)), "not laid out as kernlock writes it")
    # `kernlock lock` rewrites a merely re-formatted lock and keeps its pins
    result = cli("lock", "--project", str(synced))
    assert result.returncode == 0, result.stderr
    assert path.read_text() == original


def test_older_lock_version_is_rewritten_with_its_pins(synced: Path, user_env: dict[str, str], hub: HubServer):
    path = synced / "kernels.lock"
    original = path.read_text()
    legacy = re.sub(r'content-hash = "[^"]*"\n', "", original)
    legacy = legacy.replace(f'lock-version = "{LOCK_VERSION}"', 'lock-version = "1"')
    path.write_text(legacy)
    assert_clean_error(cli("sync", "--locked", "--project", str(synced)), "lock-version '1'", "kernlock lock")
    hub.log.clear()
    assert cli("lock", "--project", str(synced)).returncode == 0
    assert path.read_text() == original
    assert hub.log.count(contains="/refs") == 0  # the pin was kept, not re-resolved


def test_kernels_library_json_lock_is_never_overwritten(project: Path, user_env: dict[str, str]):
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    json_lock = '{\n  "kernels-community/activation": {"revision": "v1"}\n}\n'
    (project / "kernels.lock").write_text(json_lock)
    for command in (["lock"], ["add", f"{ACTIVATION}@v1"], ["lock", "--check"], ["show"]):
        assert_clean_error(cli(*command, "--project", str(project)), "kernels library's JSON lock", "kernlock import")
    assert (project / "kernels.lock").read_text() == json_lock


# -- lock consistency with pyproject -----------------------------------------------------------------------------


def test_lock_whose_entries_do_not_satisfy_pyproject_is_stale(synced: Path, user_env: dict[str, str]):
    path = synced / "kernels.lock"
    original = path.read_text()
    renamed = rehash(original.replace(f'repo = "{ACTIVATION}"', 'repo = "kernels-community/activatiom"'))
    path.write_text(renamed)
    for command in (["lock", "--check"], ["sync", "--locked"]):
        assert_clean_error(cli(*command, "--project", str(synced)), "no entry for kernels-community/activation")
    shown = cli("show", "--project", str(synced))
    assert shown.returncode == 0 and "kernels.lock is stale" in shown.stderr

    path.write_text(rehash(original.replace('requested = "v1"', 'requested = "v2"')))
    assert_clean_error(cli("lock", "--check", "--project", str(synced)), "asks for 'v1'")


def test_commit_pin_replaced_by_another_sha_is_stale(
    catalog: Catalog, user_env: dict[str, str], project: Path, hub: HubServer
):
    commit = catalog.repo(ACTIVATION).head("v1")
    write_pyproject(project, f'"{ACTIVATION}" = "{commit}"\n', [CPU_ENV])
    api.lock(project)
    path = project / "kernels.lock"
    path.write_text(rehash(path.read_text().replace(f'commit = "{commit}"', f'commit = "{"f" * 40}"')))
    assert_clean_error(cli("lock", "--check", "--project", str(project)), f"pins {commit[:12]}")


# -- a broken pyproject.toml -------------------------------------------------------------------------------------

BROKEN_PYPROJECTS = {
    "tool is a number": ("tool = 1\n", "`tool` must be a table"),
    "tool.kernlock is a number": ("[tool]\nkernlock = 5\n", "`tool.kernlock` must be a table"),
    "a duplicate key": (
        f'[tool.kernlock.kernels]\n"{ACTIVATION}" = "v1"\n"{ACTIVATION}" = "v2"\n',
        "not valid TOML",
    ),
    "a duplicate kernel in another letter case": (
        f'[tool.kernlock.kernels]\n"{ACTIVATION}" = "v1"\n"Kernels-Community/Activation" = "v2"\n',
        "names one repo twice",
    ),
    "kernels is a string": ('[tool.kernlock]\nkernels = "x"\n', "must be a table"),
    "a repo key with ..": ('[tool.kernlock.kernels]\n"../x" = "v1"\n', "a key must be a repo id"),
    "a revision that is a number": (f'[tool.kernlock.kernels]\n"{ACTIVATION}" = 1\n', "expected a revision string"),
    "a revision with a space": (f'[tool.kernlock.kernels]\n"{ACTIVATION}" = "v 1"\n', "is not a revision"),
    "when is a number": (
        f'[tool.kernlock.kernels]\n"{ACTIVATION}" = [{{ rev = "v1", when = 3 }}]\n',
        "`when` must be a string",
    ),
    "an environment typo": (
        f'[tool.kernlock]\nenvironments = ["{CPU_ENV}x"]\n',
        "did you mean",
    ),
    "environments is a string": (f'[tool.kernlock]\nenvironments = "{CPU_ENV}"\n', "non-empty list"),
    "not UTF-8": (b"[tool.kernlock]\nenvironments = ['\xff']\n", "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PYPROJECTS))
def test_broken_pyproject_is_a_clear_error(case: str, project: Path, user_env: dict[str, str]):
    body, needle = BROKEN_PYPROJECTS[case]
    path = project / "pyproject.toml"
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body)
    before = path.read_bytes()
    for command in (["lock"], ["add", f"{ACTIVATION}@v1", "--no-sync"], ["show"], ["lock", "--check"]):
        assert_clean_error(cli(*command, "--project", str(project)), needle)
    assert path.read_bytes() == before
    assert not (project / "kernels.lock").exists()


# -- where the project is ----------------------------------------------------------------------------------------


def test_commands_in_a_sub_folder_find_the_enclosing_project(synced: Path, user_env: dict[str, str]):
    sub = synced / "src" / "deep"
    sub.mkdir(parents=True)
    assert cli("lock", "--check", cwd=sub).returncode == 0
    assert cli("show", cwd=sub).returncode == 0
    added = cli("add", f"{ACTIVATION}@v2", "--no-sync", cwd=sub)
    assert added.returncode == 0, added.stderr
    assert not (sub / "pyproject.toml").exists() and not (sub / "kernels.lock").exists()
    assert f'"{ACTIVATION}" = "v2"' in (synced / "pyproject.toml").read_text()


def test_discovery_stops_at_the_repository_root(tmp_path: Path, user_env: dict[str, str], hub: HubServer):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "not-this-one"\n')
    repo = tmp_path / "checkout"
    (repo / ".git").mkdir(parents=True)
    result = cli("show", cwd=repo)
    assert_clean_error(result, "no pyproject.toml", "kernlock add")
    added = cli("add", f"{ACTIVATION}@v1", "--no-sync", cwd=repo)
    assert added.returncode == 0, added.stderr
    assert f"created {repo / 'pyproject.toml'}" in added.stdout
    assert (repo / "kernels.lock").exists()
    assert "kernlock" not in (tmp_path / "pyproject.toml").read_text()


# -- the smaller wrongs ------------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_the_same_kernel_twice_is_a_usage_error(project: Path, user_env: dict[str, str]):
    write_pyproject(project, "", [CPU_ENV])
    result = run_cli("add", ACTIVATION, f"{ACTIVATION}@v2", "--project", str(project), env=user_env)
    assert result.returncode == 2 and "more than once" in result.stderr
    assert "Traceback" not in result.stderr


def test_remove_accepts_a_revision(synced: Path, user_env: dict[str, str]):
    result = cli("remove", f"{ACTIVATION}@v1", "--project", str(synced))
    assert result.returncode == 0, result.stderr
    assert ACTIVATION not in (synced / "pyproject.toml").read_text()


def test_show_and_verify_without_a_project_say_what_to_run(tmp_path: Path, user_env: dict[str, str]):
    (tmp_path / ".git").mkdir()
    for command in ("show", "verify"):
        assert_clean_error(cli(command, cwd=tmp_path), "no pyproject.toml", "kernlock add")
    write_pyproject(tmp_path, "", [CPU_ENV])
    for command in ("show", "verify"):
        assert_clean_error(cli(command, cwd=tmp_path), "no kernels.lock", "kernlock lock")


def _under_by_realpath(root: Path, *parts: str) -> bool:
    """The plain definition of names.under: the folder that holds the result resolves to a place below root."""
    real_root, real_parent = os.path.realpath(root), os.path.realpath(Path(root, *parts).parent)
    return real_parent == real_root or real_parent.startswith(real_root + os.sep)


def test_under_follows_every_symlink_below_its_root(tmp_path: Path):
    """names.under (what every cache path goes through) agrees with the realpath definition on a tree with
    symlinks into and out of the root, nested ones and dangling ones, except that a path through a place outside
    the root is refused even when it comes back; the last part may be a symlink anywhere."""
    root, outside = tmp_path / "cache", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (outside / "c").mkdir(parents=True)
    (root / "out").symlink_to(outside)
    (root / "in").symlink_to(root / "a")
    (root / "a" / "up").symlink_to(tmp_path)
    (root / "a" / "chain").symlink_to(root / "out")
    (root / "dangling").symlink_to(tmp_path / "missing")
    (root / "a" / "b" / "last").symlink_to(outside / "c")
    cases = [
        ("a", "b", "f"), ("in", "b", "f"), ("a", "b", "last"), ("missing", "x", "y"), ("f",),
        ("out", "f"), ("out", "c", "f"), ("a", "up", "cache", "f"), ("a", "chain", "c", "f"), ("dangling", "f"),
        ("a", "up", "outside", "f"), ("in", "chain", "f"),
    ]  # fmt: skip
    leaves_and_returns = ("a", "up", "cache", "f")  # stricter than realpath: a path may not pass outside at all
    for parts in cases:
        expected = _under_by_realpath(root, *parts) and parts != leaves_and_returns
        if expected:
            assert names.under(root, *parts) == Path(root, *parts), parts
        else:
            with pytest.raises(ValueError, match="through a symlink"):
                names.under(root, *parts)
    assert sum(_under_by_realpath(root, *parts) for parts in cases) == 6  # both kinds are exercised
    for parts in (("..", "x"), ("a", "..", "..", "x"), (str(outside), "x")):
        with pytest.raises(ValueError, match="leaves"):
            names.under(root, *parts)


@settings(derandomize=True, deadline=None, database=None, max_examples=300)
@given(st.lists(st.text(alphabet="a/.", max_size=6), min_size=1, max_size=4))
def test_under_takes_the_parts_apart_as_pathlib_does(parts: list[str]):
    """names.under splits its parts with string methods (a Path per call cost every load): what it accepts and
    refuses, and the path it returns, are those of ``Path(*parts)`` (``..`` anywhere or an absolute part: refused;
    empty and ``.`` parts: dropped), for any mix of ``/``, ``.`` and names. Nothing here exists, so no symlink
    plays a part."""
    root = Path("/nonexistent-kernlock-root")
    relative = Path(*parts)
    if ".." in relative.parts or relative.is_absolute():
        with pytest.raises(ValueError, match="leaves"):
            names.under(root, *parts)
    else:
        assert names.under(root, *parts) == Path(root, *parts)


@pytest.mark.subprocess
@pytest.mark.parametrize("command", [["show"], ["env"], ["verify"]])
def test_a_closed_pipe_ends_the_command_quietly(command: list[str], synced: Path, user_env: dict[str, str]):
    """`kernlock env | head -1`: the reader is gone before kernlock writes; it stops with exit 1 and says nothing
    (no disk-permissions advice, no traceback, no 'Exception ignored' at interpreter exit)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kernlock", *command, "--project", str(synced)],
            stdout=write,
            stderr=subprocess.PIPE,
            env=user_env,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")


def test_under_notices_a_root_that_now_leads_elsewhere(tmp_path: Path):
    """names.under remembers where its root resolves; a root symlink re-pointed between two checks (to a folder
    whose `a` leads outside) is resolved again, so the second check still refuses the escape."""
    first, second, outside = tmp_path / "first", tmp_path / "second", tmp_path / "outside"
    (first / "a" / "b").mkdir(parents=True)
    second.mkdir()
    (outside / "b").mkdir(parents=True)
    (second / "a").symlink_to(outside)
    root = tmp_path / "cache"
    root.symlink_to(first)
    assert names.under(root, "a", "b", "f") == root / "a" / "b" / "f"
    root.unlink()
    root.symlink_to(second)
    with pytest.raises(ValueError, match="through a symlink"):
        names.under(root, "a", "b", "f")
    root.unlink()
    first.rename(tmp_path / "moved")  # the remembered real path is gone: resolved again
    root.symlink_to(tmp_path / "moved")
    assert names.under(root, "a", "b", "f") == root / "a" / "b" / "f"


# -- kernlock's own cache is trusted only when it is the user's alone ------------------------------------------


def test_a_private_folder_is_one_only_the_user_can_change(tmp_path: Path):
    """hfenv.private: the folder and every folder above it (symlinks resolved) belong to the user or root and are
    writable by nobody else; above it, a sticky folder such as /tmp is fine. ``create`` makes missing ones 0700."""
    mine = tmp_path / "a" / "b"
    assert not hfenv.private(mine)  # missing
    assert hfenv.private(mine, create=True)
    assert all((p.stat().st_mode & 0o777) == 0o700 for p in (tmp_path / "a", mine))
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert hfenv.private(sticky / "kernlock", create=True)
    sticky.chmod(0o777)  # without the sticky bit, others could move our folder away and put theirs in its place
    assert not hfenv.private(sticky / "kernlock")
    (tmp_path / "a").chmod(0o770)
    assert not hfenv.private(mine)
    (tmp_path / "a").chmod(0o700)
    if os.geteuid() == 0:  # only root can hand a folder to another user
        os.chown(mine, 4242, -1)
        assert not hfenv.private(mine)
        os.chown(mine, 0, -1)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    (tmp_path / "link").symlink_to(shared)
    assert not hfenv.private(tmp_path / "link")  # judged where the link leads
    (tmp_path / "file").write_text("")
    assert not hfenv.private(tmp_path / "file")
    # Nothing is created where it could not be private: `kernlock run` in a project the group can write used to
    # leave an empty .kernlock/run/<digest> behind before it fell back to kernlock's cache.
    group = tmp_path / "group-project"
    group.mkdir()
    group.chmod(0o775)
    assert not hfenv.private(group / ".kernlock" / "run" / "0123", create=True)
    assert not (group / ".kernlock").exists()
    assert not hfenv.private(shared / "kernlock", create=True)  # above it, a folder everyone can write, not sticky
    assert list(shared.iterdir()) == []
