"""A Hugging Face Hub-compatible HTTP server over a folder of real git repositories.

The real, unmodified ``huggingface_hub`` and ``kernels`` clients work against it through
``HF_ENDPOINT=http://127.0.0.1:PORT``. Only committed data is served; git is read through the git CLI
on every request (commit-keyed answers are cached). See ``docs/testing-hub.md``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

from kernlock.hub.wire import COMMITS_PAGE as _COMMITS_PAGE
from kernlock.hub.wire import LFS_HEADER as _LFS_HEADER
from kernlock.hub.wire import Abort as _Abort
from kernlock.hub.wire import Call as _Call
from kernlock.hub.wire import Entry as _Entry
from kernlock.hub.wire import Lfs as _Lfs
from kernlock.hub.wire import Response as _Response
from kernlock.hub.wire import error as _error
from kernlock.hub.wire import flag as _flag
from kernlock.hub.wire import join as _join
from kernlock.hub.wire import json_response as _json
from kernlock.hub.wire import numbered_page as _numbered_page
from kernlock.hub.wire import page as _page
from kernlock.hub.wire import ranged as _ranged
from kernlock.hub.wire import split_revision as _split_revision
from kernlock.hub.wire import status_line as _status_line
from kernlock.testing import uploads
from kernlock.testing.concurrency import Concurrency, gated

__all__ = [
    "ConnectionDropped",
    "Faults",
    "GitError",
    "HubApp",
    "HubServer",
    "Request",
    "RequestLog",
    "Transform",
    "make_app",
]

_K = TypeVar("_K")
_T = TypeVar("_T")
#: Inode, mtime and size of every ref file of a repository (see ``_GitRepo._refs_stamp``).
_RefsStamp = tuple[tuple[str, int, int, int], ...]
_HEX40 = re.compile(r"[0-9a-f]{40}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LFS_POINTER_MAX = 1024
_BLOB_CACHE_MAX = 64 * 1024
_EXPAND_PAGE_MAX = 50
_REPO_TYPES = ("kernels", "models")


# ----------------------------------------------------------------------------------------- request log


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One answered (or faulted) request; ``status`` is 0 when the connection was dropped."""

    method: str
    path: str
    status: int
    started: float


class RequestLog:
    """Thread-safe record of every request the app answered, in arrival order of their answers."""

    def __init__(self) -> None:
        self._entries: list[Request] = []
        self._lock = threading.Lock()

    def add(self, entry: Request) -> None:
        """Append one entry."""
        with self._lock:
            self._entries.append(entry)

    @property
    def entries(self) -> list[Request]:
        """A copy of all entries."""
        return self.snapshot()

    def snapshot(self) -> list[Request]:
        """A copy of all entries."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        """Forget all entries."""
        with self._lock:
            self._entries.clear()

    def count(self, method: str | None = None, contains: str | None = None) -> int:
        """Entries with this method (any if None) whose raw path contains ``contains`` (any if None)."""
        return sum(
            1
            for entry in self.snapshot()
            if (method is None or entry.method == method.upper()) and (contains is None or contains in entry.path)
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


# ------------------------------------------------------------------------------------- fault injection


class ConnectionDropped(Exception):
    """Raised by the app to ask the HTTP server to close the connection without answering."""


Headers = list[tuple[str, str]]
#: ``transform(status, headers, body) -> (status, headers, body)`` of :meth:`Faults.rewrite`.
Transform = Callable[[int, Headers, bytes], tuple[int, Headers, bytes]]


@dataclass(slots=True, kw_only=True)
class _Rule:
    kind: str
    times: int | None
    pattern: re.Pattern[str] | None
    code: int = 0
    retry_after: float | None = None
    seconds: float = 0.0
    transform: Transform | None = None

    def matches(self, path: str) -> bool:
        return self.pattern is None or self.pattern.search(path) is not None


class Faults:
    """Thread-safe fault injection. ``match`` is a regex searched in the raw path (with query);
    ``times=None`` means every matching request until :meth:`clear`."""

    def __init__(self) -> None:
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()

    def _add(self, rule: _Rule) -> None:
        if rule.times is not None and rule.times < 1:
            raise ValueError(f"times must be >= 1 or None, not {rule.times}")
        if rule.seconds < 0:
            raise ValueError(f"latency must be >= 0, not {rule.seconds}")
        with self._lock:
            self._rules.append(rule)

    @staticmethod
    def _compile(match: str | None) -> re.Pattern[str] | None:
        return re.compile(match) if match is not None else None

    def latency(self, seconds: float, match: str | None = None) -> None:
        """Add ``seconds`` of delay to every matching request (rules add up)."""
        self._add(_Rule(kind="latency", times=None, pattern=self._compile(match), seconds=seconds))

    def status(
        self, code: int, times: int | None = 1, match: str | None = None, retry_after: float | None = None
    ) -> None:
        """Answer ``code`` (e.g. 429, 500, 503) instead of the real answer; ``Retry-After`` when given."""
        self._add(_Rule(kind="status", times=times, pattern=self._compile(match), code=code, retry_after=retry_after))

    def drop(self, times: int | None = 1, match: str | None = None) -> None:
        """Close the connection without answering."""
        self._add(_Rule(kind="drop", times=times, pattern=self._compile(match)))

    def truncate(self, times: int | None = 1, match: str | None = None) -> None:
        """Send the real headers (full Content-Length), then half the body, then close."""
        self._add(_Rule(kind="truncate", times=times, pattern=self._compile(match)))

    def rewrite(self, transform: Transform, match: str | None = None, times: int | None = None) -> None:
        """Rewrite the real answer before it is sent: ``transform(status, headers, body)`` gets the status, the
        headers (without Content-Length) and the whole body (JSON bytes or file bytes; a HEAD gets the GET's body
        to rewrite, and sends only the headers) and returns ``(status, headers, body)``.

        Content-Length is set to the new body's length, unless the returned headers carry one of their own: then
        it is sent as given, so a test can announce one length and send another (the connection is closed after
        such an answer). ``times=None`` (the default here) rewrites every matching request until :meth:`clear`.
        """
        if not callable(transform):
            raise TypeError(f"transform must be callable, not {transform!r}")
        self._add(_Rule(kind="rewrite", times=times, pattern=self._compile(match), transform=transform))

    def clear(self) -> None:
        """Remove all rules."""
        with self._lock:
            self._rules.clear()

    def delay_for(self, path: str) -> float:
        """Total latency of the rules matching ``path``."""
        with self._lock:
            return sum(r.seconds for r in self._rules if r.kind == "latency" and r.matches(path))

    def take(self, path: str) -> _Rule | None:
        """The first status/drop/truncate/rewrite rule matching ``path``, consuming one of its ``times``."""
        with self._lock:
            for rule in self._rules:
                if rule.kind == "latency" or not rule.matches(path):
                    continue
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self._rules.remove(rule)
                return rule
        return None


# ----------------------------------------------------------------------------------------- git reading


class GitError(RuntimeError):
    """A git command failed."""


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    return env


class _LRU(Generic[_K, _T]):
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
class _Snapshot:
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
class _Commit:
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
class _Refs:
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


def _parse_commits(out: bytes) -> list[_Commit]:
    commits = []
    for record in out.split(b"\x1e"):
        record = record.lstrip(b"\n")
        if not record:
            continue
        sha, author, email, ts, message = record.decode("utf-8", "replace").split("\0", 4)
        title, _, body = message.strip().partition("\n")
        commits.append(
            _Commit(sha=sha, author=author, email=email, timestamp=int(ts), title=title.strip(), body=body.strip())
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


class _Store:
    """Access to ``ROOT/{kernels,models}/{org}/{name}`` repositories with shared caches."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = _git_env()
        self.snapshots: _LRU[tuple[str, ...], _Snapshot] = _LRU(1024)
        self.commits: _LRU[tuple[str, ...], _Commit] = _LRU(4096)
        self.histories: _LRU[tuple[str, ...], list[_Commit]] = _LRU(256)
        self.last_commits: _LRU[tuple[str, ...], _Commit] = _LRU(16384)
        self.blobs: _LRU[str, bytes] = _LRU(8192)
        self.known_commits: _LRU[tuple[str, ...], bool] = _LRU(65536)
        self.refs: _LRU[tuple[str, ...], tuple[_RefsStamp, _Refs]] = _LRU(4096)

    def repo(self, repo_type: str, org: str, name: str) -> _GitRepo | None:
        if repo_type not in _REPO_TYPES or not (_NAME.fullmatch(org) and _NAME.fullmatch(name)):
            return None
        path = self.root / repo_type / org / name
        return _GitRepo(self, path, f"{org}/{name}") if (path / ".git").exists() else None

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
        if repo_type not in _REPO_TYPES or not _NAME.fullmatch(org) or not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if _NAME.fullmatch(p.name) and (p / ".git").exists())


class _GitRepo:
    """One repository; refs are read fresh, everything keyed by a commit or blob id is cached."""

    def __init__(self, store: _Store, path: Path, repo_id: str) -> None:
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

    def refs(self) -> _Refs:
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

    def _read_refs(self) -> _Refs:
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
        return _Refs(refs=refs, default_branch=default)

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

    def commit(self, sha: str) -> _Commit:
        def compute() -> _Commit:
            return _parse_commits(self.git("log", "-1", _COMMIT_FORMAT, sha))[0]

        return self.store.commits.get(self._key(sha), compute)

    def history(self, sha: str) -> list[_Commit]:
        def compute() -> list[_Commit]:
            return _parse_commits(self.git("log", _COMMIT_FORMAT, sha))

        return self.store.histories.get(self._key(sha), compute)

    def last_commit(self, sha: str, path: str) -> _Commit:
        def compute() -> _Commit:
            found = _parse_commits(self.git("log", "-1", _COMMIT_FORMAT, sha, "--", path))
            return found[0] if found else self.commit(sha)

        return self.store.last_commits.get(self._key(sha, path), compute)

    def snapshot(self, sha: str) -> _Snapshot:
        return self.store.snapshots.get(self._key(sha), lambda: self._read_snapshot(sha))

    def _read_snapshot(self, sha: str) -> _Snapshot:
        rows = []
        for record in self.git("ls-tree", "-r", "-t", "-l", "-z", "--full-tree", sha).split(b"\0"):
            if record:
                meta, _, path = record.partition(b"\t")
                _, kind, oid, size = meta.decode().split()
                rows.append((path.decode("utf-8", "surrogateescape"), kind, oid, size))
        small = [oid for _, kind, oid, size in rows if kind == "blob" and int(size) <= _LFS_POINTER_MAX]
        blobs = self.read_blobs(small)
        entries = [self._entry(p, kind, oid, size, blobs) for p, kind, oid, size in rows if kind != "commit"]
        return _Snapshot(sha=sha, entries=tuple(entries), by_path={e.path: e for e in entries})

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


# --------------------------------------------------------------------------------------------- the app


class HubApp:
    """The WSGI application: routing, git answers, fault injection and request logging."""

    def __init__(self, root: Path, log: RequestLog, faults: Faults, page_size: int) -> None:
        self.store = _Store(Path(root))
        self.log = log
        self.faults = faults
        self.page_size = max(1, page_size)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        call = _Call.from_environ(environ)
        started = time.time()
        delay = self.faults.delay_for(call.full_path)
        if delay > 0:
            time.sleep(delay)
        rule = self.faults.take(call.full_path)
        if rule is not None and rule.kind == "drop":
            self.log.add(Request(method=call.method, path=call.full_path, status=0, started=started))
            raise ConnectionDropped(call.full_path)
        response = self._fault_response(rule) if rule and rule.kind == "status" else self.answer(call)
        if rule is not None and rule.kind == "rewrite":
            response = self._rewritten(rule, response)
        self.log.add(Request(method=call.method, path=call.full_path, status=response.status, started=started))
        headers = list(response.headers)
        if not any(k.lower() == "content-length" for k, _ in headers):
            headers.append(("Content-Length", str(response.content_length)))
        start_response(_status_line(response.status), headers)
        if call.method == "HEAD":
            return []
        return response.truncated() if rule is not None and rule.kind == "truncate" else response.chunks()

    @staticmethod
    def _rewritten(rule: _Rule, response: _Response) -> _Response:
        """The answer as ``rule.transform`` rewrites it; a Content-Length of its own that does not match the body
        closes the connection after the answer."""
        assert rule.transform is not None
        status, headers, body = rule.transform(response.status, list(response.headers), b"".join(response.chunks()))
        if not isinstance(status, int) or not isinstance(body, (bytes, bytearray)):
            raise TypeError("a rewrite transform must return (int status, [(name, value)] headers, bytes body)")
        headers = [(str(k), str(v)) for k, v in headers]
        declared = [v for k, v in headers if k.lower() == "content-length"]
        if declared and declared[0].strip() != str(len(body)):
            headers = [(k, v) for k, v in headers if k.lower() != "connection"] + [("Connection", "close")]
        return _Response(status=status, headers=headers, body=bytes(body))

    @staticmethod
    def _fault_response(rule: _Rule) -> _Response:
        headers = [] if rule.retry_after is None else [("Retry-After", str(math.ceil(rule.retry_after)))]
        return _error(rule.code, f"Injected fault: HTTP {rule.code}", headers=headers)

    def answer(self, call: _Call) -> _Response:
        """The real answer to one request."""
        try:
            return self._route(call)
        except _Abort as abort:
            return abort.response
        except (GitError, OSError, ValueError) as err:
            return _error(500, f"{type(err).__name__}: {err}")

    def _route(self, call: _Call) -> _Response:
        segs = call.segments
        if segs[:1] == ["api"]:
            return self._api(call, segs[1:])
        if len(segs) >= 6 and segs[0] == "kernels" and segs[3] == "resolve":
            return self._resolve(call, self._repo("kernels", segs[1], segs[2]), segs[4:])
        if len(segs) >= 5 and segs[2] == "resolve":
            return self._resolve(call, self._repo("models", segs[0], segs[1]), segs[3:])
        return _error(404, f"Not found: {call.raw_path}")

    def _api(self, call: _Call, segs: list[str]) -> _Response:
        if segs == ["agent-harnesses"]:
            self._require(call, "GET")
            return _json({"standardEnvVars": [], "harnesses": {}})
        if len(segs) == 3 and segs[0] == "organizations" and segs[2] == "overview":
            self._require(call, "GET")
            return self._overview(unquote(segs[1]))
        if segs == ["repos", "create"]:  # uploads: kernlock.testing.uploads
            return uploads.create_repo(call, self.store.root, self.store.env)
        if segs == ["validate-yaml"]:
            return uploads.validate_yaml(call)
        if len(segs) >= 3 and segs[0] in _REPO_TYPES:
            return self._repo_api(call, self._repo(segs[0], segs[1], segs[2]), segs[3:])
        if len(segs) == 1 and segs[0] in _REPO_TYPES:
            self._require(call, "GET")
            return self._listing(call, segs[0])
        return _error(404, f"Not found: {call.raw_path}")

    def _listing(self, call: _Call, repo_type: str) -> _Response:
        """``GET /api/{kernels,models}?author=ORG``: the repositories of one publisher, as ``[{id, author}]``,
        sorted by id and paginated like other listings (the whole Hub when no author is given)."""
        author = call.param("author")
        orgs = [author] if author else sorted(p.name for p in (self.store.root / repo_type).glob("*") if p.is_dir())
        ids = [f"{org}/{name}" for org in orgs for name in self.store.repo_names(repo_type, org)]
        items, headers = self._page(call, [{"id": i, "author": i.split("/")[0]} for i in ids], self.page_size)
        return _json(items, headers=headers)

    @staticmethod
    def _require(call: _Call, *methods: str) -> None:
        call.require(*methods)

    def _repo(self, repo_type: str, org: str, name: str) -> _GitRepo:
        repo = self.store.repo(repo_type, unquote(org), unquote(name))
        if repo is None:
            message = f"Repository not found: {repo_type[:-1]} {unquote(org)}/{unquote(name)}"
            raise _Abort(_error(404, message, "RepoNotFound"))
        return repo

    def _repo_api(self, call: _Call, repo: _GitRepo, rest: list[str]) -> _Response:
        if not rest or (rest[0] == "revision" and len(rest) > 1):
            self._require(call, "GET")
            return self._info(call, repo, _join(rest[1:]) if rest else None)
        if rest == ["refs"]:
            self._require(call, "GET")
            return self._refs(call, repo)
        if rest[0] == "tree" and len(rest) > 1:
            self._require(call, "GET")
            rev, path = _split_revision(rest[1:])
            return self._tree(call, repo, rev, _join(path))
        if rest[0] == "commits" and len(rest) > 1:
            self._require(call, "GET")
            return self._commits(call, repo, _join(rest[1:]))
        if rest[0] == "paths-info" and len(rest) > 1:
            self._require(call, "POST")
            return self._paths_info(call, repo, _join(rest[1:]))
        if rest[0] in ("preupload", "commit") and len(rest) > 1:
            return self._upload(call, repo, rest[0], _join(rest[1:]))
        return _error(404, f"Not found: {call.raw_path}")

    def _upload(self, call: _Call, repo: _GitRepo, what: str, rev: str) -> _Response:
        """``preupload`` and ``commit`` of a branch (kernlock.testing.uploads)."""
        sha = self._commit_for(repo, rev)
        if what == "preupload":
            return uploads.preupload(call, repo.path, sha, self.store.env)
        if f"refs/heads/{rev}" not in repo.refs().refs:
            return _error(400, f"Commits go to a branch, not {rev}")
        prefix = "" if repo.path.parent.parent.name == "models" else "kernels/"
        page = f"{call.base_url}/{prefix}{repo.repo_id}/commit/"
        return uploads.commit(call, repo.path, rev, sha, self.store.env, lambda commit: page + commit)

    @staticmethod
    def _commit_for(repo: _GitRepo, rev: str) -> str:
        sha = repo.resolve(rev)
        if sha is None:
            raise _Abort(_error(404, f"Invalid rev id: {rev}", "RevisionNotFound"))
        return sha

    # ---- API answers

    def _info(self, call: _Call, repo: _GitRepo, rev: str | None) -> _Response:
        sha = self._commit_for(repo, rev or repo.refs().default_branch)
        commit = repo.commit(sha)
        files = repo.snapshot(sha).files()
        blobs = _flag(call.param("blobs"))
        return _json(
            {
                "_id": sha[:24],
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": sha,
                "lastModified": commit.date,
                "private": False,
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": [f.sibling() if blobs else {"rfilename": f.path} for f in files],
            }
        )

    def _refs(self, call: _Call, repo: _GitRepo) -> _Response:
        refs = repo.refs()

        def group(kind: str) -> list[dict[str, str]]:
            return [
                {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}
                for name, sha in refs.group(kind).items()
            ]

        data: dict[str, Any] = {"branches": group("heads"), "tags": group("tags")}
        data["converts"] = group("convert")
        if _flag(call.param("include_prs")):
            data["pullRequests"] = group("pr")
        return _json(data)

    def _tree(self, call: _Call, repo: _GitRepo, rev: str, path: str) -> _Response:
        sha = self._commit_for(repo, rev)
        snapshot = repo.snapshot(sha)
        if path and (path not in snapshot.by_path or snapshot.by_path[path].kind != "directory"):
            raise _Abort(_error(404, f"Entry not found: {path}", "EntryNotFound", [("X-Repo-Commit", sha)]))
        expand = _flag(call.param("expand"))
        size = min(self.page_size, _EXPAND_PAGE_MAX) if expand else self.page_size
        page, headers = self._page(call, snapshot.listing(path, _flag(call.param("recursive"))), size)
        items = [self._tree_item(repo, sha, e, expand) for e in page]
        return _json(items, headers=headers)

    @staticmethod
    def _tree_item(repo: _GitRepo, sha: str, entry: _Entry, expand: bool) -> dict[str, Any]:
        data = entry.to_json()
        if expand:
            data["lastCommit"] = repo.last_commit(sha, entry.path).last_commit()
        return data

    def _commits(self, call: _Call, repo: _GitRepo, rev: str) -> _Response:
        sha = self._commit_for(repo, rev)
        # Paged as the Hub pages it (``p`` and ``limit``, 50 a page by default); a smaller ``page_size`` still wins.
        page, headers = _numbered_page(call, repo.history(sha), min(self.page_size, _COMMITS_PAGE))
        return _json([c.to_json() for c in page], headers=headers)

    def _paths_info(self, call: _Call, repo: _GitRepo, rev: str) -> _Response:
        sha = self._commit_for(repo, rev)
        snapshot = repo.snapshot(sha)
        form = call.form()
        expand = _flag((form.get("expand") or ["false"])[-1])
        paths = [p.strip("/") for p in form.get("paths", [])]
        found = [snapshot.by_path[p] for p in dict.fromkeys(paths) if p in snapshot.by_path]
        return _json([self._tree_item(repo, sha, e, expand) for e in found])

    def _page(self, call: _Call, items: list[_T], size: int) -> tuple[list[_T], list[tuple[str, str]]]:
        return _page(call, items, size)

    def _overview(self, org: str) -> _Response:
        orgs = self.store.organizations()
        counts = {t: self.store.repo_count(t, org) for t in _REPO_TYPES}
        if org not in orgs and not any(counts.values()):
            return _error(404, f"Organization not found: {org}")
        found = orgs.get(org)
        entry: dict[str, Any] = found if isinstance(found, dict) else {}
        data = {
            "name": org,
            "fullname": org,
            "avatarUrl": "",
            "type": "org",
            "isVerified": False,
            "numUsers": 0,
            "numModels": counts["models"],
            "numKernels": counts["kernels"],
            "numDatasets": 0,
            "numSpaces": 0,
            "numFollowers": 0,
            "trustedKernelPublisher": False,
        }
        return _json({**data, **entry})

    # ---- file downloads

    def _resolve(self, call: _Call, repo: _GitRepo, segs: list[str]) -> _Response:
        self._require(call, "GET")
        rev, rest = _split_revision(segs)
        sha = self._commit_for(repo, rev)
        path = _join(rest)
        entry = repo.snapshot(sha).by_path.get(path)
        commit_header = ("X-Repo-Commit", sha)
        if entry is None or entry.kind != "file":
            raise _Abort(_error(404, f"Entry not found: {path}", "EntryNotFound", [commit_header]))
        headers = [commit_header, ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if entry.lfs is None:
            git_etag = ("ETag", f'"{entry.oid}"')
            return self._ranged(call, repo.blob(entry.oid), None, entry.size, [*headers, git_etag])
        lfs_file = repo.lfs_path(entry.lfs.oid)
        if not lfs_file.is_file():
            message = f"LFS object {entry.lfs.oid} of {path} is missing in {repo.path}"
            return _error(500, message, headers=[commit_header])
        etag = f'"{entry.lfs.oid}"'
        linked = [("ETag", etag), ("X-Linked-Etag", etag), ("X-Linked-Size", str(entry.lfs.size))]
        return self._ranged(call, None, lfs_file, entry.lfs.size, [*headers, *linked])

    @staticmethod
    def _ranged(
        call: _Call, data: bytes | None, file: Path | None, size: int, headers: list[tuple[str, str]]
    ) -> _Response:
        return _ranged(call, data, file, size, headers)


def make_app(
    root: Path | str, *, log: RequestLog | None = None, faults: Faults | None = None, page_size: int = 1000
) -> HubApp:
    """A plain WSGI app serving the repositories under ``root``."""
    return HubApp(Path(root), log if log is not None else RequestLog(), faults or Faults(), page_size)


# ------------------------------------------------------------------------------------- the HTTP server


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive adapter from ``http.server`` to a WSGI app, keeping the raw request path."""

    protocol_version = "HTTP/1.1"
    server_version = "kernlock-hub"
    sys_version = ""
    timeout = 120
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: requests are recorded by the app's RequestLog."""

    def _serve(self) -> None:
        body = self._read_body()
        state: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            state["status"], state["headers"] = status, headers
            return lambda data: None

        try:
            result = self.server.app(self._environ(body), start_response)
        except ConnectionDropped:
            self.close_connection = True
            return
        try:
            self._send(result, state)
        except OSError:
            self.close_connection = True
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _serve

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _environ(self, body: bytes) -> dict[str, Any]:
        path, _, query = self.path.partition("?")
        host, port = self.server.server_address[:2]
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path, encoding="latin-1"),
            "QUERY_STRING": query,
            "RAW_URI": self.path,
            "REQUEST_URI": self.path,
            "SERVER_NAME": str(host),
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for key, value in self.headers.items():
            name = "HTTP_" + key.upper().replace("-", "_")
            if name not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                environ[name] = f"{environ[name]},{value}" if name in environ else value
        return environ

    def _send(self, result: Iterable[bytes], state: dict[str, Any]) -> None:
        chunks = iter(result)
        first = next((c for c in chunks if c), b"")
        status = int(state["status"].split()[0])
        headers = state["headers"]
        length = next((v.strip() for k, v in headers if k.lower() == "content-length"), None)
        declared = int(length) if length is not None and length.isdigit() else None
        bodyless = self.command == "HEAD" or status in (204, 304) or status < 200
        if declared is None and not bodyless:
            self.close_connection = True
        asked_close = any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
        if asked_close:  # e.g. a rewritten answer whose Content-Length differs from its body
            self.close_connection = True
        head = [f"HTTP/1.1 {state['status']}", f"Server: {self.server_version}"]
        head += [f"Date: {self.date_time_string()}", *(f"{k}: {v}" for k, v in headers)]
        if self.close_connection and not asked_close:
            head.append("Connection: close")
        payload = b"" if bodyless else first
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        sent = len(payload)
        for chunk in chunks:
            if chunk and not bodyless:
                self.wfile.write(chunk)
                sent += len(chunk)
        if not bodyless and declared is not None and sent != declared:
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    """Threaded server that tracks open connections so that ``stop`` can close kept-alive ones."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (Ctrl-C, a timeout, a closed pool) is no error of the server: nothing is printed.
        Anything else is one line on stderr (the traceback with ``KERNLOCK_DEBUG=1``)."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        if os.environ.get("KERNLOCK_DEBUG", "").strip() not in ("", "0"):
            super().handle_error(request, client_address)
            return
        sys.stderr.write(f"kernlock-hub: error answering {client_address[0]}: {error!r}\n")

    def close_connections(self) -> None:
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class HubServer:
    """Threaded HTTP/1.1 server for :func:`make_app` on ``host:port`` (0: a free port); a context manager."""

    def __init__(
        self,
        root: Path | str,
        host: str = "127.0.0.1",
        port: int = 0,
        page_size: int = 1000,
        max_concurrent: int | None = None,
    ) -> None:
        """``max_concurrent``: serve at most that many requests of one client at once (a rate-limited Hub); the
        others wait for a slot. ``concurrency`` records how many were served at once, capped or not."""
        self.root = Path(root)
        self.host = host
        self.port = port
        self.log = RequestLog()
        self.faults = Faults()
        self.app = make_app(self.root, log=self.log, faults=self.faults, page_size=page_size)
        self.max_concurrent = max_concurrent
        self.concurrency = Concurrency(max_concurrent or None)
        self._serve = gated(self.app, self.concurrency)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        if self._httpd is None:
            raise RuntimeError("HubServer is not started")
        host, port = self._httpd.server_address[:2]
        if isinstance(host, bytes):  # typeshed allows it (AF_UNIX); a TCP server binds a str host
            host = host.decode()
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"

    def start(self) -> HubServer:
        """Bind and serve in a background thread (idempotent)."""
        if self._httpd is None:
            self._httpd = _Server((self.host, self.port), self._serve)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="kernlock-hub", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket and open connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def env(self) -> dict[str, str]:
        """Environment variables that point a fresh client process at this server (and at the trusted root of the
        test sigstore instance that signs its builds, when the Hub has one)."""
        env = {"HF_ENDPOINT": self.url, "HF_HUB_DISABLE_XET": "1"}
        trusted_root = self.root / "sigstore" / "trusted_root.json"
        if trusted_root.exists():
            env["KERNLOCK_SIGSTORE_TRUSTED_ROOT"] = str(trusted_root.resolve())
        return env

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
