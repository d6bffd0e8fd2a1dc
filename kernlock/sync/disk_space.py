"""Disk space for the kernel cache: a sync that cannot fit is refused before its first download, naming the
bytes it needs and the bytes free; a disk that fills up anyway is named as full, not as unwritable."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from kernlock.errors import DiskFullError
from kernlock.lock.model import LockedKernel, LockedVariant
from kernlock.sync.cache import blob_path
from kernlock.util.wording import size

__all__ = ["full_disk", "needed_bytes", "require_space"]

#: The fix of a cache's disk without room.
FREE_SPACE = (
    "Free space there, or point KERNELS_CACHE (or HF_HUB_CACHE) at a disk with room, then run `kernlock sync` again"
)
#: The fix of a kernel cache that cannot be written for another reason.
WRITABLE = (
    "make it writable or point KERNELS_CACHE (or HF_HUB_CACHE) at a writable folder, then run `kernlock sync` again"
)
#: Room kept beyond the files themselves: the snapshot links, receipts and lock files a sync writes.
MARGIN = 1 << 20


def needed_bytes(pairs: Iterable[tuple[LockedKernel, LockedVariant]], cache: Path) -> int:
    """Bytes of the locked files whose blob is not in the cache yet (each blob once, however many variants share
    it); what a blob's ``.incomplete`` already holds is not needed again."""
    needed: dict[Path, int] = {}
    for entry, variant in pairs:
        for locked in variant.files:
            blob = blob_path(entry, locked, cache)
            if blob in needed:
                continue
            try:
                if not blob.is_symlink() and blob.stat().st_size == locked.size:
                    continue
            except OSError:
                pass
            try:
                held = os.stat(blob.with_name(blob.name + ".incomplete")).st_size
            except OSError:
                held = 0
            needed[blob] = max(0, locked.size - held)
    return sum(needed.values())


def require_space(pairs: list[tuple[LockedKernel, LockedVariant]], cache: Path) -> None:
    """DiskFullError before any download when the disk holding ``cache`` has less room than the missing files."""
    needed = needed_bytes(pairs, cache)
    if not needed:
        return
    free = _free(cache)
    if free is not None and needed + MARGIN > free:
        raise DiskFullError(
            f"not enough room for the kernel files in {cache}",
            why=f"they need {size(needed)} ({needed} bytes) and the disk has {size(free)} ({free} bytes) free; "
            "nothing was downloaded",
            fix=FREE_SPACE,
        )


def full_disk(cache: Path, err: OSError) -> DiskFullError | None:
    """The error for a disk that filled up during a sync (ENOSPC, EDQUOT), or None for any other OSError."""
    if err.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    free = _free(cache)
    left = f" ({size(free)} free now)" if free is not None else ""
    return DiskFullError(
        f"the disk holding the kernel cache {cache} is full{left}",
        why=f"{err.strerror or err}; no partial file was kept",
        fix=FREE_SPACE,
    )


def _free(cache: Path) -> int | None:
    """Bytes this user may still write on the disk of ``cache`` (its nearest existing folder), None if unknown."""
    folder = cache
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    try:
        stats = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs (Windows): the download itself finds out
        return None
    return stats.f_bavail * stats.f_frsize
