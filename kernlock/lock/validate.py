"""The parsed TOML of a kernels.lock checked against the schema declared beside the model
(:mod:`kernlock.lock.schema`): the lock-version it says it is, the keys each table may hold there, the required
ones, each value by its declared kind; errors name the line of the offending entry. :mod:`kernlock.lock.file`
parses the text and checks its content-hash and bytes around it."""

from __future__ import annotations

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
    VERSION_KEY,
    Field,
    fields,
    known_keys,
    present_in,
)
from kernlock.util.wording import noun
from kernlock.variants import RULES

__all__ = ["REPAIR", "Validator", "damaged"]


#: The fix every refusal of a damaged lock names: both work on an unmerged path in the middle of a merge (a plain
#: `git checkout kernels.lock` does not).
REPAIR = (
    "run `kernlock lock` to repair it (it keeps every pin it can still read and prints each change), or restore "
    "the committed lock with `git checkout HEAD -- kernels.lock`"
)


def damaged(where: str, why: str) -> DamagedLockError:
    """The refusal of a lock that fails its checks: where, what failed, and the two fixes."""
    return DamagedLockError(f"{where}: {why}; {REPAIR}.", why)


class Validator:
    """Checks the parsed TOML against the schema declared beside the model (:mod:`kernlock.lock.schema`): the keys
    each table may hold at the lock's version, the required ones, each value by its declared kind; errors carry the
    line of the offending entry."""

    def __init__(self, text: str, where: str) -> None:
        self.where = where
        self.version = LOCK_VERSION  # the version whose keys are read (a legacy lock's pins are read with today's)
        self.written = LOCK_VERSION  # the version the lock says it is
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
        unknown = set(data) - known_keys(Lock, self.version) - {CREATED_BY, HASH_KEY}
        if unknown:
            raise self.fail(f"unknown top-level {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}")
        if data.get(CREATED_BY) != "kernlock":
            raise self.fail('`created-by` is not "kernlock"')
        recorded = data.get(HASH_KEY)
        if current and (not isinstance(recorded, str) or not re.fullmatch(DIGEST, recorded)):
            raise self.fail("`content-hash` is missing or not a sha256 digest")
        values = self.values(Lock, data, None)
        try:
            lock = Lock(**values, version=self.version)
        except ValueError as err:
            raise self.fail(str(err)) from None
        return lock, recorded if current else None

    def _version(self, version: str, legacy: bool) -> None:
        """Refuse a lock-version this kernlock does not read (a legacy one only for its pins)."""
        if version in READ_VERSIONS or (legacy and version in LEGACY_VERSIONS):
            return
        if version in LEGACY_VERSIONS:
            raise LockError(
                f"{self.where} has lock-version {version!r}, written by an older kernlock; run `kernlock lock` "
                f"to rewrite it as lock-version {LOCK_VERSION!r} (every pin is kept)."
            )
        raise LockError(
            f"{self.where} has lock-version {version!r}, but this kernlock reads lock-version "
            f"{LOCK_VERSION!r}; upgrade kernlock (`pip install -U kernlock`) to read it (if the line was edited, "
            "restore the committed lock with `git checkout HEAD -- kernels.lock`)."
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
            if not isinstance(value, str) or not re.fullmatch(DIGEST, value):
                raise self.fail(f"`{spec.key}` is missing or not a sha256 digest", index)
            return value
        if kind == "rule":
            if not isinstance(value, str) or not re.fullmatch(LOADER_RULE, value):
                raise self.fail(f'`{spec.key}` is missing or not a loader generation like "kernels-0.19"', index)
            if value not in RULES:
                raise LockError(
                    f"{self.where} chose its variants by the {value} loader rule, which this kernlock does not know "
                    f"(it follows {', '.join(RULES)}): a newer kernlock made it; upgrade kernlock (`pip install -U "
                    "kernlock`) to use it."
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
        """A model object of ``cls`` from its table: no key its lock's version lacks, each declared field read by
        its kind, then the model's own checks."""
        unknown = set(data) - known_keys(cls, self.version)
        if unknown:
            raise self.fail(f"{where}unknown {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}", index)
        values = self.values(cls, data, index)
        try:
            return cls(**values)
        except ValueError as err:
            raise self.fail(str(err), index) from None

    def files(self, spec: Field, value: Any, index: int | None, variant: str) -> tuple[Any, ...]:
        """A variant's ``files``: inline tables of exactly the declared keys of a file."""
        if not isinstance(value, list) or not value:
            raise self.fail(f"variant {variant!r} has no `{spec.key}`", index)
        assert spec.table is not None
        declared = fields(spec.table)
        keys = {f.key for f in declared}
        parsed = []
        for item in value:
            if not isinstance(item, dict) or set(item) != keys:
                raise self.fail(f"variant {variant!r} has a malformed file entry {item!r}", index)
            try:
                parsed.append(spec.table(**{f.attr: item[f.key] for f in declared}))
            except ValueError as err:
                raise self.fail(f"variant {variant!r}: {err}", index) from None
        return tuple(parsed)

    def signature(self, spec: Field, value: Any, index: int | None, variant: str) -> Signature | str | None:
        """A variant's ``signature``: ``"unsigned"`` or a table of every key of a :class:`Signature`; None when
        absent."""
        if value is None or value == UNSIGNED:
            return value  # type: ignore[no-any-return]
        assert spec.table is not None
        declared = fields(spec.table)
        keys = {f.key for f in declared}
        if not isinstance(value, dict) or set(value) != keys:
            raise self.fail(
                f'variant {variant!r}: `{spec.key}` must be "unsigned" or a table of {", ".join(sorted(keys))}',
                index,
            )
        try:
            return spec.table(**{f.attr: value[f.key] for f in declared})  # type: ignore[no-any-return]
        except (ValueError, TypeError) as err:
            raise self.fail(f"variant {variant!r}: {err}", index) from None

    def _strings(self, value: Any, key: str, index: int | None = None, allow_empty: bool = False) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"`{key}` must be a list of strings", index)
        if not value and not allow_empty:
            raise self.fail(f"`{key}` is empty", index)
        return tuple(value)
