"""Where locked files live in the kernel cache, how they are hashed, and the receipts that vouch for them.

The layout is the standard huggingface_hub cache, so that the kernels library finds the files by itself::

    {cache}/kernels--{org}--{name}/
        blobs/<etag>                                  content; etag = sha256 (LFS files) or git blob sha1
        snapshots/<commit>/build/<variant>/<path>     relative symlinks to ../../../../blobs/<etag>
        snapshots/<commit>/build/<variant>/[<dir>/]__pycache__
                                                      an empty FILE in every folder holding a locked .py file:
                                                      Python can neither read nor write bytecode there
        refs/<ref>                                    the locked commit of each branch/tag the lock names
    {cache}/.locks/kernels--{org}--{name}/<etag>.lock the blob locks huggingface_hub itself takes

and the receipts, per file (size, mtime_ns, inode, ctime_ns) -> verified hash, in kernlock's own cache (which only
the user can write, :func:`kernlock.util.hfenv.private`; the kernel cache may be shared)::

    {kernlock cache}/receipts/<key of the kernel cache>/kernels--{org}--{name}/<commit>/<variant>.json

Every path is built with :func:`kernlock.util.names.under`, so no symlink in the cache can lead a write (or a load)
outside it. The receipt lets run-time activation check a variant with a few ``stat`` calls and one listing of
its folder instead of re-hashing it. This module imports no network stack: the run-time hooks, ``verify`` and
``show`` need only it and :mod:`kernlock.sync.integrity`.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernlock.errors import IntegrityError
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant
from kernlock.util import hfenv, names
from kernlock.util.atomic import unwritable, write_bytes_atomic
from kernlock.util.digest import sha256_hex

__all__ = [
    "FILE",
    "FOLDER",
    "MARKER",
    "RECEIPTS",
    "RECEIPT_VERSION",
    "blob_path",
    "cache_dir",
    "default_cache_dir",
    "entry_targets",
    "evidence",
    "file_hash",
    "in_variant",
    "layout",
    "link_target",
    "markers",
    "read_receipt",
    "receipt_path",
    "receipts_folder",
    "receipts_kept",
    "ref_file",
    "refusal_path",
    "repo_folder",
    "stat_key",
    "targets",
    "under",
    "unlink_symlink",
    "variant_folders",
    "variant_path",
    "write_receipt",
]

#: Files Python compiles to bytecode in ``__pycache__``: a folder holding one gets kernlock's marker file.
SOURCE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES)
FILE, FOLDER, MARKER = "file", "folder", "marker"  # what a variant folder's layout names

RECEIPT_VERSION = 2  # 2: the stat key has st_ctime_ns (older receipts are ignored: a re-hash, not a download)
RECEIPTS = "receipts"
REFUSED = "refused"
_CHUNK = 1024 * 1024
_MAX_RECEIPT = 16 * 1024 * 1024
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

#: One record of a receipt: ``{"hash": "sha256:...", "stat": [size, mtime_ns, inode, ctime_ns]}``.
Record = dict[str, Any]


# -- where things live -------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The kernels cache: ``$KERNELS_CACHE``, else ``$HF_HUB_CACHE``, else huggingface_hub's default."""
    value = os.environ.get("KERNELS_CACHE") or os.environ.get("HF_HUB_CACHE")
    return _cache_dir(value)


def default_cache_dir() -> Path:
    """The kernels cache when neither ``$KERNELS_CACHE`` nor ``$HF_HUB_CACHE`` names one (huggingface_hub's)."""
    return _cache_dir(None)


@functools.lru_cache(maxsize=8)
def _cache_dir(value: str | None) -> Path:
    """The folder ``value`` names (a Path costs ~10 us: every load asks), else huggingface_hub's default (read once
    in a process: huggingface_hub reads its variables at import)."""
    return Path(value).expanduser() if value else Path(hfenv.hub_cache())


def under(root: Path, *parts: str, cache: Path | None = None) -> Path:
    """``root/parts...`` proven to stay below ``root`` (symlinks included); IntegrityError naming the cache."""
    try:
        return names.under(root, *parts)
    except ValueError as err:
        raise _leaves(cache or root, err) from err


def _leaves(cache: Path, err: ValueError) -> IntegrityError:
    return IntegrityError(
        f"the kernel cache {cache} holds a path that leads outside it",
        why=f"{err}. kernlock wrote and loaded nothing there",
        fix="remove that symlink (or point KERNELS_CACHE at another folder), then run `kernlock sync`",
    )


def repo_folder(repo: str, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}``."""
    cache = cache or cache_dir()
    return under(cache, hfenv.repo_folder(repo))


def variant_path(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}/snapshots/{commit}/build/{variant}``: what the kernels loader imports.

    IntegrityError when a symlink on the way leads outside the cache."""
    cache = cache or cache_dir()
    return under(cache, hfenv.repo_folder(entry.repo), "snapshots", entry.commit, "build", variant.name)


def variant_folders(entry: LockedKernel, variant: LockedVariant, cache: Path) -> tuple[Path, str]:
    """(:func:`variant_path`, the folder of the repo's blobs) with one check of the folders they share (every load
    asks for both). IntegrityError when a symlink on the way leads outside the cache."""
    repo = hfenv.repo_folder(entry.repo)
    try:
        root, blob = names.under_each(
            cache, (repo, "snapshots", entry.commit, "build", variant.name), (repo, "blobs", variant.files[0].digest)
        )
    except ValueError as err:
        raise _leaves(cache, err) from err
    return Path(root), os.path.dirname(blob)


def receipt_path(
    entry: LockedKernel, variant: LockedVariant, cache: Path | None = None, *, create: bool = False
) -> Path | None:
    """``{kernlock cache}/receipts/<key>/kernels--{org}--{name}/{commit}/{variant}.json``, ``key`` naming the kernel
    cache. A receipt vouches for files without hashing them, so it lives where only the user can write: one in a
    shared kernel cache could vouch for a swapped file. None when kernlock's cache is not the user's alone
    (:func:`kernlock.util.hfenv.private`; ``create``: make it first): every check then hashes."""
    return _kept(receipts_folder(), entry, variant, cache, ".json", create)


def refusal_path(
    entry: LockedKernel, variant: LockedVariant, cache: Path | None = None, *, create: bool = False
) -> Path | None:
    """``{kernlock cache}/refused/<key>/kernels--{org}--{name}/{commit}/{variant}.txt``: why sync withdrew the
    variant from the kernel cache at ``cache`` (its signature failed), so that a load says the same (None: kernlock's
    cache is not the user's alone: a load then says the variant is not synced)."""
    return _kept(hfenv.cache_root() / REFUSED, entry, variant, cache, ".txt", create)


def _kept(
    root: Path, entry: LockedKernel, variant: LockedVariant, cache: Path | None, suffix: str, create: bool
) -> Path | None:
    """A record about a variant of the kernel cache ``cache``, kept in kernlock's own cache below ``root``.

    Its parts are checked names (no ``..``, no separator), and below a private ``root`` only the user can put
    anything, so a path to read or remove is built as it is (a load reads one; the record itself is read with
    :func:`kernlock.util.hfenv.read_private`, which never follows a symlink and takes only the user's own file). A
    path to write (``create``) is proven below ``root`` first: a symlink the user planted among its folders gets
    no record (every file is then hashed)."""
    if not hfenv.private(root, create=create):
        return None
    parts = (_cache_key(os.path.abspath(cache or cache_dir())), hfenv.repo_folder(entry.repo), entry.commit)
    if not create:
        return Path(os.path.join(root, *parts, variant.name + suffix))
    try:
        return names.under(root, *parts, variant.name + suffix)
    except ValueError:
        return None


@functools.lru_cache(maxsize=16)
def _cache_key(cache: str) -> str:
    """The name of the receipts' folder for the kernel cache at ``cache`` (an absolute path)."""
    return sha256_hex(os.fsencode(cache))[:16]


def receipts_folder() -> Path:
    """``{kernlock cache}/receipts``."""
    return _below(hfenv.cache_root(), RECEIPTS)


@functools.lru_cache(maxsize=8)
def _below(root: Path, name: str) -> Path:
    return root / name


def receipts_kept(*, create: bool = False) -> bool:
    """Whether receipts can be kept: kernlock's cache is the user's alone (:func:`kernlock.util.hfenv.private`;
    ``create``: make the receipts folder first)."""
    return hfenv.private(receipts_folder(), create=create)


def blob_path(entry: LockedKernel, locked: LockedFile, cache: Path) -> Path:
    """``{cache}/kernels--{org}--{name}/blobs/<etag>``, proven inside the cache."""
    return under(cache, hfenv.repo_folder(entry.repo), "blobs", locked.digest)


def in_variant(root: Path, path: str, cache: Path) -> Path:
    """``root/path`` for a path relative to a variant folder, proven to stay in it."""
    return under(root, *path.split("/"), cache=cache) if path else root


def layout(variant: LockedVariant) -> dict[str, dict[str, str]]:
    """What a synced variant folder holds: folder ("" = the variant folder) -> {name: file | folder | marker}."""
    layout: dict[str, dict[str, str]] = {"": {}}
    for locked in variant.files:
        *folders, name = locked.path.split("/")
        folder = ""
        for part in folders:
            layout[folder][part] = FOLDER
            folder = f"{folder}/{part}" if folder else part
            layout.setdefault(folder, {})
        layout[folder][name] = FILE
        if name.endswith(SOURCE_SUFFIXES):
            layout[folder][names.PYCACHE] = MARKER
    return layout


def markers(variant: LockedVariant) -> list[str]:
    """Paths of the ``__pycache__`` marker files, relative to the variant folder."""
    folders = [folder for folder, entries in layout(variant).items() if MARKER in entries.values()]
    return [f"{folder}/{names.PYCACHE}" if folder else names.PYCACHE for folder in folders]


def evidence(entry: LockedKernel, variant: LockedVariant, cache: Path) -> list[str]:
    """Every path whose state :func:`kernlock.sync.integrity.is_synced` reads: the cache and the folders down to
    the variant folder, each folder in it, every locked file (its link and its blob), the markers and the receipt.
    A write to any of them (a file added, removed, replaced or changed) changes its identity
    (:mod:`kernlock.util.memo`); while none changes, neither does the answer."""
    repo = os.path.join(cache, hfenv.repo_folder(entry.repo))
    commit = os.path.join(repo, "snapshots", entry.commit)
    root = os.path.join(commit, "build", variant.name)
    blobs = os.path.join(repo, "blobs")
    folders = [os.path.join(root, *folder.split("/")) for folder in layout(variant) if folder]
    files = [os.path.join(root, *locked.path.split("/")) for locked in variant.files]
    receipt = receipt_path(entry, variant, cache)
    return [
        os.fspath(cache),
        *(repo, os.path.dirname(commit), commit, os.path.dirname(root), root, blobs),
        *folders,
        *files,
        *(os.path.join(blobs, locked.digest) for locked in variant.files),
        *(os.path.join(root, *marker.split("/")) for marker in markers(variant)),
        *([os.fspath(receipt)] if receipt is not None else []),
    ]


def ref_file(entry: LockedKernel, cache: Path) -> Path | None:
    """``{cache}/kernels--{org}--{name}/refs/<ref>``, which :func:`write_ref` writes; None for an entry locked by
    commit (no ref to write)."""
    if entry.ref == entry.commit or not entry.ref or ".." in entry.ref.split("/"):
        return None
    return under(cache, hfenv.repo_folder(entry.repo), "refs", *entry.ref.split("/"))


def link_target(locked: LockedFile) -> str:
    """The symlink ``snapshots/<commit>/build/<variant>/<path>`` -> ``blobs/<etag>``, relative, as kernlock (and
    huggingface_hub, with ``os.path.relpath``) write it: ``../../../../blobs/<etag>`` for a top-level file."""
    return "../" * (4 + locked.path.count("/")) + f"blobs/{locked.digest}"


def unlink_symlink(path: Path) -> None:
    """A symlink where kernlock writes a file is replaced, never written through."""
    if path.is_symlink():
        path.unlink()


def targets(lock: Lock, environments: Iterable[str] | None) -> list[tuple[LockedKernel, LockedVariant]]:
    """Every (entry, variant) the given environments load (None: every variant of the lock), deduplicated: what
    the cache must hold for them."""
    return entry_targets(lock.kernels, environments)


def entry_targets(
    entries: Iterable[LockedKernel], environments: Iterable[str] | None
) -> list[tuple[LockedKernel, LockedVariant]]:
    """:func:`targets` of a lock's ``entries``."""
    wanted = None if environments is None else set(environments)
    seen: dict[tuple[str, str, str], tuple[LockedKernel, LockedVariant]] = {}
    for entry in entries:
        for variant in entry.variants:
            if wanted is not None and not wanted & set(variant.environments):
                continue
            seen.setdefault((entry.repo, entry.commit, variant.name), (entry, variant))
    return list(seen.values())


# -- hashing and receipts ----------------------------------------------------------------------------------


def file_hash(path: str | Path, algorithm: str) -> str:
    """``sha256:<hex>`` of the content, or ``git-sha1:<hex>`` (the git blob id) of ``path``."""
    from kernlock.util.hashing import hasher  # hashlib (OpenSSL) and threading: only where a file is hashed

    with open(path, "rb") as handle:
        digest = hasher(algorithm, os.fstat(handle.fileno()).st_size)
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return f"{algorithm}:{digest.hexdigest()}"


def stat_key(st: os.stat_result) -> list[int]:
    """What a receipt records of a verified file: a rewrite with its mtime put back still changes the ctime."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def read_receipt(path: Path) -> dict[str, Any]:
    """The receipt's file records; {} when it is missing, unreadable, not a regular file, not the user's alone
    (:func:`kernlock.util.hfenv.read_private`) or of another version: the files are then hashed instead."""
    text = hfenv.read_private(path, _MAX_RECEIPT)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # an unreadable receipt only costs a re-hash
        return {}
    if not isinstance(data, dict) or data.get("receipt-version") != RECEIPT_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def write_receipt(
    entry: LockedKernel, variant: LockedVariant, records: dict[str, Record], cache: Path, *, strict: bool = False
) -> None:
    """Write the receipt atomically. A cache that cannot be written (:func:`unwritable`) only loses the shortcut
    (the next check re-hashes), unless ``strict`` (sync, which must leave the cache checkable by stat calls)."""
    data = {
        "receipt-version": RECEIPT_VERSION,
        "repo": entry.repo,
        "commit": entry.commit,
        "variant": variant.name,
        "files": {path: records[path] for path in sorted(records)},
    }
    path = receipt_path(entry, variant, cache, create=True)
    if path is None:
        return  # kernlock's cache is not the user's alone: loads hash instead
    try:
        unlink_symlink(path)
        write_bytes_atomic(path, json.dumps(data, indent=1).encode(), private=True)
    except OSError as err:
        if strict or not unwritable(err):
            raise
