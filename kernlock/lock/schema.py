"""The lock's schema, declared once: which lock-versions kernlock writes and reads, and, beside each field of the
lock model (:mod:`kernlock.lock.model` declares them with :func:`key`), its key in kernels.lock, the lock-version (and
revision) it appeared in, how the reader checks it and whether it is written inline.

Everything else derives from this declaration: the writer (:mod:`kernlock.lock.document`: key names, order, what is
left out, what is inline, what is sorted, the ``lock-revision`` it writes), the reader (:mod:`kernlock.lock.validate`:
the keys each table may hold at its lock-version and revision, which are required, how each is checked) and the JSON
views of an entry (``show --json``, ``outdated --json`` and the changes it lists).

Compatibility, after uv.lock (a breaking ``version`` and an additive ``revision``): ``lock-version`` is raised only
for a change an older kernlock cannot read safely (a field removed, renamed, required or meaning something else),
and a kernlock refuses a lock-version it does not know. A field that only adds (optional: an older kernlock that
skips it still reads every pin right) arrives in a *revision* of the current version, ``since="3.1"``: the writer
writes ``lock-revision = 1`` when the lock holds such a field (the newest revision among the fields it holds; none
when it holds only the version's own fields, so such a lock reads on every kernlock of its version without a word),
and a kernlock that knows fewer revisions reads the lock, ignores the keys it does not know and says so in one
warning line naming the upgrade. Unlike uv, which writes its own revision, kernlock writes the revision the content
needs: an older kernlock warns only when there is something it skips. Unknown keys at a revision the reader knows
are still damage. A new field is one declaration in the model (a revision of the current version, unless it
breaks), the code that fills it (the resolver), its line in docs/lockfile.md and the golden locks of tests/data/locks
regenerated.
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
    "REVISION_KEY",
    "VERSION_KEY",
    "Field",
    "fields",
    "fields_in",
    "key",
    "known_keys",
    "latest_revision",
    "present_in",
    "revised_in",
]

# -- versions ---------------------------------------------------------------------------------------------------
# A field's `since` names the version it came with, and the revision of that version ("3.1"; "3" is "3.0"). A
# field that only adds arrives in a revision (an older kernlock reads the lock without it, with a warning); a
# breaking change raises the version (an older kernlock refuses the lock and says to upgrade it).

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
#: the revision of that version its fields need (written only when above 0: :func:`latest_revision`),
#: ``created-by = "kernlock"`` and the ``content-hash`` of the text (lock-version 2 on).
VERSION_KEY = "lock-version"
REVISION_KEY = "lock-revision"
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
_KNOWN: dict[tuple[type, str, int | None], frozenset[str]] = {}
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
        made = dataclasses.replace(declared, attr=spec.name, default=default)
        if _level(made.since)[1] and not made.optional:
            raise TypeError(
                f"{cls.__name__}.{spec.name} arrives in revision {made.since} but is required: a field an older "
                "kernlock cannot skip is a new lock-version"
            )
        found.append(made)
    return tuple(found)


def _level(since: str) -> tuple[int, int]:
    """A ``since`` as (version, revision): ``"3"`` is (3, 0), ``"3.1"`` is (3, 1)."""
    version, _, revision = since.partition(".")
    return int(version), int(revision or 0)


def present_in(field: Field, version: str, revision: int | None = None) -> bool:
    """Whether lock-version ``version`` has the field (it appeared in its ``since`` version), at ``revision`` of
    it (None: at any revision of it, as the writer writes it)."""
    since, added = _level(field.since)
    return int(version) > since or (int(version) == since and (revision is None or revision >= added))


_REVISED: dict[tuple[type, str], tuple[tuple[Field, int], ...]] = {}
_LATEST: dict[tuple[type, str], int] = {}


def revised_in(cls: type, version: str) -> tuple[tuple[Field, int], ...]:
    """The fields of model class ``cls`` that arrived in a revision of lock-version ``version``, each with that
    revision: a lock that holds one is written with ``lock-revision`` (the newest of them)."""
    found = _REVISED.get((cls, version))
    if found is None:
        levels = ((f, _level(f.since)) for f in fields(cls))
        found = _REVISED[cls, version] = tuple((f, r) for f, (v, r) in levels if r and v == int(version))
    return found


def latest_revision(cls: type, version: str) -> int:
    """The newest revision of lock-version ``version`` that this kernlock knows for a table of model class ``cls``
    and the tables in it (``Lock``: the whole lock): a lock of a newer revision was written by a newer kernlock."""
    found = _LATEST.get((cls, version))
    if found is None:
        nested = [latest_revision(f.table, version) for f in fields(cls) if f.table is not None]
        found = _LATEST[cls, version] = max([0, *(r for _, r in revised_in(cls, version)), *nested])
    return found


def fields_in(cls: type, version: str) -> tuple[Field, ...]:
    """The declared fields of model class ``cls`` that lock-version ``version`` has, in declaration order: what the
    writer writes of a lock of that version (a later field is left out whatever its value)."""
    found = _IN.get((cls, version))
    if found is None:
        found = _IN[cls, version] = tuple(f for f in fields(cls) if present_in(f, version))
    return found


def known_keys(cls: type, version: str, revision: int | None = None) -> frozenset[str]:
    """The keys a table of model class ``cls`` may hold in lock-version ``version`` at ``revision`` (None: any)."""
    known = _KNOWN.get((cls, version, revision))
    if known is None:
        known = _KNOWN[cls, version, revision] = frozenset(
            f.key for f in fields(cls) if present_in(f, version, revision)
        )
    return known
