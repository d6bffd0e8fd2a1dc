"""Golden locks (tests/data/locks, its README says what each is): real kernels.lock files of the test Hub's catalog,
written by the current writer and read by the current reader; and the lock's schema, declared once beside the
model (kernlock.lock.schema), carried by reader, writer and JSON views for every declared field.

The goldens are compared, not rewritten: a writer or resolver that drifts fails here. After a deliberate change
(a new lock field) regenerate them with ``KERNLOCK_REGENERATE_GOLDEN=1`` on this module and review the diff.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest
from projects import CPU_ENV, fresh_hub

from kernlock import api
from kernlock.errors import DamagedLockError
from kernlock.lock import changes, document, pins, schema
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant, Signature
from kernlock.resolve.outdated import Row
from kernlock.testing import Catalog, HubServer
from kernlock.util import tomlwrite

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCKS = Path(__file__).resolve().parents[1] / "data" / "locks"
REGENERATE = os.environ.get("KERNLOCK_REGENERATE_GOLDEN") == "1"
CUDA_ENV = "torch212-cxx11-cu129-x86_64-linux"
OTHER_CUDA_ENV = "torch213-cxx11-cu130-x86_64-linux"
MODELS = (Lock, LockedKernel, LockedVariant, LockedFile, Signature)
#: Every lock-version kernlock reads as it is, oldest first; the current one is last.
READ = schema.READ_VERSIONS
CURRENT = f"v{schema.LOCK_VERSION}.lock"


def _pyproject(environments: list[str]) -> str:
    """The golden project: one kernel with a kernel dependency (``required-by``), over ``environments``."""
    listed = ",\n".join(f"  {env}" for env in environments)
    return (
        '[project]\nname = "golden"\nversion = "0.1.0"\n\n[tool.kernlock]\n'
        f'environments = [\n{listed},\n]\n\n[tool.kernlock.kernels]\n"kernels-community/paged-attention" = "v1"\n'
    )


#: The project of the golden locks (v<N>.lock): a CPU environment and a CUDA one declared with facts
#: (``environment-facts``).
OURS = _pyproject([f'"{CPU_ENV}"', f'{{ name = "{CUDA_ENV}", cuda-capabilities = ["9.0"] }}'])
#: The two other sides of conflicted.lock: the lock both branches started from, and the other branch's.
BASE = _pyproject([f'"{CPU_ENV}"'])
THEIRS = _pyproject([f'"{CPU_ENV}"', f'"{OTHER_CUDA_ENV}"'])


def golden(name: str) -> str:
    return (LOCKS / name).read_text(encoding="utf-8")


def _lock_project(folder: Path, pyproject: str, hub: HubServer) -> str:
    folder.mkdir()
    (folder / "pyproject.toml").write_text(pyproject)
    api.lock(folder, hub=fresh_hub(hub))
    return (folder / "kernels.lock").read_text(encoding="utf-8")


def versions(lock: Lock) -> dict[str, str]:
    """The golden of every lock-version kernlock reads, ``v<N>.lock``: ``lock`` as the writer writes it at that
    version (the fields the version has, by their declared ``since``)."""
    return {f"v{version}.lock": lockfile.dumps(dataclasses.replace(lock, version=version)) for version in READ}


def hand_edited(text: str) -> str:
    """``text`` as a person edits it: comments added, top-level keys and an entry's keys reordered (the
    content-hash line left as it was)."""
    lines = text.split("\n")
    created = lines.index('created-by = "kernlock"')
    lines.insert(created + 2, lines.pop(created))  # created-by below requires-hash
    requested = next(i for i, line in enumerate(lines) if line.startswith("requested = "))
    lines[requested], lines[requested + 1] = lines[requested + 1], lines[requested]  # ref before requested
    lines.insert(requested, "# bumped by hand for the release")
    lines[0] += "  (but we did)"
    return "\n".join(lines)


def conflicted(base: str, ours: str, theirs: str, folder: Path) -> str:
    """What git leaves in kernels.lock when both branches re-locked from ``base`` (``git merge-file``)."""
    paths = []
    for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
        path = folder / f"{name}.lock"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    labels = ["-L", "HEAD", "-L", "base", "-L", "add-cu130"]
    merged = subprocess.run(["git", "merge-file", "-p", *labels, *paths], capture_output=True, text=True)
    assert merged.returncode > 0, "the two sides merged without a conflict"
    return merged.stdout


def rehash(text: str) -> str:
    return re.sub(r'content-hash = "[^"]*"', f'content-hash = "{lockfile.content_hash(text)}"', text, count=1)


def _pins(lock: Lock) -> set[tuple[str, str, str]]:
    return {(k.repo, k.requested, k.commit) for k in lock.kernels}


# -- the goldens are what the current writer gives --------------------------------------------------------------


def test_the_current_resolver_and_writer_give_the_golden_locks(
    catalog: Catalog, hub: HubServer, user_env: dict, tmp_path: Path
) -> None:
    ours = _lock_project(tmp_path / "ours", OURS, hub)
    made = {
        **versions(lockfile.loads(ours)),
        "hand-edited.lock": hand_edited(ours),
        "conflicted.lock": conflicted(
            _lock_project(tmp_path / "base", BASE, hub), ours, _lock_project(tmp_path / "theirs", THEIRS, hub), tmp_path
        ),
    }
    if REGENERATE:
        LOCKS.mkdir(parents=True, exist_ok=True)
        for name, text in made.items():
            (LOCKS / name).write_text(text, encoding="utf-8")
    for name, text in made.items():
        assert golden(name) == text, f"tests/data/locks/{name} is not what kernlock writes now (see this module)"


def test_the_current_version_reads_and_writes_back_byte_for_byte() -> None:
    text = golden(CURRENT)
    lock = lockfile.loads(text)
    assert lock.version == schema.LOCK_VERSION == READ[-1]
    assert lockfile.dumps(lock) == text
    variants = [v for k in lock.kernels for v in k.variants]
    assert any(isinstance(v.signature, Signature) for v in variants)
    assert any(k.required_by for k in lock.kernels) and lock.facts


@pytest.mark.parametrize("version", READ[:-1])
def test_an_older_version_is_read_as_it_is_without_what_came_later(version: str) -> None:
    text, current = golden(f"v{version}.lock"), lockfile.loads(golden(CURRENT))
    lock = lockfile.loads(text)
    assert lock.version == version and lockfile.dumps(lock) == text
    assert _pins(lock) == _pins(current)
    for cls, key, values in _values(lock):  # what the version does not have is read as its default
        spec = next(f for f in schema.fields(cls) if f.key == key)
        if not schema.present_in(spec, version):
            assert all(value == spec.default for value in values), (cls.__name__, key)


#: The document's keys that are no field of the model: who wrote it, its hash, the revision of its version.
HEADER = {schema.CREATED_BY, schema.HASH_KEY, schema.REVISION_KEY}


def test_a_lock_of_each_version_is_written_with_exactly_the_fields_that_version_has() -> None:
    current = lockfile.loads(golden(CURRENT))
    for version in READ:
        text = lockfile.dumps(dataclasses.replace(current, version=version))
        for cls, tables in _tables(tomllib.loads(text)).items():
            written = {key for table in tables for key in table} - HEADER
            assert written <= {f.key for f in schema.fields(cls) if schema.present_in(f, version)}, (version, cls)
        assert lockfile.loads(text).version == version  # its own reader reads it


def test_a_hand_edited_lock_is_refused_and_its_pins_are_read_back() -> None:
    text, current = golden("hand-edited.lock"), lockfile.loads(golden(CURRENT))
    with pytest.raises(DamagedLockError, match="edited after kernlock wrote it"):
        lockfile.loads(text)
    with pytest.raises(DamagedLockError, match="not laid out as kernlock writes it"):
        lockfile.loads(rehash(text))
    assert lockfile.loads(rehash(text), canonical=False) == current  # a re-formatted lock keeps every pin
    read, unreadable = pins.read_pins(text)
    assert {(p.repo, p.requested, p.commit) for p in read} == _pins(current) and unreadable == []


def test_a_conflicted_lock_is_refused_and_both_sides_pins_are_read_back() -> None:
    text, current = golden("conflicted.lock"), lockfile.loads(golden(CURRENT))
    assert "<<<<<<< HEAD\n" in text and ">>>>>>> add-cu130\n" in text
    with pytest.raises(DamagedLockError, match="merge-conflict markers"):
        lockfile.loads(text)
    sides = pins.sides(text)
    assert sides is not None and [label for label, _ in sides] == ["ours (HEAD)", "theirs (add-cu130)"]
    for label, side in sides:
        read, unreadable = pins.read_pins(side, label)
        assert {(p.repo, p.requested, p.commit) for p in read} == _pins(current) and unreadable == [], label


# -- the schema, declared once ----------------------------------------------------------------------------------


def _tables(data: dict[str, Any]) -> dict[type, list[dict[str, Any]]]:
    """Every table of a parsed lock, by the model class it holds."""
    found: dict[type, list[dict[str, Any]]] = {Lock: [data], LockedKernel: data.get("kernel", [])}
    found[LockedVariant] = [v for k in found[LockedKernel] for v in k["variant"]]
    found[LockedFile] = [f for v in found[LockedVariant] for f in v["files"]]
    found[Signature] = [v["signature"] for v in found[LockedVariant] if isinstance(v.get("signature"), dict)]
    return found


def test_every_model_field_is_declared_and_in_the_golden_locks_of_its_versions() -> None:
    for version in READ:
        data = tomllib.loads(golden(f"v{version}.lock"))
        assert data["lock-version"] == version
        for cls, tables in _tables(data).items():
            written = {key for table in tables for key in table} - HEADER
            declared = {f.key for f in schema.fields(cls) if schema.present_in(f, version)}
            assert written == declared, (version, cls.__name__)  # each key in the golden of every version it is in


def _values(lock: Lock) -> list[tuple[type, str, list[Any]]]:
    """Every declared field of every model object of ``lock``: (model class, key, its values)."""
    objects: dict[type, list[Any]] = {Lock: [lock], LockedKernel: list(lock.kernels)}
    objects[LockedVariant] = [v for k in lock.kernels for v in k.variants]
    objects[LockedFile] = [f for v in objects[LockedVariant] for f in v.files]
    objects[Signature] = [v.signature for v in objects[LockedVariant] if isinstance(v.signature, Signature)]
    return [(cls, f.key, [getattr(o, f.attr) for o in got]) for cls, got in objects.items() for f in schema.fields(cls)]


def _document(data: dict[str, Any]) -> str:
    text = tomlwrite.dumps(data, document.HEADER)
    head, sep, rest = text.partition("\nenvironments = ")
    return rehash(f'{head}\ncontent-hash = ""{sep}{rest}')


def _without(data: dict[str, Any], keys: set[tuple[type, str]]) -> dict[str, Any]:
    """A copy of a parsed lock without ``keys`` (model class, key) in any table, labelled its version."""
    copy = deepcopy(data)
    for cls, tables in _tables(copy).items():
        for table in tables:
            for key in [key for key in table if (cls, key) in keys]:
                del table[key]
    return copy


def test_every_declared_field_is_read_at_the_versions_that_have_it_and_refused_before() -> None:
    data = tomllib.loads(golden(CURRENT))
    del data[schema.HASH_KEY]
    revision = data.pop(schema.REVISION_KEY, 0)  # a revision belongs to its version: the others are read without
    for version in schema.READ_VERSIONS:
        data[schema.VERSION_KEY] = version
        at = revision if version == schema.LOCK_VERSION else 0
        if at:
            data[schema.REVISION_KEY] = at
        else:
            data.pop(schema.REVISION_KEY, None)
        later = {(cls, f.key) for cls in MODELS for f in schema.fields(cls) if not schema.present_in(f, version, at)}
        for cls, key in later:  # a key of a later version alone in a lock of this one: refused, by name
            alone = _without(data, later - {(cls, key)})
            if any(key in table for table in _tables(alone)[cls]):  # (not a key of a table that came later too)
                with pytest.raises(DamagedLockError, match=f"unknown .*key.* {key}"):
                    lockfile.loads(_document(alone), canonical=False)
        assert lockfile.loads(_document(_without(data, later)), canonical=False).version == version


def test_every_declared_field_round_trips_through_reader_writer_and_the_json_views(
    catalog: Catalog, hub: HubServer, user_env: dict, tmp_path: Path
) -> None:
    text = golden(CURRENT)
    data, lock = tomllib.loads(text), lockfile.loads(text)
    # reader then writer: each model object gives back, key for key, the table it was read from
    assert [document.entry_table(k) for k in lock.kernels] == data["kernel"]
    assert {k: v for k, v in data.items() if k != "kernel"} == {
        k: v for k, v in document.plain(lock).items() if k != "kernel"
    } | {schema.CREATED_BY: "kernlock", schema.HASH_KEY: data[schema.HASH_KEY]} | (
        {schema.REVISION_KEY: data[schema.REVISION_KEY]} if schema.REVISION_KEY in data else {}
    )
    # the JSON views carry every plain field of an entry under its lock key, an empty list too
    plain = [f for f in schema.fields(LockedKernel) if f.plain]
    assert {f.key for f in plain} >= {"repo", "requested", "ref", "commit", "environments", "required-by"}
    (tmp_path / "pyproject.toml").write_text(OURS)
    (tmp_path / "kernels.lock").write_text(text)
    shown = api.show(tmp_path).rows
    for i, entry in enumerate(lock.kernels):
        table = data["kernel"][i]
        expected = {f.key: table.get(f.key, []) for f in plain}
        assert document.entry_view(entry) == expected
        assert changes.Change(kind="added", repo=entry.repo, old=None, new=entry).as_dict()["new"] == expected
        outdated = Row(entry=entry, moved=None, gone=False, newest=None, upgrade=None).as_dict()
        assert {key: outdated[key] for key in expected} == expected
        assert {key: shown[i][key] for key in expected} == expected
