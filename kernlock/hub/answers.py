"""What kernlock accepts of a Hub answer: every field checked where it arrives, with no network of its own.

A Hub, a mirror or a proxy may be broken or hostile: commit ids are 40-hex, ref names are safe (others are
ignored), file paths inside a variant are plain relative paths, sizes are integers from 0 to 1 TiB, blob ids and
LFS sha256 are hex of the right length; ``build/<name>/`` folders whose name is not a variant are skipped, as the
loader skips them. What is read back from kernlock's disk cache of answers is checked again here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kernlock.errors import HubError, KernlockError, SpecError
from kernlock.lock.model import LockedFile
from kernlock.util import names
from kernlock.util.hfenv import read_private
from kernlock.variants.grammar import check_variant_name

__all__ = [
    "MAX_JSON",
    "MAX_LISTING",
    "MAX_PAGES",
    "MAX_READ",
    "Refs",
    "check_file_set",
    "checked_commit",
    "checked_path",
    "checked_repo",
    "file_from_cache",
    "is_variant",
    "show",
    "size_and_hash",
    "tree",
    "tree_from_cache",
]

T = TypeVar("T")
MAX_LISTING = 100_000  # entries of one paginated listing
MAX_PAGES = 1_000  # pages of one paginated listing
MAX_JSON = 32 * 1024 * 1024  # bytes of one JSON answer
MAX_READ = 1024 * 1024  # bytes of one read_file answer (metadata.json)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BLOB = re.compile(r"[0-9a-f]{40}")
_VERSION_BRANCH = re.compile(r"v\d+")

#: A variant's files as the build listing gives them and the answer cache keeps them: sorted [path, size, hash].
Listing = dict[str, list[list[Any]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Refs:
    """Branches and tags of a repo, each name -> commit."""

    branches: dict[str, str]
    tags: dict[str, str]

    def versions(self) -> dict[int, str]:
        """Version branches ``vN`` -> commit."""
        return {int(name[1:]): commit for name, commit in self.branches.items() if _VERSION_BRANCH.fullmatch(name)}


def _checked(check: Callable[[object], T], value: object, error: type[KernlockError]) -> T:
    try:
        return check(value)
    except ValueError as err:
        raise error(str(err)) from None


def checked_repo(repo: str) -> str:
    """``repo`` as ``org/name``; SpecError naming what is wrong."""
    return _checked(names.check_repo, repo, SpecError)


def checked_commit(commit: str) -> str:
    """``commit`` as 40 hex digits; HubError otherwise."""
    return _checked(names.check_commit, commit, HubError)


def checked_path(path: str) -> str:
    """``path`` as a plain relative path; HubError otherwise."""
    return _checked(names.check_path, path, HubError)


def is_variant(name: str) -> bool:
    """Whether ``build/<name>/`` is a variant folder the loader would consider (its grammar, a safe folder name)."""
    try:
        names.check_variant_folder(name)
        check_variant_name(name)
    except ValueError:
        return False
    return True


def size_and_hash(entry: dict[str, Any]) -> tuple[int, str]:
    """(size, ``sha256:`` or ``git-sha1:`` hash) of a tree entry; ValueError when either is malformed."""
    lfs = entry.get("lfs")
    if lfs is not None:
        if not isinstance(lfs, dict):
            raise ValueError(f"its lfs field {show(lfs)} is not an object")
        oid, size = lfs.get("oid"), lfs.get("size")
        if not isinstance(oid, str) or not _SHA256.fullmatch(oid):
            raise ValueError(f"LFS sha256 {show(oid)} is not 64 hex digits")
        return names.check_size(size), f"sha256:{oid}"
    oid = entry.get("oid")
    if not isinstance(oid, str) or not _BLOB.fullmatch(oid):
        raise ValueError(f"blob id {show(oid)} is not 40 hex digits")
    return names.check_size(entry.get("size")), f"git-sha1:{oid}"


def check_file_set(files: list[list[Any]]) -> None:
    """No path twice (also not in another letter case), no file where another file needs a folder (ValueError)."""
    keys = [f[0].casefold() if isinstance(f[0], str) else "" for f in files]
    if "" in keys or len(set(keys)) != len(keys):
        raise ValueError("lists a path twice")
    folders = {"/".join(key.split("/")[:i]) for key in keys for i in range(1, key.count("/") + 1)}
    clash = sorted(folders & set(keys))
    if clash:
        raise ValueError(f"lists {show(clash[0], 60)} both as a file and as a folder")


def tree(data: Listing) -> dict[str, tuple[LockedFile, ...]]:
    """Variant name -> its files (LockedFile checks each once more: ValueError/TypeError)."""
    return {name: tuple(LockedFile(path=p, size=s, hash=h) for p, s, h in files) for name, files in data.items()}


def tree_from_cache(path: Path) -> dict[str, tuple[LockedFile, ...]] | None:
    """The cached build tree, validated again like a Hub answer; None when absent or not valid (re-fetched)."""
    raw = read_private(path, MAX_JSON)  # absent, a symlink, too large or not the user's alone: asked again
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            return None
        for name, files in data.items():
            if not is_variant(name) or not isinstance(files, list) or not files:
                return None
            if not all(isinstance(f, list) and len(f) == 3 for f in files):
                return None
            check_file_set(files)
        return tree(data)
    except (OSError, ValueError, TypeError, RecursionError):  # unreadable or invalid: fetched anew
        return None


def file_from_cache(path: Path) -> bytes | None:
    """A cached file's bytes; None when absent, a symlink, larger than any answer read_file accepts or not the
    user's alone (:func:`kernlock.util.hfenv.read_private`): fetched anew."""
    return read_private(path, MAX_READ)


def show(value: object, limit: int = 80) -> str:
    """``repr`` of a value from an answer, short and on one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
