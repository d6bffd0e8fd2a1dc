"""Reading the served repositories through the git CLI: ``ROOT/{kernels,models}/{org}/{name}`` (:class:`Store`),
one repository's refs (read fresh), commits, trees and blobs (:class:`GitRepo`; everything keyed by a commit or
blob id is cached), and the LFS pointers among its files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar

from kernlock.hub.wire import LFS_HEADER as _LFS_HEADER
from kernlock.hub.wire import Entry as _Entry
from kernlock.hub.wire import Lfs as _Lfs

__all__ = ["LRU", "REPO_TYPES", "Commit", "GitError", "GitRepo", "Refs", "Snapshot", "Store", "git_env"]

_K = TypeVar("_K")
_T = TypeVar("_T")
#: Inode, mtime and size of every ref file of a repository (see ``GitRepo._refs_stamp``).
_RefsStamp = tuple[tuple[str, int, int, int], ...]
_HEX40 = re.compile(r"[0-9a-f]{40}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LFS_POINTER_MAX = 1024
_BLOB_CACHE_MAX = 64 * 1024
REPO_TYPES = ("kernels", "models")


class GitError(RuntimeError):
    """A git command failed."""


def git_env() -> dict[str, str]:
    """This process's environment for git: no ``GIT_*`` variable, no system or user configuration, no prompt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    return env


class LRU(Generic[_K, _T]):
    """A small thread-safe LRU mapping for immutable, commit- or blob-keyed answers."""

    def __init__(self, maxsize: int) -> None:
        self._data: OrderedDict[_K, _T] = OrderedDict()
        self._maxsize = maxsize
        self._lock = threading.Lock()

    def get(self, key: _K, compute: Callable[[], _T]) -> _T:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        self.put(key, value)
        return value

    def peek(self, key: _K) -> _T | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: _K, value: _T) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._maxsize:
                self._data.popitem(last=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    sha: str
    entries: tuple[_Entry, ...]
    by_path: dict[str, _Entry]

    def listing(self, path: str, recursive: bool) -> list[_Entry]:
        prefix = f"{path}/" if path else ""
        found = [e for e in self.entries if e.path.startswith(prefix)]
        return found if recursive else [e for e in found if "/" not in e.path[len(prefix) :]]

    def files(self) -> list[_Entry]:
        return [e for e in self.entries if e.kind == "file"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    sha: str
    author: str
    email: str
    timestamp: int
    title: str
    body: str

    @property
    def date(self) -> str:
        return datetime.fromtimestamp(self.timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.sha,
            "title": self.title,
            "message": self.body,
            "authors": [{"user": self.author or self.email}],
            "date": self.date,
        }

    def last_commit(self) -> dict[str, Any]:
        return {"id": self.sha, "title": self.title, "date": self.date}


@dataclass(frozen=True, slots=True, kw_only=True)
class Refs:
    refs: dict[str, str]  # full ref name -> peeled commit sha
    default_branch: str

    def group(self, kind: str) -> dict[str, str]:
        prefix = f"refs/{kind}/"
        return {k[len(prefix) :]: v for k, v in sorted(self.refs.items()) if k.startswith(prefix)}

    def lookup(self, rev: str) -> str | None:
        if rev.startswith("refs/"):
            return self.refs.get(rev)
        return self.refs.get(f"refs/heads/{rev}") or self.refs.get(f"refs/tags/{rev}")


_COMMIT_FORMAT = "--format=%H%x00%an%x00%ae%x00%ct%x00%B%x1e"
_REF_FORMAT = "--format=%(refname)%00%(objectname)%00%(objecttype)%00%(*objectname)%00%(*objecttype)"


def _parse_commits(out: bytes) -> list[Commit]:
    commits = []
    for record in out.split(b"\x1e"):
        record = record.lstrip(b"\n")
        if not record:
            continue
        sha, author, email, ts, message = record.decode("utf-8", "replace").split("\0", 4)
        title, _, body = message.strip().partition("\n")
        commits.append(
            Commit(sha=sha, author=author, email=email, timestamp=int(ts), title=title.strip(), body=body.strip())
        )
    return commits


def _parse_pointer(data: bytes) -> tuple[str, int] | None:
    if len(data) > _LFS_POINTER_MAX or not data.startswith(_LFS_HEADER):
        return None
    fields = dict(line.split(" ", 1) for line in data.decode("ascii", "replace").splitlines() if " " in line)
    oid, size = fields.get("oid", ""), fields.get("size", "")
    if not (oid.startswith("sha256:") and re.fullmatch(r"[0-9a-f]{64}", oid[7:]) and size.isdigit()):
        return None
    return oid[7:], int(size)


class Store:
    """Access to ``ROOT/{kernels,models}/{org}/{name}`` repositories with shared caches."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = git_env()
        self.snapshots: LRU[tuple[str, ...], Snapshot] = LRU(1024)
        self.commits: LRU[tuple[str, ...], Commit] = LRU(4096)
        self.histories: LRU[tuple[str, ...], list[Commit]] = LRU(256)
        self.last_commits: LRU[tuple[str, ...], Commit] = LRU(16384)
        self.blobs: LRU[str, bytes] = LRU(8192)
        self.known_commits: LRU[tuple[str, ...], bool] = LRU(65536)
        self.refs: LRU[tuple[str, ...], tuple[_RefsStamp, Refs]] = LRU(4096)

    def repo(self, repo_type: str, org: str, name: str) -> GitRepo | None:
        if repo_type not in REPO_TYPES or not (_NAME.fullmatch(org) and _NAME.fullmatch(name)):
            return None
        path = self.root / repo_type / org / name
        return GitRepo(self, path, f"{org}/{name}") if (path / ".git").exists() else None

    def organizations(self) -> dict[str, Any]:
        path = self.root / "organizations.json"
        if not path.is_file():
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object")
        return data

    def repo_count(self, repo_type: str, org: str) -> int:
        return len(self.repo_names(repo_type, org))

    def repo_names(self, repo_type: str, org: str) -> list[str]:
        folder = self.root / repo_type / org
        if repo_type not in REPO_TYPES or not _NAME.fullmatch(org) or not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if _NAME.fullmatch(p.name) and (p / ".git").exists())


class GitRepo:
    """One repository; refs are read fresh, everything keyed by a commit or blob id is cached."""

    def __init__(self, store: Store, path: Path, repo_id: str) -> None:
        self.store = store
        self.path = path
        self.repo_id = repo_id

    def git(self, *args: str, data: bytes | None = None, check: bool = True) -> bytes:
        cmd = ["git", "-c", "safe.directory=*", "-C", str(self.path), *args]
        proc = subprocess.run(cmd, input=data, capture_output=True, env=self.store.env, check=False)
        if check and proc.returncode != 0:
            raise GitError(f"{' '.join(cmd)}: {proc.stderr.decode('utf-8', 'replace').strip()}")
        return proc.stdout if proc.returncode == 0 else b""

    def _key(self, *parts: str) -> tuple[str, ...]:
        return (str(self.path), *parts)

    def refs(self) -> Refs:
        """All refs, read fresh: the git answer is reused only while no ref file changed (stat check)."""
        stamp = self._refs_stamp()
        cached = self.store.refs.peek(self._key())
        if stamp is not None and cached is not None and cached[0] == stamp:
            return cached[1]
        refs = self._read_refs()
        if stamp is not None:
            self.store.refs.put(self._key(), (stamp, refs))
        return refs

    def _refs_stamp(self) -> _RefsStamp | None:
        """Inode, mtime and size of every ref file (git replaces a ref file on each update); None: unknown."""
        git_dir = self.path / ".git"
        if not git_dir.is_dir() or (git_dir / "reftable").exists():
            return None
        files = [str(git_dir / "HEAD"), str(git_dir / "packed-refs")]
        for folder, _, names in os.walk(git_dir / "refs"):
            files += [os.path.join(folder, name) for name in names]
        stamp = []
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name)
                stamp.append((name, st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(sorted(stamp))

    def _read_refs(self) -> Refs:
        refs: dict[str, str] = {}
        for line in self.git("for-each-ref", _REF_FORMAT).decode().splitlines():
            name, oid, kind, peeled, peeled_kind = line.split("\0")
            sha = oid if kind == "commit" else peeled if peeled_kind == "commit" else self._peel(name)
            if sha:
                refs[name] = sha
        default = "main"
        if "refs/heads/main" not in refs:
            head = self.git("symbolic-ref", "-q", "HEAD", check=False).decode().strip()
            default = head.removeprefix("refs/heads/") or "main"
        return Refs(refs=refs, default_branch=default)

    def _peel(self, ref: str) -> str:
        return self.git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False).decode().strip()

    def has_commit(self, sha: str) -> bool:
        if self.store.known_commits.peek(self._key(sha)):
            return True
        found = self.git("cat-file", "-t", sha, check=False).strip() == b"commit"
        if found:
            self.store.known_commits.put(self._key(sha), True)
        return found

    def resolve(self, rev: str) -> str | None:
        """A branch, tag, ``refs/...`` name or full commit sha -> commit sha (None if unknown)."""
        if _HEX40.fullmatch(rev):
            return rev if self.has_commit(rev) else None
        return self.refs().lookup(rev)

    def commit(self, sha: str) -> Commit:
        def compute() -> Commit:
            return _parse_commits(self.git("log", "-1", _COMMIT_FORMAT, sha))[0]

        return self.store.commits.get(self._key(sha), compute)

    def history(self, sha: str) -> list[Commit]:
        def compute() -> list[Commit]:
            return _parse_commits(self.git("log", _COMMIT_FORMAT, sha))

        return self.store.histories.get(self._key(sha), compute)

    def last_commit(self, sha: str, path: str) -> Commit:
        def compute() -> Commit:
            found = _parse_commits(self.git("log", "-1", _COMMIT_FORMAT, sha, "--", path))
            return found[0] if found else self.commit(sha)

        return self.store.last_commits.get(self._key(sha, path), compute)

    def snapshot(self, sha: str) -> Snapshot:
        return self.store.snapshots.get(self._key(sha), lambda: self._read_snapshot(sha))

    def _read_snapshot(self, sha: str) -> Snapshot:
        rows = []
        for record in self.git("ls-tree", "-r", "-t", "-l", "-z", "--full-tree", sha).split(b"\0"):
            if record:
                meta, _, path = record.partition(b"\t")
                _, kind, oid, size = meta.decode().split()
                rows.append((path.decode("utf-8", "surrogateescape"), kind, oid, size))
        small = [oid for _, kind, oid, size in rows if kind == "blob" and int(size) <= _LFS_POINTER_MAX]
        blobs = self.read_blobs(small)
        entries = [self._entry(p, kind, oid, size, blobs) for p, kind, oid, size in rows if kind != "commit"]
        return Snapshot(sha=sha, entries=tuple(entries), by_path={e.path: e for e in entries})

    @staticmethod
    def _entry(path: str, kind: str, oid: str, size: str, blobs: dict[str, bytes]) -> _Entry:
        if kind == "tree":
            return _Entry(path=path, kind="directory", oid=oid, size=0)
        pointer = _parse_pointer(blobs[oid]) if oid in blobs else None
        if pointer is None:
            return _Entry(path=path, kind="file", oid=oid, size=int(size))
        return _Entry(
            path=path,
            kind="file",
            oid=oid,
            size=pointer[1],
            lfs=_Lfs(oid=pointer[0], size=pointer[1], pointer_size=int(size)),
        )

    def read_blobs(self, oids: Iterable[str]) -> dict[str, bytes]:
        """Contents of many blobs through one ``git cat-file --batch`` (cached by blob id)."""
        found: dict[str, bytes] = {}
        missing = []
        for oid in dict.fromkeys(oids):
            cached = self.store.blobs.peek(oid)
            if cached is None:
                missing.append(oid)
            else:
                found[oid] = cached
        if missing:
            out = self.git("cat-file", "--batch", data="".join(f"{oid}\n" for oid in missing).encode())
            pos = 0
            for oid in missing:
                header_end = out.index(b"\n", pos)
                size = int(out[pos:header_end].split()[2])
                found[oid] = out[header_end + 1 : header_end + 1 + size]
                pos = header_end + 1 + size + 1
                if size <= _BLOB_CACHE_MAX:
                    self.store.blobs.put(oid, found[oid])
        return found

    def blob(self, oid: str) -> bytes:
        return self.read_blobs([oid])[oid]

    def lfs_path(self, oid: str) -> Path:
        return self.path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
