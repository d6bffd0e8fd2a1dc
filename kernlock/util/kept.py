"""Folders of this user's alone holding files kernlock writes for programs to run or read: `kernlock run`'s
sitecustomize, the lock a Ray job ships (docs/security.md: what a program runs from must be the user's alone)."""

from __future__ import annotations

from pathlib import Path

from kernlock.errors import ActivationError

__all__ = ["digest", "private_folder"]


def digest(data: bytes) -> str:
    """A name for ``data``: 16 hex digits of its SHA-256 (:func:`kernlock.util.digest.sha256_hex`, which spares a
    process hashlib's OpenSSL)."""
    from kernlock.util.digest import sha256_hex

    return sha256_hex(data)[:16]


def private_folder(project: Path, kind: str, name: str, files: dict[str, bytes], what: str) -> Path:
    """``.kernlock/<kind>/<name>/`` beside the lock when that folder is this user's alone, else the same under
    kernlock's cache, holding ``files`` (each written once, atomically; rewritten when missing, changed or writable
    by others): `kernlock run`'s sitecustomize, the lock Ray ships. ``name`` should name the content."""
    from kernlock.util.atomic import write_bytes_atomic
    from kernlock.util.hfenv import cache_root, private, read_private
    from kernlock.util.sharing import kernlock_folder

    beside = project / ".kernlock"
    for kept in (beside / kind, cache_root() / kind):
        if private(kept / name, create=True):  # the folder Python imports it from, and every folder above
            break
    else:
        raise ActivationError(
            f"cannot keep {what} in {beside / kind / name} or {kept / name}",
            why="they cannot be created, or they are not this user's alone (another user owns them or a folder above "
            "them, or a group or others can write them, and a program would run code from them)",
            fix="Point KERNLOCK_CACHE at a folder of your own, or `chmod go-w` those folders and the folders above "
            "them",
        )
    if kept.parent == beside:
        kernlock_folder(project)  # its .gitignore
    for file, data in files.items():
        target = kept / name / file
        if read_private(target, len(data)) != data:  # missing, changed or others could write it
            write_bytes_atomic(target, data, private=True)
    return kept / name
