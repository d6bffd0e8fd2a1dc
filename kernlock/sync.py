"""Lock -> verified files in the Hugging Face cache: exactly the locked variants, in parallel, atomically.

The layout is the standard huggingface_hub cache, so that the kernels library finds the files by itself::

    {cache}/kernels--{org}--{name}/
        blobs/<etag>                                  content; etag = sha256 (LFS files) or git blob sha1
        snapshots/<commit>/build/<variant>/<path>     relative symlinks to ../../../../blobs/<etag>
        snapshots/<commit>/build/<variant>/[<dir>/]__pycache__
                                                      an empty FILE in every folder holding a locked .py file:
                                                      Python can neither read nor write bytecode there
        refs/<ref>                                    the locked commit of each branch/tag the lock names
        kernlock-receipts/<commit>/<variant>.json     per file: (size, mtime_ns, inode, ctime_ns) -> verified hash
    {cache}/.locks/kernels--{org}--{name}/<etag>.lock the blob locks huggingface_hub itself takes

A variant folder holds exactly the locked files and those markers: anything else (a ``__pycache__`` folder, a
stray ``.pyc``/``.so``/``.py``, a symlink that does not point at its blob) is refused by ``check_variant``,
reported by ``verify`` and removed by ``sync``. Every path is built with :func:`kernlock.names.under`, so no
symlink in the cache can lead a write (or a load) outside it.

A file is downloaded to ``blobs/<etag>.incomplete`` (resumed if an earlier sync was interrupted), hashed, and
only moved into place when it matches the lock. The receipt lets run-time activation check a variant with a
few ``stat`` calls and one listing of its folder instead of re-hashing it.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kernlock import hfenv, interrupt, names
from kernlock.atomic import write_bytes_atomic
from kernlock.errors import IntegrityError, KernlockError, NotSyncedError
from kernlock.lockmodel import Lock, LockedFile, LockedKernel, LockedVariant

if TYPE_CHECKING:  # the network stack is imported only when a request is about to be made
    from concurrent.futures import Future, ThreadPoolExecutor

    from filelock import FileLock

    from kernlock.hub import Hub

RECEIPT_VERSION = 2  # 2: the stat key has st_ctime_ns (older receipts are ignored: a re-hash, not a download)
RECEIPTS = "kernlock-receipts"
LARGE_FILE = 8 * 1024 * 1024  # files at least this big get a progress bar
FILE_WORKERS = 8
VARIANT_WORKERS = 4
_CHUNK = 1024 * 1024

_MAX_RECEIPT = 16 * 1024 * 1024

OK, MISSING, MISMATCH, UNEXPECTED = "ok", "missing", "mismatch", "unexpected"
_UNVERIFIED = "unverified"  # the receipt does not vouch for the file, and the caller asked not to hash it
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: Files Python compiles to bytecode in ``__pycache__``: a folder holding one gets kernlock's marker file.
_SOURCE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES)


class FileSource(Protocol):
    """Where sync gets a file's bytes: the Hub (:class:`kernlock.hub.Hub`) or a bundle
    (:class:`kernlock.bundle.Bundle`). Whatever it writes is hashed before it becomes visible."""

    endpoint: str  # named in messages

    def download(
        self, repo: str, commit: str, path: str, dest: Path, size: int | None = None, tqdm_class: type | None = None
    ) -> None:
        """Write ``path`` at ``commit`` into ``dest``, resuming from the bytes ``dest`` already holds."""


# -- where things live -------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The kernels cache: ``$KERNELS_CACHE``, else ``$HF_HUB_CACHE``, else huggingface_hub's default."""
    value = os.environ.get("KERNELS_CACHE") or os.environ.get("HF_HUB_CACHE")
    return Path(value).expanduser() if value else Path(hfenv.hub_cache())


def _repo_name(repo: str) -> str:
    return hfenv.repo_folder(repo)


def _under(root: Path, *parts: str, cache: Path | None = None) -> Path:
    """``root/parts...`` proven to stay below ``root`` (symlinks included); IntegrityError naming the cache."""
    try:
        return names.under(root, *parts)
    except ValueError as err:
        raise IntegrityError(
            f"the kernel cache {cache or root} holds a path that leads outside it: {err}. kernlock wrote and "
            "loaded nothing there; remove that symlink (or point KERNELS_CACHE at another folder), then run "
            "`kernlock sync`."
        ) from err


def repo_folder(repo: str, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}``."""
    cache = cache or cache_dir()
    return _under(cache, _repo_name(repo))


def variant_path(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}/snapshots/{commit}/build/{variant}``: what the kernels loader imports.

    IntegrityError when a symlink on the way leads outside the cache."""
    cache = cache or cache_dir()
    return _under(cache, _repo_name(entry.repo), "snapshots", entry.commit, "build", variant.name)


def receipt_path(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}/kernlock-receipts/{commit}/{variant}.json``."""
    cache = cache or cache_dir()
    return _under(cache, _repo_name(entry.repo), RECEIPTS, entry.commit, f"{variant.name}.json")


def _in_variant(root: Path, path: str, cache: Path) -> Path:
    """``root/path`` for a path relative to a variant folder, proven to stay in it."""
    return _under(root, *path.split("/"), cache=cache) if path else root


def _unlink_symlink(path: Path) -> None:
    """A symlink where kernlock writes a file is replaced, never written through."""
    if path.is_symlink():
        path.unlink()


def _lock_file(repo: str, name: str, cache: Path) -> FileLock:
    path = _under(cache, ".locks", _repo_name(repo), f"{name}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    _unlink_symlink(path)

    from filelock import FileLock

    return FileLock(str(path))


# -- results -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """A locked file that is missing or does not match the lock, or a file in a variant folder that the lock
    does not name; ``str()`` is the user-facing line."""

    repo: str
    commit: str
    variant: str
    path: str | None  # None: the whole variant is not synced; else relative to the variant folder
    kind: str  # "missing" | "mismatch" | "unexpected" | "not synced"
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.repo} {self.variant}" + (f" {self.path}" if self.path else "")
        return f"{where} (commit {self.commit[:12]}): {self.kind}" + (f", {self.detail}" if self.detail else "")


class VerifyResult(list):
    """The problems ``verify`` found (a list of Problem), plus what it checked."""

    def __init__(self, problems: Iterable[Problem], checked: list[str], files: int, cache: Path) -> None:
        super().__init__(problems)
        self.checked = checked  # "repo variant" of every variant that was re-hashed
        self.files = files
        self.cache = cache


@dataclass(frozen=True)
class VariantResult:
    """What sync did for one variant."""

    repo: str
    commit: str
    variant: str
    path: Path
    files: int
    downloaded: tuple[str, ...] = ()  # paths fetched from the Hub
    repaired: tuple[str, ...] = ()  # paths that were present but did not match the lock
    downloaded_bytes: int = 0
    removed: tuple[str, ...] = ()  # entries of the variant folder the lock does not name, removed

    @property
    def status(self) -> str:
        return "repaired" if self.repaired or self.removed else "downloaded" if self.downloaded else "present"


@dataclass(frozen=True)
class SyncReport:
    """The outcome of a sync: every variant it made sure of, where, and whether the lock was re-written first."""

    cache: Path
    environments: tuple[str, ...]
    variants: tuple[VariantResult, ...]
    offline: bool = False
    relocked: str | None = None  # why kernels.lock was re-written before syncing (default mode)
    kernels: tuple[str, ...] = field(default=())

    @property
    def downloaded_files(self) -> int:
        return sum(len(v.downloaded) for v in self.variants)

    @property
    def downloaded_bytes(self) -> int:
        return sum(v.downloaded_bytes for v in self.variants)


# -- hashing and receipts ----------------------------------------------------------------------------------


def file_hash(path: Path, algorithm: str) -> str:
    """``sha256:<hex>`` of the content, or ``git-sha1:<hex>`` (the git blob id) of ``path``."""
    with open(path, "rb") as handle:
        if algorithm == "sha256":
            digest = hashlib.sha256()
        elif algorithm == "git-sha1":
            digest = hashlib.sha1()
            digest.update(b"blob %d\0" % os.fstat(handle.fileno()).st_size)
        else:
            raise ValueError(f"unknown hash algorithm {algorithm!r}")
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return f"{algorithm}:{digest.hexdigest()}"


def _stat_key(st: os.stat_result) -> list[int]:
    """What a receipt records of a verified file: a rewrite with its mtime put back still changes the ctime."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def _read_receipt(path: Path) -> dict[str, Any]:
    """The receipt's file records; {} when it is missing, unreadable, not a regular file or of another version."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_RECEIPT:
                return {}
            data = json.loads(handle.read(_MAX_RECEIPT + 1))
    except (OSError, ValueError, RecursionError):  # an unreadable receipt only costs a re-hash
        return {}
    if not isinstance(data, dict) or data.get("receipt-version") != RECEIPT_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_receipt(
    entry: LockedKernel, variant: LockedVariant, records: dict[str, Any], cache: Path, strict: bool = False
) -> None:
    """Write the receipt atomically; a read-only cache only loses the shortcut unless ``strict``."""
    data = {
        "receipt-version": RECEIPT_VERSION,
        "repo": entry.repo,
        "commit": entry.commit,
        "variant": variant.name,
        "files": {path: records[path] for path in sorted(records)},
    }
    path = receipt_path(entry, variant, cache)
    try:
        _unlink_symlink(path)
        write_bytes_atomic(path, json.dumps(data, indent=1).encode())
    except OSError:
        if strict:
            raise


# -- inspecting a variant ----------------------------------------------------------------------------------

FILE, FOLDER, MARKER = "file", "folder", "marker"


@dataclass(frozen=True)
class _FileState:
    file: LockedFile
    state: str
    detail: str = ""


@dataclass(frozen=True)
class _Extra:
    """An entry of a variant folder that the lock does not name (``path`` "" is the variant folder itself)."""

    path: str  # relative to the variant folder: what sync removes
    detail: str
    shown: tuple[str, ...]  # the files it holds (itself, unless a folder), for messages
    hidden: int = 0  # files of the folder not in ``shown``


@dataclass(frozen=True)
class _Inspection:
    root: Path  # the variant folder
    files: tuple[_FileState, ...]
    records: dict[str, Any]  # receipt records of every file found correct
    receipt_changed: bool
    present: bool  # anything of this variant (a file or a receipt) is in the cache
    extras: tuple[_Extra, ...] = ()  # what the variant folder holds besides the locked files and the markers
    markers: tuple[str, ...] = ()  # kernlock's __pycache__ marker files that are missing

    def bad(self, state: str) -> list[_FileState]:
        return [f for f in self.files if f.state == state]

    @property
    def ok(self) -> bool:
        return all(f.state == OK for f in self.files) and not self.extras


def _layout(variant: LockedVariant) -> dict[str, dict[str, str]]:
    """What a synced variant folder holds: folder ("" = the variant folder) -> {name: FILE | FOLDER | MARKER}."""
    layout: dict[str, dict[str, str]] = {"": {}}
    for locked in variant.files:
        *folders, name = locked.path.split("/")
        folder = ""
        for part in folders:
            layout[folder][part] = FOLDER
            folder = f"{folder}/{part}" if folder else part
            layout.setdefault(folder, {})
        layout[folder][name] = FILE
        if name.endswith(_SOURCE_SUFFIXES):
            layout[folder][names.PYCACHE] = MARKER
    return layout


def _markers(variant: LockedVariant) -> list[str]:
    """Paths of the ``__pycache__`` marker files, relative to the variant folder."""
    return [f"{folder}/{names.PYCACHE}" if folder else names.PYCACHE for folder in _folders_with_sources(variant)]


def _folders_with_sources(variant: LockedVariant) -> list[str]:
    return [folder for folder, entries in _layout(variant).items() if MARKER in entries.values()]


def _listing(root: Path, layout: dict[str, dict[str, str]]) -> tuple[list[_Extra], list[str], bool]:
    """(entries the lock does not name, missing marker files, whether the folder exists): one ``scandir`` per
    folder of the variant, never following a symlink. Locked files themselves are checked by _inspect_file."""
    try:
        st = os.lstat(root)
    except (FileNotFoundError, NotADirectoryError):
        return [], [], False
    if not stat.S_ISDIR(st.st_mode):
        what = f"a symlink to {os.readlink(root)}" if stat.S_ISLNK(st.st_mode) else "not a folder"
        return [_Extra("", f"{what}, where the variant folder belongs", ("",))], [], True
    extras: list[_Extra] = []
    missing: list[str] = []
    pending = [""]
    while pending:
        folder = pending.pop()
        expected = layout.get(folder, {})
        seen: set[str] = set()
        try:
            with os.scandir(root / folder if folder else root) as entries:
                items = list(entries)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for item in items:
            rel = f"{folder}/{item.name}" if folder else item.name
            kind = expected.get(item.name)
            if kind == FOLDER and item.is_dir(follow_symlinks=False):
                pending.append(rel)
            elif kind == MARKER and item.is_file(follow_symlinks=False):
                if item.stat(follow_symlinks=False).st_size:
                    extras.append(_Extra(rel, "not the empty marker file kernlock writes", (rel,)))
                    continue
            elif kind != FILE:  # a locked file: _inspect_file checks what it is
                extras.append(_extra(item, rel, kind))
                continue
            seen.add(item.name)
        missing += [f"{folder}/{n}" if folder else n for n, k in expected.items() if k == MARKER and n not in seen]
    return extras, missing, True


def _extra(item: os.DirEntry, rel: str, kind: str | None, limit: int = 10) -> _Extra:
    """Describe an unexpected entry; for a folder, the files it holds (at most ``limit`` named)."""
    if item.is_symlink():
        return _Extra(rel, f"a symlink to {os.readlink(item.path)}, not in kernels.lock", (rel,))
    if not item.is_dir(follow_symlinks=False):
        detail = "a file where kernels.lock has a folder" if kind == FOLDER else "not in kernels.lock"
        return _Extra(rel, detail, (rel,))
    found: list[str] = []
    for folder, dirs, files in os.walk(item.path):
        here = os.path.relpath(folder, item.path)
        prefix = rel if here == "." else f"{rel}/{here}"
        found += [f"{prefix}/{name}" for name in sorted(files)]
        found += [f"{prefix}/{name}" for name in sorted(dirs) if os.path.islink(os.path.join(folder, name))]
        if not files and not dirs and here != ".":
            found.append(f"{prefix}/")
    shown = tuple(found[:limit]) or (f"{rel}/",)
    detail = "not in kernels.lock" if found else "a folder not in kernels.lock"
    if kind == MARKER:
        detail += f" ({names.PYCACHE} must be the empty file kernlock writes, so that no bytecode is read)"
    return _Extra(rel, detail, shown, max(0, len(found) - limit))


def _link_target(locked: LockedFile) -> str:
    """The symlink ``snapshots/<commit>/build/<variant>/<path>`` -> ``blobs/<etag>``, relative, as kernlock (and
    huggingface_hub, with ``os.path.relpath``) write it: ``../../../../blobs/<etag>`` for a top-level file."""
    return "../" * (4 + locked.path.count("/")) + f"blobs/{locked.digest}"


def _inspect(entry: LockedKernel, variant: LockedVariant, cache: Path, full: bool, rehash: bool = True) -> _Inspection:
    """Check the variant folder: its listing (exactly the locked files and the markers), and every locked file
    by its receipt (stat only) where the receipt still holds, else by hashing it (``rehash``)."""
    root = variant_path(entry, variant, cache)
    receipt_file = receipt_path(entry, variant, cache)
    blobs = _blob(entry, variant.files[0], cache).parent  # proven inside the cache; every etag is plain hex
    extras, markers, _exists = _listing(root, _layout(variant))
    receipt = {} if full else _read_receipt(receipt_file)
    states, records, changed = [], {}, False
    present = bool(extras) or receipt_file.exists()
    for locked in variant.files:
        # The listing proved every folder of the variant a real folder, so ``root/path`` stays in it.
        link = root.joinpath(*locked.path.split("/"))
        state, record = _inspect_file(link, blobs / locked.digest, locked, receipt.get(locked.path), full, rehash)
        present = present or state.state != MISSING
        states.append(state)
        if record is not None:
            records[locked.path] = record
            changed = changed or record != receipt.get(locked.path)
    return _Inspection(root, tuple(states), records, changed or full, present, tuple(extras), tuple(markers))


def _inspect_file(
    link: Path, blob: Path, locked: LockedFile, record: Any, full: bool, rehash: bool = True
) -> tuple[_FileState, dict[str, Any] | None]:
    """A locked file: a symlink to exactly its blob (a regular file), or a regular file (a copy, on file systems
    without symlinks); then its receipt record, else its size and hash."""
    try:
        st = os.lstat(link)
    except (FileNotFoundError, NotADirectoryError):
        return _FileState(locked, MISSING), None
    path = link
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(link)
        if target != _link_target(locked):
            return _FileState(locked, MISMATCH, f"a symlink to {target}, not to its blob"), None
        try:
            st = os.lstat(blob)
        except (FileNotFoundError, NotADirectoryError):
            return _FileState(locked, MISSING), None
        if not stat.S_ISREG(st.st_mode):
            return _FileState(locked, MISMATCH, f"its blob {blob} is not a regular file"), None
        path = blob
    elif not stat.S_ISREG(st.st_mode):
        return _FileState(locked, MISMATCH, "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"), None
    key = _stat_key(st)
    if not full and isinstance(record, dict) and record.get("hash") == locked.hash and record.get("stat") == key:
        return _FileState(locked, OK), record
    if not rehash:
        return _FileState(locked, _UNVERIFIED), None
    if st.st_size != locked.size:
        return _FileState(locked, MISMATCH, f"size {st.st_size} bytes, locked {locked.size}"), None
    actual = file_hash(path, locked.algorithm)
    if actual != locked.hash:
        return _FileState(locked, MISMATCH, f"hash {actual}, locked {locked.hash}"), None
    return _FileState(locked, OK), {"hash": locked.hash, "stat": key}


def _describe(entry: LockedKernel, variant: LockedVariant, states: list[_FileState], limit: int = 3) -> str:
    names_ = ", ".join(f"{s.file.path} ({s.detail})" if s.detail else s.file.path for s in states[:limit])
    more = f" and {len(states) - limit} more" if len(states) > limit else ""
    return f"{entry.repo} {variant.name} (commit {entry.commit[:12]}): {names_}{more}"


def _describe_extras(
    entry: LockedKernel, variant: LockedVariant, extras: Iterable[_Extra], where: str = "", limit: int = 3
) -> str:
    """``repo variant (commit ...)[ where]: unexpected file build/<variant>/<path>, ...``."""
    paths = [f"build/{variant.name}/{shown}".rstrip("/") for extra in extras for shown in extra.shown]
    hidden = sum(extra.hidden for extra in extras) + max(0, len(paths) - limit)
    more = f" and {hidden} more" if hidden else ""
    noun = "file" if len(paths) == 1 and not hidden else "files"
    head = f"{entry.repo} {variant.name} (commit {entry.commit[:12]}){where}"
    return f"{head}: unexpected {noun} {', '.join(paths[:limit])}{more}"


def _place_markers(root: Path, paths: Iterable[str], cache: Path, strict: bool = False) -> None:
    """Write kernlock's empty ``__pycache__`` files (an existing entry that is not one is replaced); a read-only
    cache is skipped unless ``strict`` (Python cannot write bytecode there either)."""
    for rel in paths:
        path = _in_variant(root, rel, cache)
        try:
            _make_marker(path)
        except OSError:
            if strict:
                raise


def _make_marker(path: Path) -> None:
    for _attempt in range(2):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644))
            return
        except FileExistsError:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                return
            _remove(path)
    raise FileExistsError(f"{path} keeps being recreated")


def _remove(path: Path) -> None:
    """Remove a file, a symlink (never what it points to) or a folder tree."""
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _remove_extras(root: Path, extras: Iterable[_Extra], cache: Path) -> list[str]:
    """Remove every entry of the variant folder that the lock does not name; returns their paths."""
    removed = []
    for extra in extras:
        _remove(_in_variant(root, extra.path, cache))
        removed.append(extra.path or ".")
    return removed


def _integrity_message(entry: LockedKernel, variant: LockedVariant, inspection: _Inspection, cache: Path) -> str:
    parts = []
    mismatched = inspection.bad(MISMATCH)
    if mismatched:
        one = len(mismatched) == 1
        parts.append(
            f"{_describe(entry, variant, mismatched)} in {cache} {'does' if one else 'do'} not match kernels.lock; "
            f"run `kernlock sync` to replace {'it' if one else 'them'} (never loaded as is)."
        )
    if inspection.extras:
        files = sum(len(e.shown) + e.hidden for e in inspection.extras)
        it = "it" if files == 1 else "them"
        parts.append(
            f"{_describe_extras(entry, variant, inspection.extras, f' in {cache}')} not in kernels.lock; "
            f"run `kernlock sync` to remove {it} (never loaded)."
        )
    return " ".join(parts)


def check_variant(entry: LockedKernel, variant: LockedVariant, full: bool = False, cache: Path | None = None) -> Path:
    """The variant's folder, once it holds exactly the locked files (and kernlock's ``__pycache__`` markers) and
    every file is checked against the lock: by its receipt (size, mtime, inode, ctime), re-hashing a file whose
    receipt no longer holds, or re-hashing everything with ``full``.

    Raises IntegrityError for a file that does not match the lock or that the lock does not name (or a symlink
    that leads outside the cache), NotSyncedError for missing files. A missing marker is written.
    """
    cache = cache or cache_dir()
    inspection = _inspect(entry, variant, cache, full)
    if inspection.bad(MISMATCH) or inspection.extras:
        raise IntegrityError(_integrity_message(entry, variant, inspection, cache))
    missing = inspection.bad(MISSING)
    if missing:
        raise NotSyncedError(_not_synced_message(entry, variant, missing, cache, inspection.present))
    if inspection.markers:
        _place_markers(inspection.root, inspection.markers, cache)
    if inspection.receipt_changed:
        _write_receipt(entry, variant, inspection.records, cache)
    return inspection.root


def _not_synced_message(
    entry: LockedKernel, variant: LockedVariant, missing: list[_FileState], cache: Path, present: bool
) -> str:
    if not present:
        return (
            f"{entry.repo} {variant.name} (commit {entry.commit[:12]}) is not in the kernel cache {cache}; "
            "run `kernlock sync` (online) to download it."
        )
    return f"{_describe(entry, variant, missing)} missing from {cache}; run `kernlock sync` (online) to download it."


def is_synced(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> bool:
    """True when the receipt vouches for every file as it is now and the variant folder holds nothing else
    (stat and one listing, never hashes)."""
    try:
        inspection = _inspect(entry, variant, cache or cache_dir(), full=False, rehash=False)
    except IntegrityError:
        return False
    return inspection.ok and not inspection.markers


# -- fetching ----------------------------------------------------------------------------------------------


@cache
def _bar(progress: bool) -> type:
    """huggingface_hub's progress bar, shown only for large files (``progress``), or never."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class _LargeFileBar(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            total = kwargs.get("total")
            if not progress or total is None or total < LARGE_FILE:
                kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return _LargeFileBar


def _client(hub: Hub | None) -> Callable[[], Hub]:
    """``hub``, else a Hub made at the first call (thread-safe): a sync with nothing to fetch imports no HTTP."""
    made: list[Hub] = [hub] if hub is not None else []
    guard = threading.Lock()

    def get() -> Hub:
        with guard:
            if not made:
                from kernlock.hub import Hub

                made.append(Hub())
            return made[0]

    return get


def _blob(entry: LockedKernel, locked: LockedFile, cache: Path) -> Path:
    """``{cache}/kernels--{org}--{name}/blobs/<etag>``, proven inside the cache."""
    return _under(cache, _repo_name(entry.repo), "blobs", locked.digest)


def _link(blob: Path, link: Path, target: str) -> None:
    """Point ``link`` at ``blob`` with the relative symlink ``target`` (as huggingface_hub does), atomically."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and os.readlink(link) == target:
        return
    import shutil  # ~5 ms: only a sync that links files pays it

    if link.is_dir() and not link.is_symlink():  # a folder where the lock has a file
        shutil.rmtree(link)
    tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        os.symlink(target, tmp)
    except OSError:  # no symlinks on this file system: a copy, like huggingface_hub's fallback
        shutil.copyfile(blob, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _download_verified(
    hub: Hub, entry: LockedKernel, variant: LockedVariant, locked: LockedFile, dest: Path, bar: type
) -> None:
    """Download into ``dest`` (resuming what it holds) until its hash matches the lock; a wrong file is removed."""
    remote = f"build/{variant.name}/{locked.path}"
    for _attempt in range(2):
        hub.download(entry.repo, entry.commit, remote, dest, size=locked.size, tqdm_class=bar)
        actual = file_hash(dest, locked.algorithm)
        if actual == locked.hash:
            return
        dest.unlink(missing_ok=True)  # a wrong (or wrongly resumed) download never stays, even as .incomplete
    raise IntegrityError(
        f"{hub.endpoint} served {entry.repo} {variant.name} {locked.path} (commit {entry.commit[:12]}) with "
        f"{actual}, but kernels.lock records {locked.hash}; nothing was installed. Retry `kernlock sync`; if it "
        "persists the endpoint serves other content than the lock was made from (check HF_ENDPOINT)."
    )


def _install_file(
    hub: Hub, entry: LockedKernel, variant: LockedVariant, locked: LockedFile, cache: Path, bar: type
) -> int:
    """Make ``snapshots/.../<path>`` point at a verified blob; returns the bytes downloaded (0: blob reused)."""
    blob = _blob(entry, locked, cache)
    link = _in_variant(variant_path(entry, variant, cache), locked.path, cache)
    downloaded = 0
    with _lock_file(entry.repo, locked.digest, cache):
        reusable = (
            not blob.is_symlink()  # a blob is a regular file; a symlink is replaced, never followed
            and blob.is_file()
            and blob.stat().st_size == locked.size
            and file_hash(blob, locked.algorithm) == locked.hash
        )
        if not reusable:
            incomplete = blob.with_name(blob.name + ".incomplete")
            _unlink_symlink(incomplete)  # never download through a symlink
            _download_verified(hub, entry, variant, locked, incomplete, bar)
            os.replace(incomplete, blob)
            downloaded = locked.size
    _link(blob, link, _link_target(locked))
    return downloaded


def _fetch_variant(
    entry: LockedKernel,
    variant: LockedVariant,
    hub: Hub,
    cache: Path,
    pool: ThreadPoolExecutor,
    bar: type,
) -> VariantResult:
    """Under the variant's file lock: check; remove what the lock does not name; fetch exactly the files that are
    missing or wrong; write the ``__pycache__`` markers."""
    with _lock_file(entry.repo, f"kernlock-{entry.commit}-{variant.name}", cache):
        inspection = _inspect(entry, variant, cache, full=False)
        root = inspection.root
        removed = _remove_extras(root, inspection.extras, cache)
        if removed:  # a removed folder may have held (links to) locked files: look again
            inspection = _inspect(entry, variant, cache, full=False)
        todo = [s for s in inspection.files if s.state != OK]
        futures: dict[str, Future[int]] = {
            s.file.path: pool.submit(_install_file, hub, entry, variant, s.file, cache, bar) for s in todo
        }
        sizes = _gather(futures)
        _place_markers(root, _markers(variant), cache, strict=True)
        records = dict(inspection.records)
        for path in futures:
            locked = next(f for f in variant.files if f.path == path)
            records[path] = {"hash": locked.hash, "stat": _stat_key(os.stat(_in_variant(root, path, cache)))}
        if todo or inspection.receipt_changed:
            _write_receipt(entry, variant, records, cache, strict=True)
    return VariantResult(
        entry.repo,
        entry.commit,
        variant.name,
        root,
        len(variant.files),
        tuple(sorted(p for p, size in sizes.items() if size)),
        tuple(sorted(s.file.path for s in todo if s.state == MISMATCH)),
        sum(sizes.values()),
        tuple(removed),
    )


def _gather(futures: dict[str, Future[Any]]) -> dict[str, Any]:
    """Every future's result. On the first failure, what has not started is cancelled and what runs is waited for
    (so no task outlives the call), then the failure is raised; an interrupt propagates at once."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    _done, pending = wait(futures.values(), return_when=FIRST_EXCEPTION)
    failed = next((f for f in futures.values() if f.done() and not f.cancelled() and f.exception()), None)
    if failed is not None:
        for future in pending:
            future.cancel()
        wait(pending)
        raise failed.exception()  # type: ignore[misc]
    return {key: future.result() for key, future in futures.items()}


def _write_ref(entry: LockedKernel, cache: Path) -> None:
    """``refs/<ref>`` = the locked commit, so kernels' offline ``version=N`` lookup finds the locked build."""
    if entry.ref == entry.commit or not entry.ref or ".." in entry.ref.split("/"):
        return
    path = _under(cache, _repo_name(entry.repo), "refs", *entry.ref.split("/"))
    try:
        _unlink_symlink(path)
        if path.is_file() and path.stat().st_size <= 64 and path.read_text().strip() == entry.commit:
            return
        write_bytes_atomic(path, entry.commit.encode())
    except OSError:
        pass


def _cache_error(cache: Path, err: OSError) -> KernlockError:
    return KernlockError(
        f"cannot write to the kernel cache {cache} ({err.strerror or err}); make it writable or point "
        "KERNELS_CACHE (or HF_HUB_CACHE) at a writable folder, then run `kernlock sync` again."
    )


def ensure_variant(
    entry: LockedKernel,
    variant: LockedVariant,
    hub: Hub | None = None,
    offline: bool = False,
    cache: Path | None = None,
) -> Path:
    """The variant's verified folder; fetches exactly the locked files that are missing or wrong unless
    ``offline`` (then NotSyncedError / IntegrityError naming `kernlock sync`)."""
    cache = cache or cache_dir()
    try:
        return check_variant(entry, variant, cache=cache)
    except (NotSyncedError, IntegrityError):
        if offline or hfenv.offline():
            raise
    interrupt.reset()  # a load after an interrupted one (library use) fetches again
    with interrupt.worker_pool(FILE_WORKERS) as pool:
        try:
            result = _fetch_variant(entry, variant, _client(hub)(), cache, pool, _bar(False))
        except OSError as err:
            raise _cache_error(cache, err) from err
    _write_ref(entry, cache)
    return result.path


# -- sync and verify ---------------------------------------------------------------------------------------


def targets(lock: Lock, environments: Iterable[str] | None) -> list[tuple[LockedKernel, LockedVariant]]:
    """Every (entry, variant) the given environments load (None: every variant of the lock), deduplicated."""
    wanted = None if environments is None else list(environments)
    seen: dict[tuple[str, str, str], tuple[LockedKernel, LockedVariant]] = {}
    for entry in lock.kernels:
        for variant in entry.variants:
            if wanted is not None and not set(wanted) & set(variant.environments):
                continue
            seen.setdefault((entry.repo, entry.commit, variant.name), (entry, variant))
    return list(seen.values())


def sync(
    lock: Lock,
    environments: list[str],
    hub: Hub | FileSource | None = None,
    offline: bool = False,
    cache: Path | None = None,
    progress: bool = True,
) -> SyncReport:
    """Make the cache hold exactly the locked, verified files of every variant ``environments`` load.

    Files whose receipt still holds cost a ``stat`` and no request. ``offline``: only check, and raise one
    error naming every missing or corrupt file.
    """
    cache = cache or cache_dir()
    unknown = sorted(set(environments) - set(lock.environments))
    if unknown:
        raise NotSyncedError(
            f"kernels.lock has no entries for {', '.join(unknown)} (it covers {', '.join(lock.environments)}); "
            "add the environment to [tool.kernlock] environments and run `kernlock lock`."
        )
    pairs = targets(lock, environments)
    offline = offline or (hfenv.offline() and getattr(hub, "remote", True))  # a bundle is no network
    if offline:
        results = _check_offline(pairs, cache)
    else:
        results = _sync_online(pairs, _client(hub), cache, progress)
        for entry, _variant in pairs:
            _write_ref(entry, cache)
    return SyncReport(
        cache, tuple(environments), tuple(results), offline, kernels=tuple(sorted({e.repo for e, _ in pairs}))
    )


def _sync_online(
    pairs: list[tuple[LockedKernel, LockedVariant]], hub: Callable[[], Hub], cache: Path, progress: bool
) -> list[VariantResult]:
    def one(entry: LockedKernel, variant: LockedVariant) -> VariantResult:
        if is_synced(entry, variant, cache):  # the no-op path: stat calls only, no lock file, no request
            return VariantResult(
                entry.repo, entry.commit, variant.name, variant_path(entry, variant, cache), len(variant.files)
            )
        return _fetch_variant(entry, variant, hub(), cache, files, _bar(progress))

    try:
        with interrupt.worker_pool(FILE_WORKERS) as files, interrupt.worker_pool(VARIANT_WORKERS) as variants:
            futures = {f"{e.repo} {v.name}": variants.submit(one, e, v) for e, v in pairs}
            return list(_gather(futures).values())
    except OSError as err:
        raise _cache_error(cache, err) from err


def _check_offline(pairs: list[tuple[LockedKernel, LockedVariant]], cache: Path) -> list[VariantResult]:
    """Check every target without any request; one error lists everything missing, corrupt or unexpected."""
    results, missing, corrupt, unexpected = [], [], [], []
    for entry, variant in pairs:
        inspection = _inspect(entry, variant, cache, full=False)
        corrupt += [_describe(entry, variant, [s]) for s in inspection.bad(MISMATCH)]
        if inspection.extras:
            unexpected.append(_describe_extras(entry, variant, inspection.extras))
        absent = inspection.bad(MISSING)
        if absent:
            missing.append(_describe(entry, variant, absent) if inspection.present else f"{entry.repo} {variant.name}")
        if inspection.ok:
            if inspection.markers:
                _place_markers(inspection.root, inspection.markers, cache)
            if inspection.receipt_changed:
                _write_receipt(entry, variant, inspection.records, cache)
            results.append(VariantResult(entry.repo, entry.commit, variant.name, inspection.root, len(variant.files)))
    if corrupt or missing or unexpected:
        parts = (
            ([f"locked files that do not match kernels.lock: {'; '.join(corrupt)}"] if corrupt else [])
            + ([f"files that kernels.lock does not name: {'; '.join(unexpected)}"] if unexpected else [])
            + ([f"locked files not in the cache: {'; '.join(missing)}"] if missing else [])
        )
        error = IntegrityError if corrupt or unexpected else NotSyncedError
        raise error(
            f"offline sync into {cache} found {' | '.join(parts)}; run `kernlock sync` online (without "
            "--offline, HF_HUB_OFFLINE unset) to download, replace or remove them."
        )
    return results


def verify(lock: Lock, environments: list[str] | None = None, cache: Path | None = None) -> VerifyResult:
    """Re-hash every locked variant present in the cache and list its folder; the variants ``environments`` load
    must be present.

    Returns the problems (empty: all intact: every locked file matches, and no variant folder holds a file the
    lock does not name) and refreshes the receipts (and ``__pycache__`` markers) of intact variants.
    """
    cache = cache or cache_dir()
    required = {(e.repo, e.commit, v.name) for e, v in targets(lock, environments or [])}
    problems: list[Problem] = []
    checked: list[str] = []
    files = 0

    def inspect(pair: tuple[LockedKernel, LockedVariant]) -> _Inspection:
        return _inspect(pair[0], pair[1], cache, full=True)

    pairs = targets(lock, None)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(FILE_WORKERS) as pool:
        inspections = list(pool.map(inspect, pairs))
    for (entry, variant), inspection in zip(pairs, inspections, strict=True):
        if not inspection.present:
            if (entry.repo, entry.commit, variant.name) in required:
                problems.append(
                    Problem(entry.repo, entry.commit, variant.name, None, "not synced", "run `kernlock sync`")
                )
            continue
        checked.append(f"{entry.repo} {variant.name}")
        files += len(variant.files)
        for state in inspection.files:
            if state.state != OK:
                problems.append(
                    Problem(entry.repo, entry.commit, variant.name, state.file.path, state.state, state.detail)
                )
        for extra in inspection.extras:
            problems += [
                Problem(entry.repo, entry.commit, variant.name, shown or ".", UNEXPECTED, extra.detail)
                for shown in extra.shown
            ]
            if extra.hidden:
                detail = f"{extra.hidden} more file(s) not in kernels.lock"
                problems.append(Problem(entry.repo, entry.commit, variant.name, f"{extra.path}/", UNEXPECTED, detail))
        if inspection.ok:
            if inspection.markers:
                _place_markers(inspection.root, inspection.markers, cache)
            _write_receipt(entry, variant, inspection.records, cache)
    return VerifyResult(problems, checked, files, cache)
