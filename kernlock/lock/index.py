"""This environment's part of kernels.lock, derived once: what run-time activation reads instead of the lock.

A program that loads kernels needs, of the whole lock, only the entries of the machine it runs on. The first
activation after the lock changed checks the whole lock's ``content-hash`` and parses and validates only this
environment's part of it (:func:`kernlock.lock.file.loads_environment`; a lock not laid out as kernlock writes it is
read whole, :func:`kernlock.lock.file.read`) and writes
``{kernlock cache}/lock-index/<key>.json``: the lock's environments and repos, and this environment's entries
(each cut down to this environment's variant). Every later activation checks that index against the lock's
``stat`` (size, mtime, inode, ctime: any write changes one) and the ``content-hash`` line at its top, and builds
only those entries (:func:`kernlock.lock.validate.entry_from_index`: every part a path is built from and each entry's
shape checked again; the variant grammar and the loader's rule were checked when the lock was read, and a load does
not import them): the cost is flat in the size of the lock. ``kernlock sync``
writes the index of each environment it synced (:func:`prime`), so that the first process after it parses no lock
either.

A missing, stale or unreadable index is rebuilt from the lock; a lock that cannot be read is an error either way.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernlock.lock.model import Lock, LockedKernel
from kernlock.lock.schema import INDEX_VERSION
from kernlock.lock.validate import entry_from_index
from kernlock.util.digest import sha256_hex
from kernlock.util.hfenv import cache_root, private, read_private

__all__ = ["LockView", "prime", "read"]

_HEAD = 4096  # the content-hash line is among the first lines
_MAX = 256 * 1024 * 1024  # an index holds one environment's part of a lock (kernlock reads locks of any size)


class LockView:
    """What activation reads of a lock: its environments and repos, and the entries of one environment."""

    __slots__ = ("_entries", "environment", "environments", "repos")

    def __init__(
        self, environment: str, environments: tuple[str, ...], repos: list[str], entries: list[LockedKernel]
    ) -> None:
        self.environment = environment
        self.environments = environments
        self.repos = repos
        self._entries = {entry.repo: entry for entry in entries}

    def entry_for(self, repo: str, env: str) -> LockedKernel | None:
        """The entry that serves ``repo`` on ``env`` (only this view's environment has entries)."""
        return self._entries.get(repo) if env == self.environment else None


def read(path: str, environment: str) -> LockView:
    """The lock at ``path`` as ``environment`` sees it: from the index when it matches the lock, else from the
    lock itself (then indexed for the next process). Raises LockError for a lock that cannot be read."""
    key, recorded = _identity(path)
    index = _index_path(path, environment)
    data = _current(index, path, environment, key, recorded)
    if data is not None:
        try:
            entries = [entry_from_index(table) for table in data["kernel"]]
            return LockView(environment, tuple(data["environments"]), list(data["repos"]), entries)
        except (ValueError, KeyError, TypeError):
            pass  # an index this kernlock does not read: derive it again
    from kernlock.lock import file as lockfile  # only when the index does not answer

    text = lockfile.read_text(Path(path))
    part = lockfile.loads_environment(text, path, environment) if recorded is not None else None
    if part is not None:  # only this environment's part of the TOML parsed (the whole text's content-hash checked)
        lock, repos = part
        view = LockView(environment, lock.environments, repos, list(lock.kernels))
    else:  # not as kernlock writes it: the whole lock, strictly (its errors name what is wrong)
        view = _view(lockfile.loads(text, path, canonical=False), environment)
    if recorded is not None and not lockfile.warned():  # a newer kernlock's lock is read (and said) each time
        _save(index, path, environment, key, recorded, view)
    return view


def prime(path: Path, lock: Lock, environments: Iterable[str]) -> None:
    """Index ``environments`` of ``lock``, just read from (or written to) ``path``, where no current index is: the
    first process after ``kernlock sync`` then parses no lock (every process that starts before an index exists
    parses all of it: each rank of a job). Nothing is written unless ``path`` holds exactly ``lock``."""
    where = str(path)
    key, recorded = _identity(where)
    if recorded is None:
        return
    missing = [env for env in environments if _current(_index_path(where, env), where, env, key, recorded) is None]
    from kernlock.lock import file as lockfile

    if missing and lockfile.content_hash(lockfile.dumps(lock)) == recorded:
        for env in missing:
            _save(_index_path(where, env), where, env, key, recorded, _view(lock, env))


def _identity(path: str) -> tuple[list[int], str | None]:
    """The lock's ``stat`` (size, mtime, inode, ctime: any write changes one) and the content-hash at its top."""
    try:
        stat = os.stat(path)
    except OSError:
        return [], None  # the read names the problem
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns], _content_hash(path)


def _view(lock: Lock, environment: str) -> LockView:
    """``environment``'s part of ``lock``: each entry cut down to the variant it loads there."""
    entries = []
    for kernel in lock.kernels:
        variant = kernel.variant_for(environment)
        if variant is not None:
            mine = replace(variant, environments=(environment,))
            entries.append(replace(kernel, environments=(environment,), variants=(mine,)))
    return LockView(environment, lock.environments, lock.repos, entries)


def _index_path(path: str, environment: str) -> str:
    digest = sha256_hex(f"{os.path.abspath(path)}\0{environment}".encode())[:32]
    return os.path.join(cache_root(), "lock-index", f"{digest}.json")


def _content_hash(path: str) -> str | None:
    """The ``content-hash`` a lock records at its top (None: not there, e.g. an older lock-version)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.split("\n"):
        if line.startswith('content-hash = "') and line.endswith('"'):
            return line[len('content-hash = "') : -1]
    return None


def _current(index: str, path: str, environment: str, key: list[int], recorded: str | None) -> dict[str, Any] | None:
    """The index's data, when it was made from exactly this lock for this environment (in a folder only this user
    can write); None otherwise."""
    if recorded is None or not private(os.path.dirname(index)):
        return None
    raw = read_private(index, _MAX)  # an index others could have written is none
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        matches = (
            data["index-version"] == INDEX_VERSION
            and data["lock"] == os.path.abspath(path)
            and data["stat"] == key
            and data["content-hash"] == recorded
            and data["environment"] == environment
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no index yet, or one this kernlock does not read
    return data if matches else None


def _save(index: str, path: str, environment: str, key: list[int], recorded: str, view: LockView) -> None:
    """Write the index atomically; a cache that cannot be written only costs the next process a full read."""
    from kernlock.lock import file as lockfile
    from kernlock.util.atomic import write_text_atomic

    data = {
        "index-version": INDEX_VERSION,
        "lock": os.path.abspath(path),
        "stat": key,
        "content-hash": recorded,
        "environment": environment,
        "environments": list(view.environments),
        "repos": list(view.repos),
        "kernel": [lockfile.entry_table(entry) for entry in view._entries.values()],
    }
    if not private(os.path.dirname(index), create=True):
        return  # a folder others can write: an index there could be forged, so none is kept
    with contextlib.suppress(OSError):
        write_text_atomic(Path(index), json.dumps(data, separators=(",", ":")), private=True)
