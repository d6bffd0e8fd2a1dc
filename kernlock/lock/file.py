"""kernels.lock as a file: reading it against its strict TOML schema (content hash and canonical bytes included)
and writing it atomically, for the Lock model of :mod:`kernlock.lock.model` (which validates every value when it is
constructed); the keys each table may hold at the lock's version and revision, and how each value is checked, follow
the schema declared beside the model (:mod:`kernlock.lock.schema`), checked by :mod:`kernlock.lock.validate`; the
document and its bytes are :mod:`kernlock.lock.document`. A lock a newer kernlock wrote at a newer revision of a
known version is read without what this kernlock does not know, with one warning line on stderr."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kernlock.errors import LockError
from kernlock.lock.document import HEADER, content_hash, dumps, entry_table, facts_document, normalized
from kernlock.lock.model import Lock
from kernlock.lock.schema import LOCK_VERSION
from kernlock.lock.validate import REPAIR, Validator, damaged
from kernlock.util import names
from kernlock.util.atomic import write_text_atomic
from kernlock.util.names import LOCK_NAME

__all__ = [
    "FOREIGN_MAX",
    "HEADER",
    "LOCK_NAME",
    "REPAIR",
    "content_hash",
    "damaged",
    "dumps",
    "entry_table",
    "facts_document",
    "foreign_too_large",
    "has_conflict_markers",
    "loads",
    "loads_environment",
    "normalized",
    "read",
    "read_foreign",
    "read_pins",
    "read_text",
    "warned",
    "write",
]


def write(path: Path, lock: Lock) -> None:
    """Write the lock atomically (a reader never sees half a lock)."""
    write_text_atomic(path, dumps(lock))


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


#: The most kernlock reads of a lock that did not come from this project: the kernels.lock of a model folder or a
#: checkpoint (compared on load, `add --from`), of a Hub model repo (`add --from org/model`), the kernels library's
#: JSON lock (`import`). Each lists what one process loaded or one project pinned: a few KiB. A project's own lock
#: is read at any size (it is the project's).
FOREIGN_MAX = 4 << 20


def read_foreign(path: Path) -> Lock:
    """A kernels.lock that did not come from this project (a model folder's, a checkpoint's), read with the same
    checks as the project's own but at most :data:`FOREIGN_MAX` bytes and not compared to the bytes this kernlock
    writes (see :func:`read_text`)."""
    return loads(read_text(path, FOREIGN_MAX), str(path), canonical=False)


def foreign_too_large(where: str, limit: int = FOREIGN_MAX) -> LockError:
    """The refusal of a lock from elsewhere larger than ``limit`` bytes: one line, naming the fix."""
    return LockError(
        f"{where} is over {limit >> 20} MiB, more than any lock a model or another tool carries (a few KiB)",
        why="kernlock does not read it",
        fix="delete it, or write it again (save the model from an activated process)",
    )


def read_text(path: Path, limit: int | None = None) -> str:
    """The lock's text (LockError when it is missing or unreadable, or, with ``limit``, larger than ``limit`` bytes:
    no more than that is read; DamagedLockError when it is not UTF-8)."""
    path = Path(path)
    try:
        if limit is None:
            data = path.read_bytes()
        else:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except FileNotFoundError as err:
        raise LockError(f"no {LOCK_NAME} at {path}", fix="run `kernlock lock` to create it") from err
    except OSError as err:
        raise LockError(f"cannot read {path}", why=f"{err.strerror or err}", fix="check its permissions") from err
    if limit is not None and len(data) > limit:
        raise foreign_too_large(str(path), limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise damaged(str(path), "it is not UTF-8 text") from None


def has_conflict_markers(text: str) -> bool:
    """Whether ``text`` holds a git merge-conflict marker line."""
    return "\n<<<<<<< " in f"\n{text}" or "\n>>>>>>> " in f"\n{text}"


def loads(text: str, where: str = LOCK_NAME, *, canonical: bool = True, legacy: bool = False) -> Lock:
    """Parse lock text (stdlib tomllib: fast enough for run-time activation); see :func:`read`."""
    from kernlock.lock import interop  # kernels' own lock format: only to name it in an error

    if interop.looks_like_json_lock(text):
        raise interop.json_lock_error(where)
    try:
        data = tomllib.loads(text)
    except RecursionError:  # tomllib recurses once per nested array or inline table: `x = [[[[...`
        raise damaged(where, "it is not valid TOML (arrays or tables nested too deeply)") from None
    except tomllib.TOMLDecodeError as err:
        why = "it holds git merge-conflict markers" if has_conflict_markers(text) else f"it is not valid TOML ({err})"
        raise damaged(where, why) from err
    validator = Validator(text, where)
    lock, recorded = validator.lock(data, legacy)
    if recorded is None:
        return lock
    if recorded != content_hash(text):
        raise damaged(where, "it was edited after kernlock wrote it (its content-hash does not match its entries)")
    warning = validator.warning()  # a newer revision: checked by its content-hash, as this kernlock cannot write it
    if canonical and warning is None and dumps(lock) != text:
        raise damaged(
            where, "it is not laid out as kernlock writes it (hand-edited, or re-formatted by a tool or a merge)"
        )
    if warning is not None:
        _warn((where, recorded), warning)
    return lock


_WARNED: set[tuple[str, str]] = set()


def _warn(lock: tuple[str, str], line: str) -> None:
    """Say ``line`` on stderr once per process for this lock (its path and content-hash)."""
    if lock not in _WARNED:
        _WARNED.add(lock)
        sys.stderr.write(line + "\n")


def warned() -> bool:
    """Whether this process read a lock that a newer kernlock wrote (and said so): a command's answer is then not
    remembered (:mod:`kernlock.commands.unchanged`), so that the next one says it again."""
    return bool(_WARNED)


_KERNEL, _VARIANT = "\n[[kernel]]\n", "\n[[kernel.variant]]\n"
_INDENTED_TABLE = re.compile(r"\n[ \t]+\[")


def loads_environment(text: str, where: str, environment: str) -> tuple[Lock, list[str]] | None:
    """The lock cut down to what ``environment`` loads (each entry to its variant there, as the run-time index
    holds it) and every repo the lock names, parsing only that part of the text: the header, each entry's own keys
    and the variants that name ``environment`` (a lock of 26 environments parses about 1/20 of its TOML).

    Only for a lock laid out as kernlock writes it: its ``content-hash`` matches the whole text (no part of it was
    edited), and it holds no multi-line string and no line that starts with ``[`` but the ``[[kernel]]`` and
    ``[[kernel.variant]]`` headers, so that those lines cut it where a TOML parser would. Otherwise, and for
    anything that does not validate, None: the caller reads the whole lock with :func:`loads` (which names what is
    wrong)."""
    body = "\n" + text
    if '"""' in body or "'''" in body or "\r" in body or _INDENTED_TABLE.search(body):
        return None
    head, *entries = body.split(_KERNEL)
    parts = [entry.split(_VARIANT) for entry in entries]
    if body.count("\n[") != len(entries) + sum(len(p) - 1 for p in parts):
        return None  # another table header, an array of arrays, or headers not cut where they stand
    needle = f'"{environment}"'
    tables: list[dict[str, Any]] = []
    repos: set[str] = set()
    try:
        data = tomllib.loads(head)
        if "kernel" in data:
            return None
        for own, *variants in parts:
            table = tomllib.loads(own)
            repo = table.get("repo")
            if not isinstance(repo, str) or "variant" in table:
                return None
            repos.add(repo)
            covered = table.get("environments")
            if not isinstance(covered, list) or environment not in covered:
                continue
            mine = [tomllib.loads(v) for v in variants if needle in v]
            mine = [v for v in mine if isinstance(v.get("environments"), list) and environment in v["environments"]]
            if len(mine) != 1:
                return None  # the lock says why: two variants claim it, or none does
            table["environments"] = [environment]
            table["variant"] = [{**mine[0], "environments": [environment]}]
            tables.append(table)
        data["kernel"] = tables
        validator = Validator("", where)
        lock, recorded = validator.lock(data, legacy=False)
    except (tomllib.TOMLDecodeError, RecursionError, LockError):
        return None
    if lock.version != LOCK_VERSION or validator.newer is not None or recorded is None:
        return None  # an older version, or a newer revision (read whole: it says what it skipped)
    if recorded != content_hash(text):
        return None
    for repo in repos:
        try:
            names.check_repo(repo)
        except ValueError:
            return None
    return lock, sorted(repos)
