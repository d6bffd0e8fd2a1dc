"""Where the caches are, the offline switch, and whether a folder is private to this user.

The Hub cache and the offline switch are huggingface_hub's own (``huggingface_hub.constants``, read from the
environment once, at its import): the library's answer, not a copy of its derivation that could drift.
``huggingface_hub.constants`` imports only the standard library and the package's lazy ``__init__`` (1-4 ms here,
not the network stack, which a command that makes no request never imports). kernlock's own cache
(:func:`cache_root`) and the privacy check of what it holds (:func:`private`) are kernlock's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path

__all__ = ["cache_root", "hub_cache", "make_private", "offline", "private", "read_private", "repo_folder"]


def hub_cache() -> str:
    """``huggingface_hub.constants.HF_HUB_CACHE``."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def offline() -> bool:
    """``huggingface_hub.constants.HF_HUB_OFFLINE``."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def repo_folder(repo: str, repo_type: str = "kernel") -> str:
    """``huggingface_hub.file_download.repo_folder_name``: ``kernels--org--name``."""
    return "--".join([f"{repo_type}s", *repo.split("/")])


def cache_root() -> Path:
    """kernlock's own cache: ``$KERNLOCK_CACHE``, else ``$XDG_CACHE_HOME/kernlock``, else ~/.cache/kernlock."""
    environ = os.environ
    return _cache_root(environ.get("KERNLOCK_CACHE"), environ.get("XDG_CACHE_HOME"), environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _cache_root(explicit: str | None, xdg: str | None, home: str | None) -> Path:
    """:func:`cache_root` for these variables (Paths are built once: every kernel load asks for its receipt)."""
    if explicit:
        return Path(explicit)
    base = xdg or Path.home() / ".cache"
    return Path(base) / "kernlock"


def private(folder: Path | str, *, create: bool = False) -> bool:
    """Whether only this user (or root) can change what ``folder`` holds: it and every folder above it, symlinks
    resolved, belong to the user or root and are writable by no group or other user (above it, a sticky folder such
    as /tmp is fine: others cannot move what is ours there). What kernlock's own cache holds (receipts, the lock
    index, Hub answers, ``kernlock run``'s sitecustomize) steers what is loaded, so it is used only from such a
    folder: anyone else who could write there could forge it. ``create``: make what is missing first, mode 0700
    (nothing is made below a folder that would make it shared)."""
    if not hasattr(os, "geteuid"):  # Windows: access is ACLs, not mode bits
        return True
    key = os.fspath(folder)
    if key in _PRIVATE and _stamps(key) == _PRIVATE[key]:
        return True
    try:
        if create:
            missing = _missing(os.path.abspath(folder))
            if missing and not _only_mine(os.path.realpath(os.path.dirname(missing[-1])), leaf=False):
                return False  # what it would make there could not be private either: nothing is made
            _make(missing)
        if not _only_mine(os.path.realpath(folder), leaf=True):
            return False
    except OSError:
        return False
    stamps = _stamps(key)
    if stamps is not None and len(_PRIVATE) < 64:
        _PRIVATE[key] = stamps
    return True


def _only_mine(path: str, *, leaf: bool) -> bool:
    """``path`` (a real path) and every folder above it are folders of the user or root that no group or other user
    can write (above the leaf, a sticky folder is fine). OSError when one cannot be looked at."""
    owners = (os.geteuid(), 0)
    while True:
        found = os.stat(path)
        shared = found.st_mode & 0o022 and (leaf or not found.st_mode & stat.S_ISVTX)
        if found.st_uid not in owners or shared or not stat.S_ISDIR(found.st_mode):
            return False
        parent, leaf = os.path.dirname(path), False
        if parent == path:
            return True
        path = parent


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def read_private(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The bytes of ``path`` when it is a regular file only this user (or root) can change: theirs, and writable
    by no group or other user. None when it is missing, a symlink, larger than ``limit`` bytes, or could have been
    written by someone else: a record kept in a private folder that others may enter (0755) is still theirs to
    rewrite when a umask of 002 made it 0664 (kernlock writes its own 0600:
    :func:`kernlock.util.atomic.write_bytes_atomic` with ``private``). One open, one fstat, plain reads of the size
    found (a buffered read of ``limit`` bytes would allocate that much for every small record)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size > limit or not _alone(found):
            return None
        data = os.read(fd, found.st_size + 1)
        while len(data) > found.st_size and len(data) <= limit:  # it grew since the fstat: read to the end
            more = os.read(fd, 1 << 20)
            if not more:
                break
            data += more
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _alone(found: os.stat_result) -> bool:
    """Whether only this user (or root) can change the file or folder ``found`` describes (not its entries'
    names: see :func:`private`)."""
    if not hasattr(os, "geteuid"):  # Windows: access is ACLs, not mode bits
        return True
    return found.st_uid in (os.geteuid(), 0) and not found.st_mode & 0o022


#: Folders found private in this process -> the stamps of the folder and the one holding it then. Only their
#: owner (the user) or root can change a private folder or any folder above it, so the verdict holds while those two
#: stamps do (checked again on every use: a chmod of either, or another folder put in place, asks again).
_PRIVATE: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}


def _stamps(folder: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(device, inode, mode, owner) of ``folder`` and of the folder holding it; None when either is missing."""
    try:
        mine, holder = os.stat(folder), os.stat(os.path.dirname(os.path.abspath(folder)))
    except OSError:
        return None
    return (mine.st_dev, mine.st_ino, mine.st_mode, mine.st_uid), (
        holder.st_dev,
        holder.st_ino,
        holder.st_mode,
        holder.st_uid,
    )


def make_private(folder: str) -> None:
    """Create ``folder`` and any missing folder above it with mode 0700 (os.makedirs gives a mode to the last)."""
    _make(_missing(folder))


def _missing(folder: str) -> list[str]:
    """``folder`` and the folders above it that do not exist, deepest first."""
    missing = []
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _make(missing: list[str]) -> None:
    """Create the folders :func:`_missing` listed, shallowest first, mode 0700."""
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
