"""The parsed TOML of a kernels.lock checked against the schema declared beside the model
(:mod:`kernlock.lock.schema`): the lock-version and revision it says it is, the keys each table may hold there,
the required ones, each value by its declared kind; errors name the line of the offending entry.
:mod:`kernlock.lock.file` parses the text and checks its content-hash and bytes around it."""

from __future__ import annotations

import functools
import re
from typing import Any

from kernlock.errors import DamagedLockError, LockError
from kernlock.lock.model import DIGEST, UNSIGNED, EnvironmentFacts, Lock, LockedKernel, LockedVariant, Signature
from kernlock.lock.schema import (
    CREATED_BY,
    HASH_KEY,
    LEGACY_VERSIONS,
    LOADER_RULE,
    LOCK_VERSION,
    READ_VERSIONS,
    REVISION_KEY,
    VERSION_KEY,
    Field,
    fields,
    known_keys,
    latest_revision,
    present_in,
)
from kernlock.util.wording import noun
from kernlock.variants import RULES

__all__ = ["REPAIR", "Validator", "damaged", "entry_from_index"]


#: The fix every refusal of a damaged lock names: both work on an unmerged path in the middle of a merge (a plain
#: `git checkout kernels.lock` does not).
REPAIR = (
    "run `kernlock lock` to repair it (it keeps every pin it can still read and prints each change), or restore "
    "the committed lock with `git checkout HEAD -- kernels.lock`"
)


def damaged(where: str, why: str) -> DamagedLockError:
    """The refusal of a lock that fails its checks: where, what failed, and the two fixes."""
    return DamagedLockError(where, why=why, fix=REPAIR)


#: A key a newer kernlock may have added (the form of every key kernlock writes): only such a key is skipped in a
#: lock of a newer revision; anything else is damage there too.
_NEW_KEY = re.compile(r"[a-z][a-z0-9-]{0,63}")
_DIGEST, _LOADER_RULE = re.compile(DIGEST), re.compile(LOADER_RULE)


class Validator:
    """Checks the parsed TOML against the schema declared beside the model (:mod:`kernlock.lock.schema`): the keys
    each table may hold at the lock's version and revision, the required ones, each value by its declared kind;
    errors carry the line of the offending entry. A lock of a revision newer than this kernlock knows is read
    without the keys it does not know (:attr:`skipped`, :meth:`warning`)."""

    def __init__(self, text: str, where: str, *, full: bool = True) -> None:
        self.where = where
        self.full = full  # every check; else (:func:`entry_from_index`) the model's light ones
        self.version = LOCK_VERSION  # the version whose keys are read (a legacy lock's pins are read with today's)
        self.written = LOCK_VERSION  # the version the lock says it is
        self.revision: int | None = None  # the revision whose keys are read (None: any, for a legacy lock's pins)
        self.newer: int | None = None  # the lock's revision, when it is newer than this kernlock knows
        self.skipped: set[str] = set()  # the keys of a newer revision this kernlock read past
        self.kernel_lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == "[[kernel]]"]

    def fail(self, message: str, entry: int | None = None) -> DamagedLockError:
        if entry is not None and entry < len(self.kernel_lines):
            message = f"line {self.kernel_lines[entry]} ([[kernel]] #{entry + 1}): {message}"
        return damaged(self.where, message)

    def lock(self, data: dict[str, Any], legacy: bool) -> tuple[Lock, str | None]:
        """The Lock and its recorded content-hash (None for a legacy lock-version)."""
        version = data.get(VERSION_KEY)
        if not isinstance(version, str):
            raise self.fail("`lock-version` is missing or not a string")
        self._version(version, legacy)
        current = version in READ_VERSIONS
        self.version, self.written = (version if current else LOCK_VERSION), version
        if current:
            self._revision(data.get(REVISION_KEY, 0))
        unknown = self.unknown(Lock, data, {CREATED_BY, HASH_KEY, REVISION_KEY})
        if unknown:
            raise self.fail(f"unknown top-level {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}")
        if data.get(CREATED_BY) != "kernlock":
            raise self.fail('`created-by` is not "kernlock"')
        recorded = data.get(HASH_KEY)
        if current and (not isinstance(recorded, str) or not _DIGEST.fullmatch(recorded)):
            raise self.fail("`content-hash` is missing or not a sha256 digest")
        values = self.values(Lock, data, None)
        try:
            lock = Lock(**values, version=self.version)
        except ValueError as err:
            raise self.fail(str(err)) from None
        return lock, recorded if current else None

    def _revision(self, revision: Any) -> None:
        """The lock's ``lock-revision`` (absent: 0): the keys of that revision are read, and a revision newer than
        this kernlock knows is read with the keys it knows, skipping the others."""
        if type(revision) is not int or revision < 0:
            raise self.fail(f"`{REVISION_KEY}` is not a whole number")
        latest = latest_revision(Lock, self.version)
        self.revision = min(revision, latest)
        self.newer = revision if revision > latest else None

    def unknown(self, cls: type, table: dict[Any, Any], besides: set[str] | frozenset[str] = frozenset()) -> set[Any]:
        """The keys of ``table`` (of model class ``cls``) its lock's version and revision do not have, but
        ``besides``; in a lock of a newer revision, only those not of the form a newer kernlock writes (the others
        are skipped, and named in :meth:`warning`)."""
        known = known_keys(cls, self.version, self.revision)
        if known.issuperset(table):
            return set()  # the common case, without building a set
        unknown = set(table) - known - besides
        if unknown and self.newer is not None:
            added = {k for k in unknown if isinstance(k, str) and _NEW_KEY.fullmatch(k)}
            self.skipped |= added
            unknown -= added
        return unknown

    def warning(self) -> str | None:
        """The one line that says a newer kernlock wrote the lock and what this one read past, or None."""
        if self.newer is None:
            return None
        keys = sorted(self.skipped)
        named = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        without = f"without {named}, which" if keys else "without what"
        return (
            f"warning: {self.where} has lock-revision {self.newer} of lock-version {self.version}, newer than this "
            f"kernlock knows ({self.revision}): it is read {without} a newer kernlock added (a lock this one writes "
            "leaves them out); upgrade kernlock (`pip install -U kernlock`) to keep them."
        )

    def _version(self, version: str, legacy: bool) -> None:
        """Refuse a lock-version this kernlock does not read (a legacy one only for its pins)."""
        if version in READ_VERSIONS or (legacy and version in LEGACY_VERSIONS):
            return
        if version in LEGACY_VERSIONS:
            raise LockError(
                f"{self.where} has lock-version {version!r}, written by an older kernlock",
                fix=f"run `kernlock lock` to rewrite it as lock-version {LOCK_VERSION!r} (every pin is kept)",
            )
        raise LockError(
            f"{self.where} has lock-version {version!r}, but this kernlock reads lock-version {LOCK_VERSION!r}",
            fix="upgrade kernlock (`pip install -U kernlock`) to read it (if the line was edited, restore the "
            "committed lock with `git checkout HEAD -- kernels.lock`)",
        )

    def values(self, cls: type, data: dict[str, Any], index: int | None) -> dict[str, Any]:
        """The model arguments of a table of ``cls``, each declared field read by its kind; an optional field
        absent gets its default, and so does a field the lock's version did not have yet (a legacy lock)."""
        found = {}
        for spec in fields(cls):
            if spec.kind == "version":
                continue
            if spec.key not in data and (spec.optional or not present_in(spec, self.written)):
                continue
            found[spec.attr] = self.value(spec, data.get(spec.key), index, data)
        return found

    def value(self, spec: Field, value: Any, index: int | None, parent: dict[str, Any]) -> Any:
        """One field's value, checked as its kind says (the model checks the rest when it is constructed)."""
        kind = spec.kind
        if kind == "text":
            if not isinstance(value, str) or not value:
                raise self.fail(f"missing or empty `{spec.key}`", index)
            return value
        if kind == "int":
            if type(value) is not int:
                raise self.fail(f"`{spec.key}` is missing or not an integer", index)
            return value
        if kind == "strings":
            return self._strings(value, spec.key, index, allow_empty=spec.empty or spec.optional)
        if kind == "digest":
            if not isinstance(value, str) or not _DIGEST.fullmatch(value):
                raise self.fail(f"`{spec.key}` is missing or not a sha256 digest", index)
            return value
        if kind == "rule":
            if not isinstance(value, str) or not _LOADER_RULE.fullmatch(value):
                raise self.fail(f'`{spec.key}` is missing or not a loader generation like "kernels-0.19"', index)
            if value not in RULES:
                raise LockError(
                    f"{self.where} chose its variants by the {value} loader rule, which this kernlock does not know "
                    f"(it follows {', '.join(RULES)})",
                    why="a newer kernlock made it",
                    fix="upgrade kernlock (`pip install -U kernlock`) to use it",
                )
            return value
        if kind == "tables":
            return self.tables(spec, value, index)
        if kind == "rows":
            return self.files(spec, value, index, parent["name"])
        if kind == "signature":
            return self.signature(spec, value, index, parent["name"])
        if kind == "facts":
            return self.facts(value)
        raise TypeError(f"{spec.key}: a field of kind {kind!r} has no reader")  # pragma: no cover - a new kind

    def tables(self, spec: Field, value: Any, index: int | None) -> tuple[Any, ...]:
        """An array of tables: the lock's ``[[kernel]]`` entries, an entry's ``[[kernel.variant]]``."""
        if spec.table is LockedKernel:
            if not isinstance(value, list):
                raise self.fail(f"`{spec.key}` must be an array of tables ([[{spec.key}]])")
            return tuple(self.kernel(item, i) for i, item in enumerate(value))
        if not isinstance(value, list) or not value:
            raise self.fail(f"entry has no [[kernel.{spec.key}]]", index)
        return tuple(self.variant(item, index) for item in value)

    def facts(self, value: Any) -> tuple[EnvironmentFacts, ...]:
        """``environment-facts``: a list of ``{name, <facts>}`` tables (checked in full by the Lock)."""
        if not isinstance(value, list) or not all(
            isinstance(v, dict) and isinstance(v.get("name"), str) for v in value
        ):
            raise self.fail("`environment-facts` must be a list of tables with a `name`")
        found = []
        for item in value:
            items = []
            for key, fact in item.items():
                if key == "name":
                    continue
                if isinstance(fact, list):
                    fact = tuple(fact)
                if not isinstance(fact, (str, tuple)) or (
                    isinstance(fact, tuple) and not all(isinstance(f, str) for f in fact)
                ):
                    raise self.fail(
                        f"environment-facts of {item['name']!r}: `{key}` must be a string or a list of strings"
                    )
                items.append((key, fact))
            found.append((item["name"], tuple(items)))
        return tuple(found)

    def kernel(self, data: Any, index: int) -> LockedKernel:
        if not isinstance(data, dict):
            raise self.fail("entry is not a table", index)
        made: LockedKernel = self.made(LockedKernel, data, index, "")
        return made

    def variant(self, data: Any, index: int | None) -> LockedVariant:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise self.fail("a [[kernel.variant]] has no `name`", index)
        made: LockedVariant = self.made(LockedVariant, data, index, f"variant {data['name']!r} has ")
        return made

    def made(self, cls: type, data: dict[str, Any], index: int | None, where: str) -> Any:
        """A model object of ``cls`` from its table: no key its lock's version and revision lack, each declared
        field read by its kind, then the model's own checks."""
        unknown = self.unknown(cls, data)
        if unknown:
            raise self.fail(f"{where}unknown {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}", index)
        values = self.values(cls, data, index)
        try:
            if self.full:
                return cls(**values)
            made: Any = object.__new__(cls)  # the model's light checks only (no variant grammar, no loader rule)
            for spec in fields(cls):
                object.__setattr__(made, spec.attr, values.get(spec.attr, spec.default))  # as a frozen __init__ does
            made._validate(full=False)
            return made
        except ValueError as err:
            raise self.fail(str(err), index) from None

    def files(self, spec: Field, value: Any, index: int | None, variant: str) -> tuple[Any, ...]:
        """A variant's ``files``: inline tables of the declared keys of a file."""
        if not isinstance(value, list) or not value:
            raise self.fail(f"variant {variant!r} has no `{spec.key}`", index)
        assert spec.table is not None
        parsed = []
        for item in value:
            args = self.row(spec.table, item)
            if args is None:
                raise self.fail(f"variant {variant!r} has a malformed file entry {item!r}", index)
            try:
                parsed.append(spec.table(**args))
            except ValueError as err:
                raise self.fail(f"variant {variant!r}: {err}", index) from None
        return tuple(parsed)

    def signature(self, spec: Field, value: Any, index: int | None, variant: str) -> Signature | str | None:
        """A variant's ``signature``: ``"unsigned"`` or a table of the declared keys of a :class:`Signature`; None
        when absent."""
        if value is None or value == UNSIGNED:
            return value  # type: ignore[no-any-return]
        assert spec.table is not None
        args = self.row(spec.table, value)
        if args is None:
            keys = ", ".join(sorted(f.key for f in fields(spec.table) if not f.optional))
            raise self.fail(f'variant {variant!r}: `{spec.key}` must be "unsigned" or a table of {keys}', index)
        try:
            return spec.table(**args)  # type: ignore[no-any-return]
        except (ValueError, TypeError) as err:
            raise self.fail(f"variant {variant!r}: {err}", index) from None

    def row(self, cls: type, item: Any) -> dict[str, Any] | None:
        """The model arguments of an inline table of ``cls`` (a file, a signature), or None when it lacks a required
        key of the lock's version and revision or holds one it does not know."""
        if not isinstance(item, dict):
            return None
        declared, required, whole = _row_plan(cls, self.version, self.revision)
        if whole is not None and item.keys() == whole:
            return item  # every key, each named as its argument: the common case, checked by the model
        if self.unknown(cls, item) or not required <= item.keys():
            return None
        return {f.attr: item[f.key] for f in declared if f.key in item}

    def _strings(self, value: Any, key: str, index: int | None = None, allow_empty: bool = False) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"`{key}` must be a list of strings", index)
        if not value and not allow_empty:
            raise self.fail(f"`{key}` is empty", index)
        return tuple(value)


@functools.lru_cache(maxsize=64)
def _row_plan(
    cls: type, version: str, revision: int | None
) -> tuple[tuple[Field, ...], frozenset[str], frozenset[str] | None]:
    """The fields of inline table ``cls`` at ``version`` and ``revision``, the keys of the required ones, and all
    their keys when each key is also its argument's name (a table with exactly those keys is passed as it is)."""
    declared = tuple(f for f in fields(cls) if present_in(f, version, revision))
    keys = frozenset(f.key for f in declared)
    whole = keys if all(f.key == f.attr for f in declared) else None
    return declared, frozenset(f.key for f in declared if not f.optional), whole


def entry_from_index(table: object) -> LockedKernel:
    """An entry from its table (:func:`kernlock.lock.document.entry_table`) in the run-time index
    (:mod:`kernlock.lock.index`) or a remembered `verify` plan, which kernlock wrote from a lock it had read in full
    and keeps where only this user can write. Read by the same reader as the lock, in its light mode: every key and
    value by its declared kind, every part a path is built from and the entry's shape; the variant grammar and the
    loader's rule, checked when the lock was read, are not (a load would import them: ~5 ms). ValueError for a
    table that is not such an entry (an index this kernlock does not read: the caller derives it again)."""
    if not isinstance(table, dict):
        raise ValueError(f"not a table: {table!r}")
    try:
        return Validator("", "the index", full=False).kernel(table, 0)
    except LockError as err:
        raise ValueError(err.why or str(err)) from None
