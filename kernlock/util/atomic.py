"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from kernlock.util.hfenv import make_private
from kernlock.util.sharing import make_folder

__all__ = ["unwritable", "write_bytes_atomic", "write_text_atomic"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _old_mode(path: Path) -> int | None:
    """The permission bits of the file being replaced; None when there is none."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return None


def _create_temporary(path: Path, mode: int) -> tuple[int, Path]:
    """A new file ``.<name>.<pid>.<random hex>.tmp`` beside ``path``, opened for writing (``mode`` as open() applies
    it: minus the umask). os.urandom instead of tempfile, which costs ~8 ms of imports (shutil, random)."""
    for _attempt in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(8).hex()}.tmp")
        try:
            return os.open(tmp, _CREATE, mode), tmp
        except FileExistsError:  # a name drawn twice out of 2**64: draw again
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True, private: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync'd (unless not ``durable``: a
    cache whose torn file is only re-derived), then renamed.

    The file keeps its permissions (a new one gets what a plain open() gives: 0o666 minus the umask), and a symlink
    keeps pointing where it did: the file it points to is the one replaced. ``private``: a record of kernlock's own
    cache, which steers what is loaded (:func:`kernlock.util.hfenv.read_private` reads it only if the user's alone):
    the file is 0600 and missing folders 0700, whatever the umask or the file it replaces. On any error or
    interrupt the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path).resolve()
    if private:
        make_private(os.fspath(path.parent))
    else:
        make_folder(path.parent)  # group-shareable below a group-writable folder (kernlock.util.sharing)
    mode = 0o600 if private else _old_mode(path)
    # A replacement is written unreadable to others until it gets the old file's bits; a new file is created with
    # what open() would give it (the kernel applies the umask: no os.umask() round trip, which is process-wide and
    # would briefly change the mode of files other threads create).
    fd, tmp = _create_temporary(path, 0o600 if mode is not None else 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, *, durable: bool = True, private: bool = False) -> None:
    """Write ``text`` (UTF-8) atomically (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode(), durable=durable, private=private)


#: Why a write to a cache can fail that is not kernlock's to fix: the cache (or that path in it) is read-only,
#: someone else's, holds a folder where a file belongs, or the disk is full.
_UNWRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ENOSPC, errno.EDQUOT}
)


def unwritable(err: OSError) -> bool:
    """Whether ``err`` means the cache cannot be written there (a shortcut written to it is then skipped); any
    other error (an I/O error, a path too long) is not skipped."""
    return err.errno in _UNWRITABLE
