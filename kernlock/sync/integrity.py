"""Is a locked variant in the cache exactly as the lock says? The check the run-time hooks, ``verify`` and ``sync``
share: no network, no hashing where a receipt still vouches for a file.

A variant folder holds exactly the locked files and kernlock's ``__pycache__`` markers (layout:
:mod:`kernlock.sync.cache`): anything else (a ``__pycache__`` folder, a stray ``.pyc``/``.so``/``.py``, a symlink that
does not point at its blob) is refused by :func:`check_variant`, reported by ``verify`` and removed by ``sync``.
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, TypeGuard

from kernlock.errors import IntegrityError, SignatureError, VariantNotSynced
from kernlock.lock.model import LockedFile, LockedKernel, LockedVariant
from kernlock.sync.cache import (
    FILE,
    FOLDER,
    MARKER,
    NOFOLLOW,
    Record,
    cache_dir,
    file_hash,
    in_variant,
    layout,
    link_target,
    read_receipt,
    receipt_path,
    stat_key,
    variant_folders,
    write_receipt,
)
from kernlock.util import names
from kernlock.util.atomic import unwritable

__all__ = [
    "Extra",
    "FileCheck",
    "FileState",
    "Inspection",
    "check_variant",
    "describe",
    "describe_extras",
    "inspect_variant",
    "is_synced",
    "place_markers",
    "refresh",
]


class FileState(enum.Enum):
    """What the cache holds for a locked file (or, for ``verify``, a variant or an unexpected entry); the value
    is the word shown to users."""

    OK = "ok"
    MISSING = "missing"
    MISMATCH = "mismatch"
    UNEXPECTED = "unexpected"  # in a variant folder, but not in the lock
    NOT_SYNCED = "not synced"  # nothing of the variant is in the cache
    UNVERIFIED = "unverified"  # the receipt does not vouch for the file, and the caller asked not to hash it


# The records below are NamedTuples, not dataclasses: every kernel load imports this module, and a frozen dataclass
# costs ~0.5-1 ms to create (its methods are compiled at import); a NamedTuple a fifth of that.


class FileCheck(NamedTuple):
    """One locked file's state, with why it is not OK."""

    file: LockedFile
    state: FileState
    detail: str = ""


class Extra(NamedTuple):
    """An entry of a variant folder that the lock does not name (``path`` "" is the variant folder itself)."""

    path: str  # relative to the variant folder: what sync removes
    detail: str
    shown: tuple[str, ...]  # the files it holds (itself, unless a folder), for messages
    hidden: int = 0  # files of the folder not in ``shown``


class Inspection(NamedTuple):
    """What :func:`inspect_variant` found of one variant."""

    root: Path  # the variant folder
    files: tuple[FileCheck, ...]
    records: dict[str, Record]  # receipt records of every file found correct
    receipt_changed: bool  # ``records`` differ from the stored receipt's (a missing or unreadable one: {})
    present: bool  # anything of this variant (a file or a receipt) is in the cache
    extras: tuple[Extra, ...] = ()  # what the variant folder holds besides the locked files and the markers
    markers: tuple[str, ...] = ()  # kernlock's __pycache__ marker files that are missing

    def bad(self, state: FileState) -> list[FileCheck]:
        """The locked files in ``state``."""
        return [f for f in self.files if f.state == state]

    @property
    def ok(self) -> bool:
        """Every locked file matches and the folder holds nothing else."""
        return all(f.state == FileState.OK for f in self.files) and not self.extras


# -- the variant folder's listing --------------------------------------------------------------------------


def _listing(root: Path, layout: dict[str, dict[str, str]]) -> tuple[list[Extra], list[str], int | None]:
    """(entries the lock does not name, missing marker files, the device of the variant folder, None when it is
    no folder): one ``scandir`` per folder of the variant, never following a symlink. Locked files themselves are
    checked by _inspect_file."""
    try:
        st = os.lstat(root)
    except (FileNotFoundError, NotADirectoryError):
        return [], [], None
    if not stat.S_ISDIR(st.st_mode):
        what = f"a symlink to {os.readlink(root)}" if stat.S_ISLNK(st.st_mode) else "not a folder"
        return [Extra(path="", detail=f"{what}, where the variant folder belongs", shown=("",))], [], None
    extras: list[Extra] = []
    missing: list[str] = []
    pending = [""]
    while pending:
        folder = pending.pop()
        expected = layout.get(folder, {})
        seen: set[str] = set()
        try:
            with os.scandir(root / folder if folder else root) as entries:
                items = list(entries)
        except (FileNotFoundError, NotADirectoryError):  # not there: its locked files are reported missing
            continue
        for item in items:
            rel = f"{folder}/{item.name}" if folder else item.name
            kind = expected.get(item.name)
            if kind == FOLDER and item.is_dir(follow_symlinks=False):
                pending.append(rel)
            elif kind == MARKER and item.is_file(follow_symlinks=False):
                if item.stat(follow_symlinks=False).st_size:
                    extras.append(Extra(path=rel, detail="not the empty marker file kernlock writes", shown=(rel,)))
                    continue
            elif kind != FILE:  # a locked file: _inspect_file checks what it is
                extras.append(_extra(item, rel, kind))
                continue
            seen.add(item.name)
        missing += [f"{folder}/{n}" if folder else n for n, k in expected.items() if k == MARKER and n not in seen]
    return extras, missing, st.st_dev


def _extra(item: os.DirEntry[str], rel: str, kind: str | None, limit: int = 10) -> Extra:
    """Describe an unexpected entry; for a folder, the files it holds (at most ``limit`` named)."""
    if item.is_symlink():
        return Extra(path=rel, detail=f"a symlink to {os.readlink(item.path)}, not in kernels.lock", shown=(rel,))
    if not item.is_dir(follow_symlinks=False):
        detail = "a file where kernels.lock has a folder" if kind == FOLDER else "not in kernels.lock"
        return Extra(path=rel, detail=detail, shown=(rel,))
    found: list[str] = []
    for folder, dirs, files in os.walk(item.path):
        here = os.path.relpath(folder, item.path)
        prefix = rel if here == "." else f"{rel}/{here}"
        found += [f"{prefix}/{name}" for name in sorted(files)]
        found += [f"{prefix}/{name}" for name in sorted(dirs) if os.path.islink(os.path.join(folder, name))]
        if not files and not dirs and here != ".":
            found.append(f"{prefix}/")
    detail = "not in kernels.lock" if found else "a folder not in kernels.lock"
    if kind == MARKER:
        detail += f" ({names.PYCACHE} must be the empty file kernlock writes, so that no bytecode is read)"
    return Extra(path=rel, detail=detail, shown=tuple(found[:limit]) or (f"{rel}/",), hidden=max(0, len(found) - limit))


# -- the locked files --------------------------------------------------------------------------------------


def inspect_variant(
    entry: LockedKernel, variant: LockedVariant, cache: Path, *, full: bool, rehash: bool = True
) -> Inspection:
    """Check the variant folder: its listing (exactly the locked files and the markers), and every locked file
    by its receipt (stat only) where the receipt still holds (``full``: never), else by hashing it (``rehash``;
    without it such a file is UNVERIFIED)."""
    root, blobs = variant_folders(entry, variant, cache)  # proven inside the cache; every etag is plain hex
    receipt_file = receipt_path(entry, variant, cache)
    extras, missing_markers, device = _listing(root, layout(variant))
    stored = read_receipt(receipt_file) if receipt_file else {}  # even with ``full``: compared with what is found
    receipt = {} if full else stored
    states, records = [], {}
    present = bool(extras) or bool(stored)
    folder, blob_folder = os.path.join(root, ""), os.path.join(blobs, "")  # strings: a Path per file costs ~10 us
    posix = os.sep == "/"  # a locked path is '/'-separated plain parts (names.check_path): joined as it is
    for locked in variant.files:  # the listing proved every folder of the variant a real folder: in the variant
        path = locked.path
        link = folder + path if posix else os.path.join(folder, *path.split("/"))
        record = receipt.get(path)
        if record is not None and _vouched(link, device, locked, record):
            states.append(FileCheck(file=locked, state=FileState.OK))
            records[path] = record
            present = True
            continue
        blob = blob_folder + locked.digest
        state, record = _inspect_file(link, blob, link_target(locked), locked, record, full, rehash)
        present = present or state.state != FileState.MISSING
        states.append(state)
        if record is not None:
            records[locked.path] = record
    return Inspection(
        root=root,
        files=tuple(states),
        records=records,
        receipt_changed=records != stored,  # a receipt that already says what was found is never rewritten
        present=present,
        extras=tuple(extras),
        markers=tuple(missing_markers),
    )


def _vouched(link: str, device: int | None, locked: LockedFile, record: object) -> bool:
    """The receipt's fast path: ``link``, followed, is the very file the receipt recorded when it was hashed (a
    regular file on the variant folder's device, of the recorded size, mtime, inode and ctime: no other file has
    them, and a write changes the ctime; ``device`` None: no variant folder). One ``stat``; anything else takes
    :func:`_inspect_file`'s full look."""
    try:
        st = os.stat(link)
    except OSError:
        return False
    return st.st_dev == device and stat.S_ISREG(st.st_mode) and _records(record, locked, st)


def _records(record: object, locked: LockedFile, st: os.stat_result) -> TypeGuard[Record]:
    """Whether the receipt's ``record`` is of this file as ``st`` finds it, verified against ``locked``'s hash."""
    return isinstance(record, dict) and record.get("hash") == locked.hash and record.get("stat") == stat_key(st)


def _inspect_file(
    link: str, blob: str, target: str, locked: LockedFile, record: object, full: bool, rehash: bool
) -> tuple[FileCheck, Record | None]:
    """A locked file: a symlink to exactly its blob (``target``: :func:`link_target`; the blob a regular file), or a
    regular file (a copy, on file systems without symlinks); then its receipt record, else its size and hash."""

    def check(state: FileState, detail: str = "") -> tuple[FileCheck, None]:
        return FileCheck(file=locked, state=state, detail=detail), None

    try:
        st = os.lstat(link)
    except (FileNotFoundError, NotADirectoryError):
        return check(FileState.MISSING)
    path = link
    if stat.S_ISLNK(st.st_mode):
        found = os.readlink(link)
        if found != target:
            return check(FileState.MISMATCH, f"a symlink to {found}, not to its blob")
        try:
            st = os.lstat(blob)
        except (FileNotFoundError, NotADirectoryError):
            return check(FileState.MISSING)
        if not stat.S_ISREG(st.st_mode):
            return check(FileState.MISMATCH, f"its blob {blob} is not a regular file")
        path = blob
    elif not stat.S_ISREG(st.st_mode):
        return check(FileState.MISMATCH, "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file")
    if not full and _records(record, locked, st):
        return FileCheck(file=locked, state=FileState.OK), record
    if not rehash:
        return check(FileState.UNVERIFIED)
    if st.st_size != locked.size:
        return check(FileState.MISMATCH, f"size {st.st_size} bytes, locked {locked.size}")
    actual = file_hash(path, locked.algorithm)
    if actual != locked.hash:
        return check(FileState.MISMATCH, f"hash {actual}, locked {locked.hash}")
    return FileCheck(file=locked, state=FileState.OK), {"hash": locked.hash, "stat": stat_key(st)}


def describe(entry: LockedKernel, variant: LockedVariant, states: list[FileCheck], limit: int = 3) -> str:
    """``repo variant (commit ...): path (detail), ...`` for messages."""
    shown = ", ".join(f"{s.file.path} ({s.detail})" if s.detail else s.file.path for s in states[:limit])
    more = f" and {len(states) - limit} more" if len(states) > limit else ""
    return f"{entry.repo} {variant.name} (commit {entry.commit[:12]}): {shown}{more}"


def describe_extras(
    entry: LockedKernel, variant: LockedVariant, extras: Iterable[Extra], where: str = "", limit: int = 3
) -> str:
    """``repo variant (commit ...)[ where]: unexpected file build/<variant>/<path>, ...``."""
    paths = [f"build/{variant.name}/{shown}".rstrip("/") for extra in extras for shown in extra.shown]
    hidden = sum(extra.hidden for extra in extras) + max(0, len(paths) - limit)
    more = f" and {hidden} more" if hidden else ""
    noun = "file" if len(paths) == 1 and not hidden else "files"
    head = f"{entry.repo} {variant.name} (commit {entry.commit[:12]}){where}"
    return f"{head}: unexpected {noun} {', '.join(paths[:limit])}{more}"


def _integrity_message(entry: LockedKernel, variant: LockedVariant, inspection: Inspection, cache: Path) -> str:
    parts = []
    mismatched = inspection.bad(FileState.MISMATCH)
    if mismatched:
        one = len(mismatched) == 1
        parts.append(
            f"{describe(entry, variant, mismatched)} in {cache} {'does' if one else 'do'} not match kernels.lock; "
            f"run `kernlock sync` to replace {'it' if one else 'them'} (never loaded as is)."
        )
    if inspection.extras:
        files = sum(len(e.shown) + e.hidden for e in inspection.extras)
        it = "it" if files == 1 else "them"
        parts.append(
            f"{describe_extras(entry, variant, inspection.extras, f' in {cache}')} not in kernels.lock; "
            f"run `kernlock sync` to remove {it} (never loaded)."
        )
    return " ".join(parts)


def _not_synced(
    entry: LockedKernel, variant: LockedVariant, missing: list[FileCheck], cache: Path, present: bool
) -> VariantNotSynced:
    head = f"{entry.repo} {variant.name} (commit {entry.commit[:12]})"
    files = describe(entry, variant, missing).removeprefix(f"{head}: ")  # paths: a missing file has no detail
    what = f"{head}: {files} missing from {cache}" if present else f"{head} is not in the kernel cache {cache}"
    where = (f"{files} missing from" if present else "nothing of it is in") + f" the kernel cache {cache}"
    return VariantNotSynced(what, fix="run `kernlock sync` (online) to download it", detail=where)


# -- markers -----------------------------------------------------------------------------------------------


def place_markers(root: Path, paths: Iterable[str], cache: Path, *, strict: bool = False) -> None:
    """Write kernlock's empty ``__pycache__`` files (an existing entry that is not one is replaced); a cache that
    cannot be written is skipped unless ``strict`` (Python cannot write bytecode there either)."""
    for rel in paths:
        path = in_variant(root, rel, cache)
        try:
            _make_marker(path)
        except OSError as err:
            if strict or not unwritable(err):
                raise


def _make_marker(path: Path) -> None:
    for _attempt in range(2):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644))
            return
        except FileExistsError:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                return
            if stat.S_ISDIR(st.st_mode):  # a folder (never followed: lstat) where the marker belongs
                import shutil

                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    raise FileExistsError(errno.EEXIST, "something else keeps being created where the marker belongs", str(path))


def refresh(entry: LockedKernel, variant: LockedVariant, inspection: Inspection, cache: Path) -> None:
    """After a variant was found intact: write its missing markers and, if it changed, its receipt (both only
    shortcuts: a read-only cache skips them)."""
    if inspection.markers:
        place_markers(inspection.root, inspection.markers, cache)
    if inspection.receipt_changed:
        write_receipt(entry, variant, inspection.records, cache)


# -- the checks --------------------------------------------------------------------------------------------


def check_variant(entry: LockedKernel, variant: LockedVariant, full: bool = False, cache: Path | None = None) -> Path:
    """The variant's folder, once it holds exactly the locked files (and kernlock's ``__pycache__`` markers) and
    every file is checked against the lock: by its receipt (size, mtime, inode, ctime), re-hashing a file whose
    receipt no longer holds, or re-hashing everything with ``full``.

    Raises SignatureError for a variant sync refused (its signature failed: :mod:`kernlock.sync.refusals`),
    IntegrityError for a file that does not match the lock or that the lock does not name (or a symlink that leads
    outside the cache), NotSyncedError for missing files. A missing marker is written.
    """
    cache = cache or cache_dir()
    inspection = inspect_variant(entry, variant, cache, full=full)
    if inspection.receipt_changed or not inspection.ok:  # no receipt vouches for it: was it refused?
        from kernlock.sync.refusals import refusal  # only off the receipt's fast path

        if (reason := refusal(entry, variant, cache)) is not None:
            raise SignatureError(reason)
    if inspection.bad(FileState.MISMATCH) or inspection.extras:
        raise IntegrityError(_integrity_message(entry, variant, inspection, cache))
    missing = inspection.bad(FileState.MISSING)
    if missing:
        raise _not_synced(entry, variant, missing, cache, inspection.present)
    refresh(entry, variant, inspection, cache)
    return inspection.root


def is_synced(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> bool:
    """True when the receipt vouches for every file as it is now and the variant folder holds nothing else
    (stat and one listing, never hashes)."""
    try:
        inspection = inspect_variant(entry, variant, cache or cache_dir(), full=False, rehash=False)
    except IntegrityError:  # a symlink leads outside the cache: certainly not synced (check_variant says why)
        return False
    return inspection.ok and not inspection.markers
