"""`kernlock run --record`, after CMD: gather what every process recorded, check it, and say what to add.

The processes of CMD wrote JSON lines (:mod:`kernlock.runtime.recording`) into a folder of this user's alone under
kernlock's cache. A record is input like any other (another program of CMD could write there): every field is
checked (repo id, revision, load path, a short printable detail, a boolean), files are read only when they are
plain files of the expected name and size, and a line that fails is counted and dropped. A record never names a
path kernlock writes to: what it can change is a requirement in pyproject.toml, through :mod:`kernlock.project.edit`.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernlock.errors import ActivationError
from kernlock.runtime.recording import PATHS
from kernlock.util import names

__all__ = ["MAX_FILE", "Build", "Gathered", "Request", "additions", "gather", "make_folder", "remove_folder"]

#: A record file larger than this is not read (a process writes one short line per distinct request).
MAX_FILE = 4 << 20
_MAX_FILES = 10_000
_FILE = re.compile(r"(?:[A-Za-z0-9._-]{1,64}-)?[0-9]{1,10}\.jsonl")  # <node>-<pid>.jsonl (<pid>.jsonl before)
_MAX_DETAIL = 200
_NODE = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One distinct Hub kernel request of CMD: repo, the revision asked, the load path, and whether it was locked;
    ``processes``: how many processes made it."""

    repo: str
    asked: str
    path: str
    detail: str
    locked: bool
    processes: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Build:
    """A locked build handed to the loader: repo, commit, variant; in how many processes, on which nodes."""

    repo: str
    commit: str
    variant: str
    processes: int = 1
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Gathered:
    """Every request recorded (sorted), the locked builds loaded, how many processes wrote records, and how many
    lines were dropped."""

    requests: tuple[Request, ...]
    processes: int
    dropped: int
    builds: tuple[Build, ...] = ()


def make_folder() -> Path:
    """A new, empty record folder of this user's alone under kernlock's cache."""
    from kernlock.util.hfenv import cache_root, private

    parent = cache_root() / "record"
    if not private(parent, create=True):
        raise ActivationError(
            f"cannot keep `kernlock run --record`'s records in {parent}",
            why="it cannot be created, or it is not this user's alone (a group or others can write it)",
            fix="point KERNLOCK_CACHE at a folder of your own",
        )
    folder = parent / f"{os.getpid()}-{secrets.token_hex(8)}"
    folder.mkdir(mode=0o700)
    return folder


def remove_folder(folder: Path) -> None:
    """Remove a folder :func:`make_folder` made (only such a folder: a name it would give, under the cache)."""
    from kernlock.util.hfenv import cache_root

    if folder.parent == cache_root() / "record" and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def gather(folder: Path) -> Gathered:
    """Every request and loaded build the processes recorded in ``folder``, checked; bad lines and files are
    dropped (counted)."""
    found: dict[tuple[str, str, str, str], tuple[bool, int]] = {}
    builds: dict[tuple[str, str, str], tuple[int, set[str]]] = {}
    processes = dropped = 0
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)[:_MAX_FILES]
    except OSError:
        entries = []
    for entry in entries:
        text = _read(entry)
        if text is None:
            dropped += 1
            continue
        processes += 1
        for line in text.splitlines():
            record = _parse(line)
            if isinstance(record, tuple):
                build, node = record
                count, nodes = builds.get(build, (0, set()))
                builds[build] = (count + 1, nodes | {node})
                continue
            if record is None:
                dropped += 1
                continue
            key = (record.repo, record.asked, record.path, record.detail)
            locked, count = found.get(key, (record.locked, 0))
            found[key] = (locked and record.locked, count + 1)
    requests = tuple(
        Request(repo=repo, asked=asked, path=path, detail=detail, locked=locked, processes=count)
        for (repo, asked, path, detail), (locked, count) in sorted(
            found.items(), key=lambda item: (item[0][0].casefold(), PATHS.index(item[0][2]), item[0][1], item[0][3])
        )
    )
    loaded = tuple(
        Build(repo=repo, commit=commit, variant=variant, processes=count, nodes=tuple(sorted(nodes)))
        for (repo, commit, variant), (count, nodes) in sorted(builds.items(), key=lambda item: item[0][0].casefold())
    )
    return Gathered(requests=requests, processes=processes, dropped=dropped, builds=loaded)


def _read(entry: os.DirEntry[str]) -> str | None:
    """A record file's text: a plain file (no symlink) of the expected name, at most MAX_FILE bytes, UTF-8."""
    if not _FILE.fullmatch(entry.name):
        return None
    try:
        if not entry.is_file(follow_symlinks=False):
            return None
        fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _parse(line: str) -> Request | tuple[tuple[str, str, str], str] | None:
    """A request line, or a loaded build's line as ((repo, commit, variant), node); None when it fails a check."""
    import json

    try:
        data = json.loads(line)
    except ValueError:
        return None
    if isinstance(data, dict) and set(data) == {"loaded", "commit", "variant", "node"}:
        return _parse_build(data)
    if not isinstance(data, dict) or set(data) != {"repo", "asked", "path", "detail", "locked"}:
        return None
    repo, asked, path, detail, locked = (data[k] for k in ("repo", "asked", "path", "detail", "locked"))
    try:
        names.check_repo(repo)
        names.check_ref(asked)
    except ValueError:
        return None
    if path not in PATHS or not isinstance(locked, bool) or not _printable(detail):
        return None
    return Request(repo=repo, asked=asked, path=path, detail=detail, locked=locked)


def _parse_build(data: dict[str, object]) -> tuple[tuple[str, str, str], str] | None:
    repo, commit, variant, node = (data[k] for k in ("loaded", "commit", "variant", "node"))
    try:
        names.check_repo(repo)
        names.check_commit(commit)
        names.check_variant_folder(variant)
    except (ValueError, TypeError):
        return None
    if not isinstance(node, str) or not _NODE.fullmatch(node):
        return None
    return (str(repo), str(commit), str(variant)), node


def _printable(text: object) -> bool:
    return isinstance(text, str) and len(text) <= _MAX_DETAIL and text.isprintable()


def additions(requests: tuple[Request, ...], required: set[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """What to add to [tool.kernlock.kernels]: each unlocked repo that pyproject does not require yet (``required``,
    compared without letter case) -> the revision it was asked for; repos asked for with several revisions are
    returned apart (repo -> the revisions), for the user to choose."""
    known = {repo.casefold() for repo in required}
    asked: dict[str, list[str]] = {}
    for request in requests:
        if request.locked or request.repo.casefold() in known:
            continue
        revisions = asked.setdefault(request.repo, [])
        if request.asked not in revisions:
            revisions.append(request.asked)
    adds = {repo: revisions[0] for repo, revisions in asked.items() if len(revisions) == 1}
    conflicts = {repo: sorted(revisions) for repo, revisions in asked.items() if len(revisions) > 1}
    return adds, conflicts
