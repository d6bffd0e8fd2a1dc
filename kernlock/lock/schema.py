"""The lock's schema, declared once: which lock-versions kernlock writes and reads, and, beside each field of the
lock model (:mod:`kernlock.lock.model` declares them with :func:`key`), its key in kernels.lock, the lock-version it
appeared in, how the reader checks it and whether it is written inline.

Everything else derives from this declaration: the writer (:mod:`kernlock.lock.document`: key names, order, what is
left out, what is inline, what is sorted), the reader (:mod:`kernlock.lock.file`: the keys each table may hold at
its lock-version, which are required, how each is checked) and the JSON views of an entry (``show --json``,
``outdated --json`` and the changes it lists). A new field is one declaration in the model, the code that
fills it (the resolver), its line in docs/lockfile.md and the golden locks of tests/data/locks regenerated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CREATED_BY",
    "HASH_KEY",
    "INDEX_VERSION",
    "LEGACY_VERSIONS",
    "LOADER_RULE",
    "LOCK_VERSION",
    "READ_VERSIONS",
    "RECORDS",
    "VERSION_KEY",
    "Field",
    "fields",
    "fields_in",
    "key",
    "known_keys",
    "present_in",
]

# -- versions ---------------------------------------------------------------------------------------------------
# A field's `since` names the version it came with. A new field raises the version: an older kernlock then says to
# upgrade it instead of calling the lock damaged.

#: What each lock-version brought, as `kernlock lock` says when it rewrites an older lock.
RECORDS = {
    "1": "the pins and files of each variant (kernlock 0.1)",
    "2": "a content-hash, the loader rule that chose the variants and the facts of declared environments",
    "3": "who signed each build",
}
#: The lock-version this kernlock writes.
LOCK_VERSION = "3"
#: The lock-versions every command reads as they are (an older one is rewritten by the next `kernlock lock`).
READ_VERSIONS = ("2", LOCK_VERSION)
#: Older lock-versions only `kernlock lock` reads, for their pins (then rewrites); every other command refuses them.
LEGACY_VERSIONS = ("1",)
#: The format of the run-time index's own keys (:mod:`kernlock.lock.index`), not a lock-version: its entries are lock
#: tables read with this schema, so a new lock field needs no bump (an entry this kernlock cannot read makes it
#: derive the index again); bump it only when the index's own keys change.
INDEX_VERSION = 1
#: The shape of a ``variant-rule`` value: the loader generation whose selection rule chose the variants
#: (``kernels-0.17``; :data:`kernlock.variants.grammar.RULE` is the one this kernlock writes). Not a lock-version: a
#: lock made by another rule is stale (`kernlock lock` re-chooses), not unreadable.
LOADER_RULE = r"kernels-[0-9]{1,3}\.[0-9]{1,3}"

#: Keys of the document that are no field of the model: the version (:attr:`Lock.version`, checked before the rest),
#: ``created-by = "kernlock"`` and the ``content-hash`` of the text (lock-version 2 on).
VERSION_KEY = "lock-version"
CREATED_BY = "created-by"
HASH_KEY = "content-hash"


# -- fields -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """One field of a model class as kernels.lock holds it.

    ``kind`` says how the reader checks the value: ``text`` (a non-empty string), ``strings`` (a list of strings,
    written sorted without repeats), ``digest`` (``sha256:<hex>``), ``rule`` (a loader generation), ``int``,
    ``tables`` (an array of tables of ``table``), ``rows`` (a sorted array of inline tables of ``table``),
    ``signature`` (a ``table`` or a word), ``facts`` (environment facts) or ``version`` (``lock-version``).
    ``inline``: written inline among its table's values (``signature = {...}``, ``files = [{...}, ...]``).
    ``empty``: a list that may be empty although the field has no default. ``attr`` and ``default`` are filled in
    by :func:`fields` from the dataclass field (``dataclasses.MISSING``: it has no default).
    """

    key: str
    since: str = "1"
    kind: str = "text"
    inline: bool = False
    table: type | None = None
    empty: bool = False
    attr: str = ""
    default: Any = None

    @property
    def optional(self) -> bool:
        """Whether the key may be left out: a field whose default is empty (None, an empty list) is not written at
        that default and is read as it when absent; any other field is required in the versions that have it."""
        return self.default is None or (type(self.default) is tuple and not self.default)

    @property
    def plain(self) -> bool:
        """A single value or a list of them (no table): what an entry's JSON view shows."""
        return self.kind in ("text", "strings", "digest", "rule", "int")


def key(name: str, **spec: Any) -> dict[str, Field]:
    """The metadata of a model field (``dataclasses.field(metadata=key("required-by", kind="strings"))``)."""
    return {"lock": Field(key=name, **spec)}


_FIELDS: dict[type, tuple[Field, ...]] = {}
_KNOWN: dict[tuple[type, str], frozenset[str]] = {}
_IN: dict[tuple[type, str], tuple[Field, ...]] = {}


def fields(cls: type) -> tuple[Field, ...]:
    """The declared fields of model class ``cls``, in declaration order (the order the lock writes them)."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = _declared(cls)
    return found


def _declared(cls: type) -> tuple[Field, ...]:
    found = []
    for spec in dataclasses.fields(cls):
        declared = spec.metadata.get("lock")
        if declared is None:
            raise TypeError(f"{cls.__name__}.{spec.name} declares no lock key (kernlock.lock.schema.key)")
        default: Any = spec.default
        if spec.default_factory is not dataclasses.MISSING:
            default = spec.default_factory()
        found.append(dataclasses.replace(declared, attr=spec.name, default=default))
    return tuple(found)


def present_in(field: Field, version: str) -> bool:
    """Whether lock-version ``version`` has the field (it appeared in its ``since`` version)."""
    return int(version) >= int(field.since)


def fields_in(cls: type, version: str) -> tuple[Field, ...]:
    """The declared fields of model class ``cls`` that lock-version ``version`` has, in declaration order: what the
    writer writes of a lock of that version (a later field is left out whatever its value)."""
    found = _IN.get((cls, version))
    if found is None:
        found = _IN[cls, version] = tuple(f for f in fields(cls) if present_in(f, version))
    return found


def known_keys(cls: type, version: str) -> frozenset[str]:
    """The keys a table of model class ``cls`` may hold in lock-version ``version``."""
    known = _KNOWN.get((cls, version))
    if known is None:
        known = _KNOWN[cls, version] = frozenset(f.key for f in fields(cls) if present_in(f, version))
    return known
