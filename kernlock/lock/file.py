"""kernels.lock as a file: reading it against its strict TOML schema (content hash and canonical bytes included)
and writing it atomically, for the Lock model of :mod:`kernlock.lock.model` (which validates every value when it is
constructed); the document and its bytes are :mod:`kernlock.lock.document`."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kernlock.errors import DamagedLockError, JsonLockError, LockError
from kernlock.lock import interop
from kernlock.lock.document import HEADER, content_hash, dumps, entry_table, facts_document, normalized
from kernlock.lock.model import (
    DIGEST,
    LOADER_RULE,
    LOCK_VERSION,
    READ_VERSIONS,
    UNSIGNED,
    VARIANT_RULE,
    EnvironmentFacts,
    Lock,
    LockedFile,
    LockedKernel,
    LockedVariant,
    Signature,
)
from kernlock.util.atomic import write_text_atomic
from kernlock.util.wording import noun

__all__ = [
    "HEADER",
    "LEGACY_VERSIONS",
    "LOCK_NAME",
    "LOCK_VERSION",
    "REPAIR",
    "content_hash",
    "damaged",
    "dumps",
    "entry_from_table",
    "entry_table",
    "facts_document",
    "has_conflict_markers",
    "loads",
    "normalized",
    "read",
    "read_pins",
    "read_text",
    "write",
]

#: Older lock versions this kernlock can still read the pins of, so `kernlock lock` upgrades them in place.
LEGACY_VERSIONS = ("1",)
LOCK_NAME = "kernels.lock"


def entry_from_table(data: Any, where: str) -> LockedKernel:
    """An entry from its table (see :func:`entry_table`), validated as a lock's entries are (LockError)."""
    return _Validator("", where).kernel(data, 0)


def write(path: Path, lock: Lock) -> None:
    """Write the lock atomically (a reader never sees half a lock)."""
    write_text_atomic(path, dumps(lock))


#: The fix every refusal of a damaged lock names: both work on an unmerged path in the middle of a merge (a plain
#: `git checkout kernels.lock` does not).
REPAIR = (
    "run `kernlock lock` to repair it (it keeps every pin it can still read and prints each change), or restore "
    "the committed lock with `git checkout HEAD -- kernels.lock`"
)


def damaged(where: str, why: str) -> DamagedLockError:
    """The refusal of a lock that fails its checks: where, what failed, and the two fixes."""
    return DamagedLockError(f"{where}: {why}; {REPAIR}.", why)


def read(path: Path, *, canonical: bool = True) -> Lock:
    """Read and strictly validate a lock file; DamagedLockError names what failed (and the line of a malformed
    entry), LockError a lock that is missing, unreadable, of another lock-version or another tool's.

    ``canonical``: also require the exact bytes kernlock writes (what `lock --check` and the CLI want; run-time
    activation skips that rendering and relies on the content hash).
    """
    return loads(read_text(path), str(path), canonical=canonical)


def read_pins(path: Path) -> Lock:
    """The lock's pins for `kernlock lock` to keep: also accepts an older lock-version (it is then rewritten)."""
    return loads(read_text(path), str(path), canonical=False, legacy=True)


def read_text(path: Path) -> str:
    """The lock's text (LockError when it is missing or unreadable, DamagedLockError when it is not UTF-8)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as err:
        raise LockError(f"no {LOCK_NAME} at {path}; run `kernlock lock` to create it.") from err
    except OSError as err:
        raise LockError(f"cannot read {path} ({err.strerror or err}); check its permissions.") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise damaged(str(path), "it is not UTF-8 text") from None


def has_conflict_markers(text: str) -> bool:
    """Whether ``text`` holds a git merge-conflict marker line."""
    return "\n<<<<<<< " in f"\n{text}" or "\n>>>>>>> " in f"\n{text}"


def loads(text: str, where: str = LOCK_NAME, *, canonical: bool = True, legacy: bool = False) -> Lock:
    """Parse lock text (stdlib tomllib: fast enough for run-time activation); see :func:`read`."""
    if interop.looks_like_json_lock(text):
        raise JsonLockError(interop.json_lock_message(where))
    try:
        data = tomllib.loads(text)
    except RecursionError:  # tomllib recurses once per nested array or inline table: `x = [[[[...`
        raise damaged(where, "it is not valid TOML (arrays or tables nested too deeply)") from None
    except tomllib.TOMLDecodeError as err:
        why = "it holds git merge-conflict markers" if has_conflict_markers(text) else f"it is not valid TOML ({err})"
        raise damaged(where, why) from err
    lock, recorded = _Validator(text, where).lock(data, legacy)
    if recorded is None:
        return lock
    if recorded != content_hash(text):
        raise damaged(where, "it was edited after kernlock wrote it (its content-hash does not match its entries)")
    if canonical and dumps(lock) != text:
        raise damaged(
            where, "it is not laid out as kernlock writes it (hand-edited, or re-formatted by a tool or a merge)"
        )
    return lock


class _Validator:
    """Checks the parsed TOML against the schema; errors carry the line of the offending entry."""

    def __init__(self, text: str, where: str) -> None:
        self.where = where
        self.version: object = LOCK_VERSION
        self.kernel_lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == "[[kernel]]"]

    def fail(self, message: str, entry: int | None = None) -> DamagedLockError:
        if entry is not None and entry < len(self.kernel_lines):
            message = f"line {self.kernel_lines[entry]} ([[kernel]] #{entry + 1}): {message}"
        return damaged(self.where, message)

    def lock(self, data: dict[str, Any], legacy: bool) -> tuple[Lock, str | None]:
        """The Lock and its recorded content-hash (None for a legacy lock-version)."""
        version = data.get("lock-version")
        if not isinstance(version, str):
            raise self.fail("`lock-version` is missing or not a string")
        self.version = version
        if version not in READ_VERSIONS and not (legacy and version in LEGACY_VERSIONS):
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
        allowed = {
            "lock-version",
            "created-by",
            "requires-hash",
            "variant-rule",
            "content-hash",
            "environments",
            "environment-facts",
            "kernel",
        }
        unknown = set(data) - allowed
        if unknown:
            raise self.fail(f"unknown top-level {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}")
        if data.get("created-by") != "kernlock":
            raise self.fail('`created-by` is not "kernlock"')
        recorded = data.get("content-hash")
        current = version in READ_VERSIONS
        if current and (not isinstance(recorded, str) or not re.fullmatch(DIGEST, recorded)):
            raise self.fail("`content-hash` is missing or not a sha256 digest")
        requires_hash = data.get("requires-hash")
        if not isinstance(requires_hash, str) or not re.fullmatch(DIGEST, requires_hash):
            raise self.fail("`requires-hash` is missing or not a sha256 digest")
        rule = data.get("variant-rule", VARIANT_RULE if not current else None)
        if not isinstance(rule, str) or not re.fullmatch(LOADER_RULE, rule):
            raise self.fail('`variant-rule` is missing or not a loader generation like "kernels-0.17"')
        environments = self._strings(data.get("environments"), "environments", allow_empty=True)
        kernels = data.get("kernel", [])
        if not isinstance(kernels, list):
            raise self.fail("`kernel` must be an array of tables ([[kernel]])")
        parsed = tuple(self.kernel(k, i) for i, k in enumerate(kernels))
        facts = self.facts(data.get("environment-facts", []))
        try:
            lock = Lock(
                requires_hash=requires_hash,
                environments=environments,
                kernels=parsed,
                variant_rule=rule,
                facts=facts,
                version=version if current else LOCK_VERSION,
            )
        except ValueError as err:
            raise self.fail(str(err)) from None
        return lock, recorded if current else None

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
        unknown = set(data) - {"repo", "requested", "ref", "commit", "environments", "required-by", "variant"}
        if unknown:
            raise self.fail(f"unknown {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}", index)
        for key in ("repo", "requested", "ref", "commit"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise self.fail(f"missing or empty `{key}`", index)
        environments = self._strings(data.get("environments"), "environments", index)
        variants = data.get("variant")
        if not isinstance(variants, list) or not variants:
            raise self.fail("entry has no [[kernel.variant]]", index)
        parsed = tuple(self.variant(v, index) for v in variants)
        required_by = self._strings(data.get("required-by", []), "required-by", index, allow_empty=True)
        ids = {key: data[key] for key in ("repo", "requested", "ref", "commit")}
        try:
            return LockedKernel(**ids, environments=environments, variants=parsed, required_by=required_by)
        except ValueError as err:
            raise self.fail(str(err), index) from None

    def variant(self, data: Any, index: int) -> LockedVariant:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise self.fail("a [[kernel.variant]] has no `name`", index)
        unknown = set(data) - {"name", "environments", "files", *(("signature",) if self.version != "2" else ())}
        if unknown:
            keys = f"{noun(len(unknown), 'key')} {', '.join(sorted(unknown))}"
            raise self.fail(f"variant {data['name']!r} has unknown {keys}", index)
        files = data.get("files")
        if not isinstance(files, list) or not files:
            raise self.fail(f"variant {data['name']!r} has no `files`", index)
        parsed = []
        for item in files:
            if not isinstance(item, dict) or set(item) != {"path", "size", "hash"}:
                raise self.fail(f"variant {data['name']!r} has a malformed file entry {item!r}", index)
            try:
                parsed.append(LockedFile(path=item["path"], size=item["size"], hash=item["hash"]))
            except ValueError as err:
                raise self.fail(f"variant {data['name']!r}: {err}", index) from None
        environments = self._strings(data.get("environments"), "environments", index)
        signature = self.signature(data, index)
        try:
            return LockedVariant(name=data["name"], environments=environments, signature=signature, files=tuple(parsed))
        except ValueError as err:
            raise self.fail(str(err), index) from None

    def signature(self, data: dict[str, Any], index: int) -> Signature | str | None:
        """A variant's ``signature``: ``"unsigned"`` or ``{signer, repository, issuer, log-index,
        integrated-time, bundle}``; None when absent."""
        value = data.get("signature")
        if value is None or value == UNSIGNED:
            return value
        keys = {"signer", "repository", "issuer", "log-index", "integrated-time", "bundle"}
        if not isinstance(value, dict) or set(value) != keys:
            raise self.fail(
                f'variant {data["name"]!r}: `signature` must be "unsigned" or a table of {", ".join(sorted(keys))}',
                index,
            )
        try:
            return Signature(**{key.replace("-", "_"): item for key, item in value.items()})
        except (ValueError, TypeError) as err:
            raise self.fail(f"variant {data['name']!r}: {err}", index) from None

    def _strings(self, value: Any, key: str, index: int | None = None, allow_empty: bool = False) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"`{key}` must be a list of strings", index)
        if not value and not allow_empty:
            raise self.fail(f"`{key}` is empty", index)
        return tuple(value)
