"""kernels.lock I/O (issue 12): the fast writer gives today's bytes, and activation reads only its environment.

* The lock writer (:mod:`kernlock.util.tomlwrite`) renders exactly what tomlkit rendered: for locks of every shape the
  fuzz generator draws, for a 20-kernel x 26-environment lock, and for any document of tables, arrays of tables,
  inline tables, strings (escapes included), integers and booleans, so a field added to the lock model later is
  written as tomlkit would have written it.
* Run-time activation reads this environment's entries from an index derived once from the lock, checked against
  the lock's stat and content-hash: a warm process parses no TOML at all, and any change of the lock is seen.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tomlkit
import tomllib
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lock_strategies import valid_locks
from projects import CPU_ENV, write_pyproject
from users import give_away

from kernlock import api
from kernlock.errors import DamagedLockError
from kernlock.lock import file as lockfile
from kernlock.lock import index as lockindex
from kernlock.lock import schema
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant
from kernlock.lock.validate import Validator, entry_from_index
from kernlock.testing import HubServer
from kernlock.util import tomlwrite

CUDA_ENV = "torch212-cxx11-cu128-x86_64-linux"
CHECKS = settings(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))


# -- the reference: tomlkit ------------------------------------------------------------------------------------


def _tomlkit_dumps(lock: Lock) -> str:
    """kernels.lock as kernlock wrote it with tomlkit before issue 12 (lockfile.dumps of lock-version 2, with
    issue 13's environment-facts)."""
    lock = lockfile.normalized(lock)
    doc = tomlkit.document()
    doc.add(tomlkit.comment(lockfile.HEADER))
    doc["lock-version"] = schema.LOCK_VERSION
    doc["created-by"] = "kernlock"
    doc["requires-hash"] = lock.requires_hash
    doc["variant-rule"] = lock.variant_rule
    doc["environments"] = _array(lock.environments)
    if lock.facts:
        facts = tomlkit.array()
        for entry in lockfile.facts_document(lock):
            item = tomlkit.inline_table()
            item.update({k: _array(v) if isinstance(v, list) else v for k, v in entry.items()})
            facts.append(item)
        facts.multiline(True)
        doc["environment-facts"] = facts
    entries = tomlkit.aot()
    for kernel in lock.kernels:
        table = tomlkit.table()
        table["repo"] = kernel.repo
        table["requested"] = kernel.requested
        table["ref"] = kernel.ref
        table["commit"] = kernel.commit
        table["environments"] = _array(kernel.environments)
        if kernel.required_by:
            table["required-by"] = _array(kernel.required_by)
        variants = tomlkit.aot()
        for variant in kernel.variants:
            vtable = tomlkit.table()
            vtable["name"] = variant.name
            vtable["environments"] = _array(variant.environments)
            files = tomlkit.array()
            for f in variant.files:
                item = tomlkit.inline_table()
                item.update({"path": f.path, "size": f.size, "hash": f.hash})
                files.append(item)
            files.multiline(True)
            vtable["files"] = files
            variants.append(vtable)
        table["variant"] = variants
        entries.append(table)
    if lock.kernels:
        doc["kernel"] = entries
    text = tomlkit.dumps(doc)
    head, sep, rest = text.partition("\nenvironments = ")
    return f'{head}\ncontent-hash = "{lockfile.content_hash(text)}"{sep}{rest}'


def _array(values: Any) -> Any:
    array = tomlkit.array()
    array.extend(values)
    return array


def _tomlkit_item(value: Any) -> Any:
    """A plain value as the tomlkit item kernlock's writer means by it (see kernlock.util.tomlwrite)."""
    if isinstance(value, tomlwrite.InlineTables):
        array = tomlkit.array()
        for entry in value:
            inline = tomlkit.inline_table()
            inline.update(entry)
            array.append(inline)
        return array.multiline(True)
    if type(value) is list and value and all(isinstance(v, dict) for v in value):
        tables = tomlkit.aot()
        for entry in value:
            tables.append(_tomlkit_table(entry))
        return tables
    if isinstance(value, dict):
        return _tomlkit_table(value)
    return _tomlkit_inline(value)


def _tomlkit_inline(value: Any) -> Any:
    """An inline value: lists as arrays, dicts as inline tables, built item by item."""
    if isinstance(value, dict):
        inline = tomlkit.inline_table()
        inline.update({key: _tomlkit_inline(item) for key, item in value.items()})
        return inline
    if isinstance(value, list):
        array = tomlkit.array()
        for item in value:
            array.append(_tomlkit_inline(item))
        return array
    return value


def _values_first(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each table's plain values before its tables and arrays of tables (recursively)."""

    def is_table(value: Any) -> bool:
        tables = type(value) is list and bool(value) and all(isinstance(v, dict) for v in value)
        return isinstance(value, dict) or tables

    def inner(value: Any) -> Any:
        if isinstance(value, dict):
            return _values_first(value)
        if type(value) is list and is_table(value):
            return [_values_first(v) for v in value]
        return value

    plain = {k: v for k, v in data.items() if not is_table(v)}
    return {**plain, **{k: inner(v) for k, v in data.items() if is_table(v)}}


def _tomlkit_table(data: dict[str, Any]) -> Any:
    table = tomlkit.table()
    for key, value in data.items():
        table[key] = _tomlkit_item(value)
    return table


# -- the writer ------------------------------------------------------------------------------------------------


@settings(CHECKS, max_examples=120)
@given(valid_locks())
def test_writer_gives_the_bytes_tomlkit_gave(lock: Lock):
    """Every lock the fuzz generator draws (awkward paths, shared and split variants, dependencies) is written
    byte for byte as before: existing kernels.lock files stay canonical and `lock --check` stays quiet."""
    assert lockfile.dumps(lock) == _tomlkit_dumps(lock)


def big_lock(kernels: int = 20, environments: int = 26, files: int = 4) -> Lock:
    """``kernels`` kernels, each with its own variant for every one of ``environments`` environments."""
    envs = sorted(
        f"torch2{minor}-cxx11-{backend}-x86_64-linux"
        for minor in range(7, 14)
        for backend in ("cpu", "cu126", "cu128", "cu130")
    )[:environments]
    entries = []
    for k in range(kernels):
        variants = tuple(
            LockedVariant(
                name=env,
                environments=(env,),
                files=tuple(
                    LockedFile(path=f"k{k}/f{n}.py", size=1000 + n, hash=f"git-sha1:{k:04x}{n:04x}{e:032x}")
                    for n in range(files)
                ),
            )
            for e, env in enumerate(envs)
        )
        repo = f"kernels-bench/kernel-{k:02d}"
        entries.append(
            LockedKernel(
                repo=repo, requested="v4", ref="v4", commit=f"{k:040x}", environments=tuple(envs), variants=variants
            )
        )
    return Lock(requires_hash="sha256:" + "b" * 64, environments=tuple(envs), kernels=tuple(entries))


def test_writer_gives_the_bytes_tomlkit_gave_for_a_big_lock():
    lock = big_lock()
    text = lockfile.dumps(lock)
    assert text == _tomlkit_dumps(lock)
    assert lockfile.loads(text) == lock


def test_files_given_in_any_order_are_written_in_path_order():
    """The writer decides a variant's file order by path (paths are unique): a lock whose files came reversed or
    rotated is written as the sorted one, byte for byte."""
    lock = big_lock(kernels=2, environments=3, files=5)
    text = lockfile.dumps(lock)
    for reorder in (lambda f: f[::-1], lambda f: f[1:] + f[:1]):
        kernels = tuple(
            dataclasses.replace(k, variants=tuple(dataclasses.replace(v, files=reorder(v.files)) for v in k.variants))
            for k in lock.kernels
        )
        shuffled = dataclasses.replace(lock, kernels=kernels)
        assert shuffled != lock
        assert lockfile.dumps(shuffled) == text


_keys = st.text(st.characters(codec="utf-8"), min_size=1, max_size=6)  # tomlkit drops a space after ""
_scalars = st.one_of(st.text(st.characters(codec="utf-8"), max_size=8), st.integers(-(2**63), 2**63 - 1), st.booleans())
_inline = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3), max_leaves=8
)
_flat_tables = st.dictionaries(_keys, _scalars, max_size=3)


def _documents() -> st.SearchStrategy[dict[str, Any]]:
    values = st.one_of(_inline, st.lists(_flat_tables, max_size=3).map(tomlwrite.InlineTables))

    def nest(tables: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        return st.dictionaries(_keys, st.one_of(values, tables, st.lists(tables, min_size=1, max_size=2)), max_size=4)

    return st.recursive(st.dictionaries(_keys, values, max_size=4), nest, max_leaves=12)


@settings(CHECKS, max_examples=100)
@given(_documents())
@example({"0\n": [], "a\n": {"b\n": 1}})  # `$` also matches before a final newline: such keys must be quoted
def test_writer_renders_any_document_as_tomlkit_does(document: dict[str, Any]):
    """Tables (also ones holding only tables), arrays of tables, arrays of inline tables, nested inline values,
    quoted keys and escaped strings: the same text as tomlkit. (A table's plain values are written before its
    tables, as TOML requires; the reference gets them in that order, as the lock model always gives them.)"""
    document = _values_first(document)
    expected = tomlkit.dumps(_tomlkit_table(document))
    doc = tomlkit.document()
    doc.add(tomlkit.comment("header"))
    for key, value in document.items():
        doc[key] = _tomlkit_item(value)
    assert tomlwrite.dumps(document) == expected
    assert tomlwrite.dumps(document, "header") == tomlkit.dumps(doc)


# -- run-time reads: this environment's entries, from an index -------------------------------------------------

_FIRST_LOAD = """
    import json, sys, tomllib
    parsed = []
    _loads = tomllib.loads
    def counting(text, **kwargs):
        parsed.append(len(text))
        return _loads(text, **kwargs)
    tomllib.loads = counting
    import kernlock.activate
    import kernels
    kernel = kernels.get_kernel("kernels-community/activation", version=1)
    from kernlock.runtime import policy as hooks_kernels
    view = hooks_kernels._current().lock
    entries = [view.entry_for(repo, view.environment) for repo in view.repos]
    print(json.dumps({"parsed": parsed, "identity": kernel.KERNEL_IDENTITY, "entries": [e.repo for e in entries if e]}))
"""


def _first_load(project: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FIRST_LOAD)], cwd=project, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def locked_two_ways(user_env: dict[str, str], hub: HubServer, project: Path) -> Path:
    """activation locked at v1 for this machine and at v2 for a CUDA machine: two entries, one of them ours."""
    write_pyproject(
        project,
        '"kernels-community/activation" = [{ rev = "v2", when = "cuda == 12.8" }, { rev = "v1" }]\n',
        [CPU_ENV, CUDA_ENV],
    )
    api.lock(project)
    api.sync(project, progress=False)
    return project


@pytest.mark.slow
@pytest.mark.subprocess
def test_first_load_parses_only_this_environments_entries(
    locked_two_ways: Path, user_env: dict[str, str], tmp_path: Path
):
    """The first process after a lock change that no sync indexed (the index removed here) parses only this
    environment's part of the lock (not the CUDA machine's variant) and indexes its entries; every later process
    parses no TOML at all, and holds only this environment's entries (not the CUDA machine's)."""
    project = locked_two_ways
    assert sorted(k.requested for k in lockfile.read(project / "kernels.lock").kernels) == ["v1", "v2"]
    lock_bytes = (project / "kernels.lock").stat().st_size
    offline = {**user_env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    for index in (Path(user_env["KERNLOCK_CACHE"]) / "lock-index").iterdir():
        index.unlink()
    first = _first_load(project, offline)
    assert first["parsed"] and lock_bytes not in first["parsed"]  # parts of the lock, never the whole
    assert sum(first["parsed"]) < lock_bytes * 0.8  # the CUDA machine's variant is not parsed
    assert first["identity"]["version"] == 1
    index_files = list((Path(user_env["KERNLOCK_CACHE"]) / "lock-index").iterdir())
    assert len(index_files) == 1
    index = json.loads(index_files[0].read_text())
    assert [(k["repo"], k["requested"]) for k in index["kernel"]] == [("kernels-community/activation", "v1")]
    assert [[v["name"] for v in k["variant"]] for k in index["kernel"]] == [[CPU_ENV]]
    assert index["repos"] == ["kernels-community/activation"]
    assert index["environments"] == sorted([CPU_ENV, CUDA_ENV])

    warm = _first_load(project, offline)
    assert lock_bytes not in warm["parsed"]  # the lock is not parsed again
    assert warm["identity"] == first["identity"]
    assert warm["entries"] == ["kernels-community/activation"]


@pytest.mark.subprocess
def test_sync_indexes_the_lock_so_the_first_process_parses_none(
    project: Path, user_env: dict[str, str], hub: HubServer
):
    """`kernlock sync` indexes every environment it synced: the first training process after it parses no TOML
    (each rank of a job would otherwise parse the whole lock); a sync that finds the index current rewrites
    nothing."""
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', [CPU_ENV, CUDA_ENV])
    api.lock(project)
    folder = Path(user_env["KERNLOCK_CACHE"]) / "lock-index"
    assert not folder.exists() or not list(folder.iterdir())
    api.sync(project, progress=False)
    (index,) = folder.iterdir()
    assert json.loads(index.read_text())["environment"] == CPU_ENV
    first = _first_load(project, {**user_env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert first["parsed"] == [] and first["identity"]["version"] == 1
    written = index.stat().st_mtime_ns, index.stat().st_ino
    api.sync(project, progress=False)
    assert (index.stat().st_mtime_ns, index.stat().st_ino) == written
    api.sync(project, all_environments=True, progress=False, offline=False)
    assert sorted(json.loads(p.read_text())["environment"] for p in folder.iterdir()) == sorted([CPU_ENV, CUDA_ENV])


def test_prime_writes_nothing_for_a_lock_the_file_does_not_hold(locked_two_ways: Path, user_env: dict[str, str]):
    """An index is primed only from the lock the file holds: a lock object of other content (the file re-written
    in between) leaves no index, and the next read derives the right one from the file."""
    path = locked_two_ways / "kernels.lock"
    folder = Path(user_env["KERNLOCK_CACHE"]) / "lock-index"
    for index in folder.iterdir():
        index.unlink()
    lock = lockfile.read(path)
    other = dataclasses.replace(lock, kernels=lock.kernels[:1])
    lockindex.prime(path, other, [CPU_ENV, CUDA_ENV])
    assert list(folder.iterdir()) == []
    lockindex.prime(path, lock, [CPU_ENV])
    (index,) = folder.iterdir()
    view = lockindex.read(str(path), CPU_ENV)
    assert view.entry_for("kernels-community/activation", CPU_ENV) == lockindex._view(lock, CPU_ENV).entry_for(
        "kernels-community/activation", CPU_ENV
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_changed_lock_is_read_again(locked_two_ways: Path, user_env: dict[str, str], hub: HubServer):
    """Re-locking at another revision changes the lock's stat and content-hash: the next process reads the new
    lock (and loads the new pin), never the stale index, also before a sync has indexed the new lock."""
    project = locked_two_ways
    _first_load(project, user_env)
    write_pyproject(project, '"kernels-community/activation" = "v2"\n', [CPU_ENV, CUDA_ENV])
    api.lock(project)
    entry = lockindex.read(str(project / "kernels.lock"), CPU_ENV).entry_for("kernels-community/activation", CPU_ENV)
    assert entry is not None and entry.requested == "v2"
    api.sync(project, progress=False)
    after = _first_load(project, user_env)
    assert after["identity"]["version"] == 2


@pytest.mark.parametrize(
    "unsafe",
    [
        "group-writable",
        pytest.param("another user's", marks=pytest.mark.root),
        "cache root group-writable",
        "index file group-writable",
    ],
)
def test_an_index_others_could_write_is_not_trusted(locked_two_ways: Path, user_env: dict[str, str], unsafe: str):
    """A forged index that passes every check (here: the CUDA machine's commit for this machine) is what the next
    process loads when it sits in the user's own cache, which only the user can write; in a folder others can
    write, it is never read (the entry comes from the lock) and no index is written there. An index file the group
    can write (0664, as a umask of 002 makes it, in a folder others may enter) is not read either: it is replaced
    by the user's own, 0600."""
    lock_path = str(locked_two_ways / "kernels.lock")
    lock = lockfile.read(Path(lock_path))
    commits = {k.requested: k.commit for k in lock.kernels}
    assert lockindex.read(lock_path, CPU_ENV).entry_for("kernels-community/activation", CPU_ENV).commit == commits["v1"]
    root = Path(user_env["KERNLOCK_CACHE"])
    (index,) = (root / "lock-index").iterdir()
    data = json.loads(index.read_text())
    data["kernel"][0]["commit"] = commits["v2"]
    index.write_text(json.dumps(data))
    assert lockindex.read(lock_path, CPU_ENV).entry_for("kernels-community/activation", CPU_ENV).commit == commits["v2"]
    if unsafe == "group-writable":
        (root / "lock-index").chmod(0o775)
    elif unsafe == "another user's":
        give_away(root / "lock-index")
    elif unsafe == "index file group-writable":
        (root / "lock-index").chmod(0o755)
        index.chmod(0o664)
    else:
        root.chmod(0o777)
    assert lockindex.read(lock_path, CPU_ENV).entry_for("kernels-community/activation", CPU_ENV).commit == commits["v1"]
    if unsafe == "index file group-writable":
        assert json.loads(index.read_text())["kernel"][0]["commit"] == commits["v1"]
        assert index.stat().st_mode & 0o777 == 0o600
    else:
        assert json.loads(index.read_text())["kernel"][0]["commit"] == commits["v2"]  # not rewritten there either


def test_a_damaged_index_is_ignored(locked_two_ways: Path, user_env: dict[str, str]):
    """An index that is not JSON, or names entries the lock does not hold, is rebuilt from the lock."""
    project = locked_two_ways
    lock_path = str(project / "kernels.lock")
    good = lockindex.read(lock_path, CPU_ENV)
    (index,) = (Path(user_env["KERNLOCK_CACHE"]) / "lock-index").iterdir()
    index.write_text("{not json")
    assert lockindex.read(lock_path, CPU_ENV).repos == good.repos
    data = json.loads(index.read_text())
    data["kernel"][0]["variant"][0]["files"][0]["path"] = "../../outside.py"
    index.write_text(json.dumps(data))
    again = lockindex.read(lock_path, CPU_ENV)
    entry = again.entry_for("kernels-community/activation", CPU_ENV)
    assert entry is not None and all(".." not in f.path for v in entry.variants for f in v.files)
    os.utime(lock_path)  # a touched lock: stat changed, read again
    assert lockindex.read(lock_path, CPU_ENV).repos == good.repos


#: Index edits that would build a path outside the cache, or are no entry at all: each makes the index unread.
UNREADABLE_INDEX_ENTRIES = {
    "repo climbs out": lambda k: k.update(repo="../../outside"),
    "commit not hex": lambda k: k.update(commit="../" + k["commit"][3:]),
    "ref with a space": lambda k: k.update(ref="v1 x"),
    "variant folder climbs out": lambda k: k["variant"][0].update(name="../torch-cpu"),
    "file path absolute": lambda k: k["variant"][0]["files"][0].update(path="/etc/passwd"),
    "file hash not hex": lambda k: k["variant"][0]["files"][0].update(hash="sha256:../../x"),
    "file size a string": lambda k: k["variant"][0]["files"][0].update(size="12"),
    "a file listed twice": lambda k: k["variant"][0]["files"].append(dict(k["variant"][0]["files"][0])),
    "no variants": lambda k: k.update(variant=[]),
    "environments a string": lambda k: k.update(environments=CPU_ENV),
    "a key missing": lambda k: k.pop("commit"),
    "signature not a table": lambda k: k["variant"][0].update(signature=3),
    "a key this kernlock does not know": lambda k: k["variant"][0]["files"][0].update({"mode": "0755"}),
}


@pytest.mark.parametrize("edit", list(UNREADABLE_INDEX_ENTRIES), ids=list(UNREADABLE_INDEX_ENTRIES))
def test_an_index_entry_that_is_no_safe_entry_is_rebuilt_from_the_lock(
    locked_two_ways: Path, user_env: dict[str, str], edit: str
):
    """The index's entries are not checked against the variant grammar again (the lock was, when it was read),
    but every part a path is built from and each entry's shape are: an index edited to break one is not read, and
    the entry comes from the lock again (the index is rewritten). So is an entry with a key this kernlock does not
    know (a newer kernlock's index: the lock then says whether this kernlock can read it)."""
    lock_path = str(locked_two_ways / "kernels.lock")
    good = lockindex.read(lock_path, CPU_ENV).entry_for("kernels-community/activation", CPU_ENV)
    (index,) = (Path(user_env["KERNLOCK_CACHE"]) / "lock-index").iterdir()
    data = json.loads(index.read_text())
    UNREADABLE_INDEX_ENTRIES[edit](data["kernel"][0])
    index.write_text(json.dumps(data))
    assert lockindex.read(lock_path, CPU_ENV).entry_for("kernels-community/activation", CPU_ENV) == good
    assert json.loads(index.read_text())["kernel"][0] == lockfile.entry_table(good)  # the index made again


@pytest.mark.parametrize("edit", list(UNREADABLE_INDEX_ENTRIES), ids=list(UNREADABLE_INDEX_ENTRIES))
def test_the_index_and_the_lock_refuse_an_entry_for_the_same_reason(edit: str):
    """One reader: an entry of the run-time index is read by the lock's own reader in its light mode, so each edit
    above is refused there with the very reason a lock holding the same edit is refused with (only the line number
    the whole lock's message adds differs)."""
    lock = big_lock(kernels=2, environments=3, files=3)
    text = lockfile.dumps(lock)
    data = tomllib.loads(text)
    UNREADABLE_INDEX_ENTRIES[edit](data["kernel"][0])
    with pytest.raises(DamagedLockError) as whole:
        Validator(text, "kernels.lock").lock(data, legacy=False)
    entry = json.loads(json.dumps(lockfile.entry_table(lock.kernels[0])))
    UNREADABLE_INDEX_ENTRIES[edit](entry)
    with pytest.raises(ValueError) as light:
        entry_from_index(entry)
    assert whole.value.why is not None
    assert re.sub(r"^line \d+ \(\[\[kernel\]\] #1\): ", "", whole.value.why) == str(light.value)


@settings(CHECKS, max_examples=80)
@given(valid_locks())
def test_an_index_entry_reads_back_as_the_lock_entry_it_was_made_from(lock: Lock):
    """The run-time index's light read of an entry (no variant grammar) gives exactly the entry the lock's strict
    read gives, for every lock the fuzz generator draws and each of its environments."""
    for env in lock.environments:
        for entry in lockindex._view(lock, env)._entries.values():
            table = json.loads(json.dumps(lockfile.entry_table(entry)))  # as the index file holds it
            assert entry_from_index(table) == entry


def _environment_view(text: str, env: str) -> tuple[tuple[str, ...], list[str], list[LockedKernel]] | None:
    part = lockfile.loads_environment(text, "kernels.lock", env)
    if part is None:
        return None
    lock, repos = part
    return lock.environments, repos, list(lock.kernels)


def _whole_view(text: str, env: str) -> tuple[tuple[str, ...], list[str], list[LockedKernel]]:
    view = lockindex._view(lockfile.loads(text, canonical=False), env)
    return (
        view.environments,
        view.repos,
        [view.entry_for(repo, env) for repo in view.repos if view.entry_for(repo, env)],
    )


@settings(CHECKS, max_examples=80)
@given(valid_locks())
def test_reading_one_environments_part_gives_what_the_whole_lock_gives(lock: Lock):
    """The first activation after a lock change parses only its environment's part of the lock: for every lock the
    fuzz generator draws and each of its environments (and one it does not list), exactly the entries, repos and
    environments the whole lock gives."""
    text = lockfile.dumps(lock)
    for env in (*lock.environments, "torch213-cxx11-cu999-x86_64-linux"):
        assert _environment_view(text, env) == _whole_view(text, env)


def test_a_lock_not_laid_out_as_kernlock_writes_it_is_read_whole():
    """Anything that could make the cut fall where a TOML parser would not (a changed byte, another table header,
    an indented header, a multi-line string, CRLF line ends) leaves the lock to the whole, strict read."""
    lock = big_lock(kernels=3, environments=4, files=2)
    text = lockfile.dumps(lock)
    env = lock.environments[0]
    assert _environment_view(text, env) == _whole_view(text, env)
    edited = text.replace('ref = "v4"', 'ref = "v5"', 1)
    reheaded = text.replace("[[kernel.variant]]", "[[ kernel.variant ]]", 1)
    indented = text.replace("\n[[kernel]]\n", "\n  [[kernel]]\n", 1)
    hidden = text.replace("\n[[kernel.variant]]\n", '\nx = """\n[[kernel.variant]]\n"""\n', 1)
    for other in (edited, reheaded, indented, hidden, text.replace("\n", "\r\n")):
        assert _environment_view(other, env) is None
