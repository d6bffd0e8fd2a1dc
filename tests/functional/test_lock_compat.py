"""The lock's compatibility rule (docs/lockfile.md, "Compatibility"), one test per case: a breaking ``lock-version``
beside an additive ``lock-revision``.

The older kernlock is this one; the newer kernlock is simulated honestly by its writer: this writer, with the schema
a newer kernlock declares (:func:`newer_schema`: the revision after the newest this one knows, and in it an optional
``license`` per entry and ``executable`` per file). The lock it writes is what a newer kernlock writes; this kernlock
then reads it without those declarations, as an older kernlock does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from projects import CPU_ENV
from test_lock_golden import BASE, CURRENT, OURS, golden, rehash

from kernlock.errors import DamagedLockError, LockError
from kernlock.lock import file as lockfile
from kernlock.lock import index as lockindex
from kernlock.lock import schema
from kernlock.lock.model import Lock, LockedFile, LockedKernel
from kernlock.util import hfenv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: The newest revision of the current lock-version this kernlock knows, and the one a newer kernlock writes.
KNOWN = schema.latest_revision(Lock, schema.LOCK_VERSION)
NEWER = KNOWN + 1
UPGRADE = "pip install -U kernlock"


@contextlib.contextmanager
def newer_schema() -> Iterator[None]:
    """This kernlock's schema as a newer kernlock declares it: revision NEWER of the current version adds an optional
    ``license`` per entry and ``executable`` per file (their values borrowed from fields the model has, as the model
    classes have no slot for a field this kernlock lacks)."""
    since = f"{schema.LOCK_VERSION}.{NEWER}"
    added = {
        LockedKernel: schema.Field(key="license", since=since, attr="requested", default=None),
        LockedFile: schema.Field(key="executable", since=since, kind="int", attr="size", default=None),
    }
    with pytest.MonkeyPatch.context() as patch:
        declared = {cls: (*schema.fields(cls), field) for cls, field in added.items()}
        patch.setattr(schema, "_FIELDS", {**schema._FIELDS, **declared})
        for cache in ("_IN", "_KNOWN", "_REVISED", "_LATEST"):
            patch.setattr(schema, cache, {})
        yield


def newer_lock() -> str:
    """The golden lock as a kernlock of revision NEWER writes it."""
    lock = lockfile.loads(golden(CURRENT))
    with newer_schema():
        return lockfile.dumps(lock)


@dataclass
class Read:
    lock: Lock
    stderr: str


def read(text: str, capsys: pytest.CaptureFixture[str], **options: bool) -> Read:
    lockfile._WARNED.clear()  # each read stands for a process of its own
    capsys.readouterr()
    lock = lockfile.loads(text, **options)
    return Read(lock, capsys.readouterr().err)


# -- the newer kernlock's writer ----------------------------------------------------------------------------------


def test_a_lock_holding_a_field_of_a_revision_says_that_revision_and_one_without_says_none() -> None:
    text = newer_lock()
    head = text.split("\n")[1:3]
    assert head == [f'lock-version = "{schema.LOCK_VERSION}"', f"lock-revision = {NEWER}"]
    data = tomllib.loads(text)
    assert all("license" in k for k in data["kernel"])
    assert all("executable" in f for k in data["kernel"] for v in k["variant"] for f in v["files"])
    lock = lockfile.loads(golden(CURRENT))
    bare = dataclasses.replace(lock, kernels=tuple(dataclasses.replace(k, requested="v1") for k in lock.kernels))
    with newer_schema():  # a revision is written only when the lock holds a field of it
        assert "lock-revision" in lockfile.dumps(bare)
    assert KNOWN or "lock-revision" not in golden(CURRENT)  # while this kernlock knows no revision: none written


def test_a_field_arriving_in_a_revision_must_be_optional() -> None:
    @dataclass(frozen=True)
    class Table:
        name: str = dataclasses.field(metadata=schema.key("name"))
        added: str = dataclasses.field(metadata=schema.key("added", since=f"{schema.LOCK_VERSION}.{NEWER}"))

    with pytest.raises(TypeError, match=r"arrives in revision .* but is required"):
        schema.fields(Table)


# -- the cases of the rule ----------------------------------------------------------------------------------------


def test_a_newer_revision_is_read_for_its_pins_with_one_warning_line(capsys: pytest.CaptureFixture[str]) -> None:
    current = lockfile.loads(golden(CURRENT))
    got = read(newer_lock(), capsys)
    assert got.lock == current  # every pin and file, without what this kernlock does not know
    [line] = got.stderr.splitlines()
    assert line.startswith("warning: ") and f"lock-revision {NEWER}" in line and UPGRADE in line
    assert "executable, license" in line
    lockfile.loads(newer_lock())  # the same lock again in the same process: said once
    assert capsys.readouterr().err == ""


def test_a_newer_revision_is_read_by_the_light_reader_only_through_the_full_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = newer_lock()
    assert lockfile.loads_environment(text, "kernels.lock", CPU_ENV) is None
    assert lockfile.loads_environment(golden(CURRENT), "kernels.lock", CPU_ENV) is not None


def test_activation_reads_a_newer_revision_whole_saying_so_in_every_process(
    user_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kernels.lock"
    path.write_text(newer_lock())
    current = lockfile.loads(golden(CURRENT))
    for _process in range(2):
        lockfile._WARNED.clear()
        capsys.readouterr()
        view = lockindex.read(str(path), CPU_ENV)
        assert [e.commit for e in view._entries.values()] == [
            k.commit for k in current.kernels if CPU_ENV in k.environments
        ]
        assert UPGRADE in capsys.readouterr().err
    assert not list((hfenv.cache_root() / "lock-index").glob("*.json"))  # no index: the next process reads it again


def test_a_newer_revision_edited_after_it_was_written_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    text = newer_lock().replace('license = "v1"', 'license = "v2"', 1)
    assert text != newer_lock()
    with pytest.raises(DamagedLockError, match="edited after kernlock wrote it"):
        read(text, capsys)


def test_keys_of_a_revision_this_kernlock_knows_are_still_checked(capsys: pytest.CaptureFixture[str]) -> None:
    text = newer_lock()
    known = f"lock-revision = {KNOWN}\n" if KNOWN else ""
    relabelled = rehash(text.replace(f"lock-revision = {NEWER}\n", known))  # the same keys at a known revision
    with pytest.raises(DamagedLockError, match="unknown key license"):
        read(relabelled, capsys, canonical=False)
    odd = rehash(text.replace('license = "', '"Not A Key" = 1\nlicense = "', 1))  # not a key kernlock writes
    with pytest.raises(DamagedLockError, match="unknown key Not A Key"):
        read(odd, capsys, canonical=False)
    for value in ('"1"', "-1", "1.5", "true"):
        bad = rehash(text.replace(f"lock-revision = {NEWER}", f"lock-revision = {value}"))
        with pytest.raises(DamagedLockError, match="`lock-revision` is not a whole number"):
            read(bad, capsys, canonical=False)


def test_a_newer_revision_still_needs_every_key_its_version_requires(capsys: pytest.CaptureFixture[str]) -> None:
    text = newer_lock()
    commit = next(line for line in text.split("\n") if line.startswith("commit = "))
    with pytest.raises(DamagedLockError, match="commit"):
        read(rehash(text.replace(commit + "\n", "", 1)), capsys, canonical=False)


def test_a_newer_lock_version_is_refused_in_one_line_whatever_its_revision(capsys: pytest.CaptureFixture[str]) -> None:
    newer = str(int(schema.LOCK_VERSION) + 1)
    for text in (golden(CURRENT), newer_lock()):
        bumped = rehash(text.replace(f'lock-version = "{schema.LOCK_VERSION}"', f'lock-version = "{newer}"'))
        with pytest.raises(LockError, match=rf"lock-version '{newer}'.*{UPGRADE}") as refused:
            read(bumped, capsys)
        assert "\n" not in str(refused.value)


# -- on the command line ------------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_every_command_reads_a_newer_revision_saying_so_once_and_lock_rewrites_it_only_when_stale(
    user_env: dict[str, str], project: Path
) -> None:
    (project / "pyproject.toml").write_text(OURS)
    text = newer_lock()
    (project / "kernels.lock").write_text(text)
    for command in (["lock", "--check"], ["lock", "--check"], ["show"], ["show"], ["lock"]):
        done = run_cli(*command, "--project", str(project), env=user_env)
        assert done.returncode == 0, (command, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
        assert len(lines) == 1 and UPGRADE in lines[0], (command, done.stderr)  # each time: never remembered
    assert (project / "kernels.lock").read_text() == text  # up to date: not rewritten, nothing dropped
    (project / "pyproject.toml").write_text(BASE)  # stale: rewritten, and the warning says what that leaves out
    done = run_cli("lock", "--project", str(project), env=user_env)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert "license" in line and "leaves them out" in line
    assert "license" not in (project / "kernels.lock").read_text()
    (project / "kernels.lock").write_text(rehash(text.replace(f'"{schema.LOCK_VERSION}"', '"99"', 1)))
    assert_clean_error(run_cli("show", "--project", str(project), env=user_env), "lock-version '99'", UPGRADE)
