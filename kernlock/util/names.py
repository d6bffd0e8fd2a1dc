"""Validated names: every repo id, commit, ref, path, size and hash kernlock reads is checked here, once.

A lock, a pyproject or a Hub answer may be hostile. Each ``check_*`` function returns the value when it is safe
and raises ``ValueError`` (with a reason a user can act on) when it is not; the lock model calls them on
construction, so a value that exists is a safe value. :func:`under` is the one way a filesystem path is built
from such parts: it proves the result stays below its root, symlinks included.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

__all__ = [
    "LOCK_NAME",
    "MAX_FILE_SIZE",
    "MAX_PATH",
    "PYCACHE",
    "check_commit",
    "check_hash",
    "check_path",
    "check_ref",
    "check_repo",
    "check_size",
    "check_variant_folder",
    "under",
    "under_each",
]


MAX_FILE_SIZE = 1 << 40  # 1 TiB: larger than any build file, small enough to catch nonsense
MAX_PATH = 1024
#: The patterns, compiled where first used (re keeps them): a command that checks no name compiles none.
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]{0,94}[A-Za-z0-9_])?"
_COMMIT = r"[0-9a-f]{40}"
_REF_PART = r"[A-Za-z0-9_][A-Za-z0-9_.\-+]*"
#: No control byte, slash, backslash or lone surrogate (JSON can hold one; UTF-8 cannot).
_PATH_PART = r"[^\x00-\x1f\x7f/\\\ud800-\udfff]+"
_HASH = r"(sha256:[0-9a-f]{64}|git-sha1:[0-9a-f]{40})"
_VARIANT = r"[a-z0-9][a-z0-9_.\-]{0,127}"
_REPO_PART_RE, _COMMIT_RE, _REF_PART_RE = re.compile(_REPO_PART), re.compile(_COMMIT), re.compile(_REF_PART)
_PATH_PART_RE, _HASH_RE, _VARIANT_RE = re.compile(_PATH_PART), re.compile(_HASH), re.compile(_VARIANT)
#: Python keeps bytecode here; kernlock puts a file of this name in every variant folder so none is written
#: or read there (docs/sync.md), so a locked path may not use the name.
PYCACHE = "__pycache__"
#: The lock file in a project folder.
LOCK_NAME = "kernels.lock"


def check_repo(value: object) -> str:
    """A Hub repo id ``org/name`` whose parts are safe folder names (no ``..``, ``--``, ``/`` or control bytes)."""
    if not isinstance(value, str):
        raise ValueError(f"repo id {value!r} is not a string")
    parts = value.split("/")
    if len(parts) != 2 or not all(_REPO_PART_RE.fullmatch(p) and "--" not in p and ".." not in p for p in parts):
        raise ValueError(
            f"{value!r} is not a repo id: expected org/name of letters, digits, '-', '_' and '.' "
            "(no '--' or '..'), e.g. kernels-community/activation"
        )
    return value


def check_commit(value: object) -> str:
    """A full commit sha: 40 lowercase hex digits."""
    if not isinstance(value, str) or not _COMMIT_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a 40-hex commit sha")
    return value


def check_ref(value: object) -> str:
    """A branch or tag name that is also a safe relative path (``refs/<ref>`` in the cache)."""
    if not isinstance(value, str) or not value or len(value) > 255:
        raise ValueError(f"{value!r} is not a branch or tag name")
    parts = value.split("/")
    if not all(_REF_PART_RE.fullmatch(p) and not p.endswith((".lock", ".")) and ".." not in p for p in parts):
        raise ValueError(f"{value!r} is not a branch or tag name (letters, digits, '.', '_', '-', '+', '/')")
    return value


def check_path(value: object) -> str:
    """A file path relative to a variant folder: '/'-separated, no empty, '.', '..' or ``__pycache__`` part,
    no control byte, backslash or lone surrogate, at most 1024 characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_PATH:
        raise ValueError(f"file path {value!r} is empty, not a string or too long")
    for part in value.split("/"):
        if part in ("", ".", "..", PYCACHE) or not _PATH_PART_RE.fullmatch(part) or len(part) > 255:
            raise ValueError(
                f"file path {value!r} is not a plain relative path (an empty, '.', '..' or {PYCACHE} part, an "
                "absolute path, a backslash or a control character)"
            )
    return value


def check_size(value: object) -> int:
    """A file size: an integer (not a bool) from 0 to 1 TiB."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FILE_SIZE:
        raise ValueError(f"file size {value!r} is not an integer from 0 to {MAX_FILE_SIZE}")
    return value


def check_hash(value: object) -> str:
    """``sha256:<64 hex>`` (LFS files) or ``git-sha1:<40 hex>`` (git blob id)."""
    if not isinstance(value, str) or not _HASH_RE.fullmatch(value):
        raise ValueError(f"hash {value!r} is not sha256:<64 hex> or git-sha1:<40 hex>")
    return value


def check_variant_folder(value: object) -> str:
    """A build variant name as a folder name: lowercase letters, digits, '.', '_', '-' (the grammar itself is
    checked by :mod:`kernlock.environments.environment`)."""
    if not isinstance(value, str) or not _VARIANT_RE.fullmatch(value) or ".." in value:
        raise ValueError(f"{value!r} is not a build variant name (e.g. torch213-cxx11-cpu-x86_64-linux)")
    return value


def under(root: Path, *parts: str) -> Path:
    """``root/parts...``, proven to stay below ``root`` once symlinks are followed; ValueError otherwise.

    Only the folders that will hold the result are checked (the last part may be a symlink kernlock makes): from
    ``root`` resolved once, each existing folder below it is looked at with ``lstat``, and a symlink among them must
    resolve to a place below ``root`` (a few system calls, not a ``realpath`` of the whole path: every kernel
    load checks its paths).
    """
    under_each(root, parts)
    return Path(root, *parts)


def under_each(root: Path, *paths: tuple[str, ...]) -> list[str]:
    """:func:`under` for several paths below one ``root`` (each given as its parts), as strings: ``root`` is
    resolved once and a folder the paths share is looked at once (a kernel load checks its variant folder and its
    blobs folder, both in the same repo folder)."""
    split = [_pieces(root, parts) for parts in paths]
    real_root = _real_root(os.fspath(root))
    inside = real_root.rstrip(os.sep) + os.sep
    seen: dict[tuple[str, ...], str | None] = {}  # folders' parts -> where they lead (None: missing)
    for parts, pieces in zip(paths, split, strict=True):
        here: str | None = real_root
        for i in range(len(pieces) - 1):
            prefix = tuple(pieces[: i + 1])
            if prefix in seen:
                here = seen[prefix]
            else:
                assert here is not None
                here = os.path.join(here, pieces[i])
                try:
                    mode = os.lstat(here).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    here = None  # nothing below a missing folder can be a symlink yet
                else:
                    if stat.S_ISLNK(mode):
                        here = os.path.realpath(here)
                        if here != real_root and not here.startswith(inside):
                            raise ValueError(f"{Path(root, *parts)} leaves {root} (through a symlink to {here})")
                seen[prefix] = here
            if here is None:
                break
    top = os.fspath(root)
    return [os.path.join(top, *pieces) for pieces in split]


def _pieces(root: Path, parts: tuple[str, ...]) -> list[str]:
    """The parts as ``Path(*parts).parts`` has them (without building a Path); ValueError for one that leaves."""
    if os.sep == "/":
        pieces = [piece for part in parts for piece in part.split("/") if piece and piece != "."]
        absolute = any(part.startswith("/") for part in parts)
    else:  # pragma: no cover - Windows
        relative = Path(*parts)
        pieces, absolute = list(relative.parts), relative.is_absolute()
    if ".." in pieces or absolute:
        raise ValueError(f"{os.path.join(*parts)!r} leaves {root}")
    return pieces


#: root -> (device, inode, realpath) of the folders ``under`` resolved (a process uses one or two cache roots).
_REAL_ROOTS: dict[str, tuple[int, int, str]] = {}


def _real_root(root: str) -> str:
    """``os.path.realpath(root)``, remembered while ``root`` and the remembered real path still name the same
    folder (two ``stat`` calls instead of an ``lstat`` per part of the path and realpath's Python work: every kernel
    load checks three paths)."""
    try:
        now = os.stat(root)
    except OSError:
        return os.path.realpath(root)
    known = _REAL_ROOTS.get(root)
    if known is not None and known[:2] == (now.st_dev, now.st_ino):
        try:
            again = os.stat(known[2])
        except OSError:
            again = None
        if again is not None and (again.st_dev, again.st_ino) == known[:2]:
            return known[2]
    real = os.path.realpath(root)
    if len(_REAL_ROOTS) < 64:
        _REAL_ROOTS[root] = (now.st_dev, now.st_ino, real)
    return real
