"""``kernlock serve``: a read-only, Hub-compatible mirror of exactly the locked commits.

Nodes that set ``HF_ENDPOINT`` to the mirror load the locked builds with unmodified ``huggingface_hub``,
``kernels`` and ``transformers`` (and ``kernlock sync`` works against it). The mirror knows only what the lock
names: for each locked repo, its locked commits with the files of the locked variants it holds, and the locked
refs as branches pinned to those commits. Anything else is a 404 with the error code the clients expect
(``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``). Files come from a bundle (answered straight from the
tar at the member's offset) or from a kernel cache, checked against the lock before serving, and are streamed:
memory does not grow with file size. ``GET /health`` answers 200 with what is served.

The protocol itself (request parsing, headers, ranges, error answers) is :mod:`kernlock.hub.wire`, shared with
the test Hub. :func:`run` serves the app with gunicorn (see docs/airgap.md for why).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from kernlock.errors import IntegrityError, NotSyncedError, ServeError
from kernlock.hub import wire as hubwire
from kernlock.hub.wire import Abort, Call, Entry, Lfs, Response, error, json_response
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant
from kernlock.util import names

__all__ = [
    "Catalog",
    "MirrorApp",
    "Repo",
    "ServedFile",
    "Snapshot",
    "Source",
    "from_bundle",
    "from_cache",
    "run",
    "stamp",
]

_EPOCH = "1970-01-01T00:00:00.000Z"  # the lock records no commit dates
_REPO_TYPES = ("kernels", "models", "datasets", "spaces")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServedFile:
    """A locked file as the mirror answers it: its tree entry, where its bytes are, and the ``stamp`` of that
    file when it was verified (a file changed since is never served)."""

    entry: Entry
    file: Path
    offset: int = 0
    stamp: tuple[int, ...] = ()


@dataclass(slots=True, kw_only=True)
class Snapshot:
    """One locked commit: the files of the locked variants served, and the folders above them."""

    commit: str
    files: dict[str, ServedFile] = field(default_factory=dict)

    def add(self, path: str, locked: LockedFile, file: Path, offset: int = 0) -> None:
        """Serve ``locked`` at ``path`` (``build/<variant>/<file>``) from ``file`` at ``offset``."""
        if locked.algorithm == "sha256":  # an LFS file: git holds its pointer, the Hub lists both
            pointer = hubwire.lfs_pointer(locked.digest, locked.size)
            lfs = Lfs(oid=locked.digest, size=locked.size, pointer_size=len(pointer))
            entry = Entry(path=path, kind="file", oid=hubwire.git_blob_id(pointer), size=locked.size, lfs=lfs)
        else:
            entry = Entry(path=path, kind="file", oid=locked.digest, size=locked.size)
        self.files[path] = ServedFile(entry=entry, file=file, offset=offset, stamp=stamp(file))

    def entries(self) -> list[Entry]:
        """Every file and folder, sorted by path."""
        folders = {"/".join(p.split("/")[:i]) for p in self.files for i in range(1, p.count("/") + 1)}
        dirs = [Entry(path=d, kind="directory", oid=hubwire.fake_oid(self.commit, d), size=0) for d in folders]
        return sorted([*dirs, *(f.entry for f in self.files.values())], key=lambda e: e.path)


@dataclass(slots=True, kw_only=True)
class Repo:
    """A locked repo: its locked commits and its locked refs (branch name -> commit)."""

    repo_id: str
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)


#: Where a locked file's bytes are: (file, offset of the bytes in it).
Source = Callable[[LockedKernel, LockedVariant, LockedFile], tuple[Path, int]]


class Catalog:
    """What the mirror serves, built from a lock and the verified files."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.skipped: list[str] = []  # "repo variant: why" of locked variants not served

    def add(self, lock: Lock, source: Source, pairs: Iterable[tuple[LockedKernel, LockedVariant]]) -> None:
        """Serve every (entry, variant) of ``pairs``; ``source`` says where each file's bytes are."""
        for entry, variant in pairs:
            repo = self.repos.setdefault(entry.repo, Repo(repo_id=entry.repo))
            snapshot = repo.snapshots.setdefault(entry.commit, Snapshot(commit=entry.commit))
            for locked in variant.files:
                file, offset = source(entry, variant, locked)
                snapshot.add(f"build/{variant.name}/{locked.path}", locked, file, offset)
        for entry in lock.kernels:
            served = self.repos.get(entry.repo)
            if served is not None and entry.commit in served.snapshots and entry.ref and entry.ref != entry.commit:
                served.refs[entry.ref] = entry.commit

    @property
    def file_count(self) -> int:
        return sum(len(s.files) for r in self.repos.values() for s in r.snapshots.values())


def from_bundle(path: Path) -> Catalog:
    """The catalog of a bundle: its lock, every file checked against it, answered from the tar itself."""
    from kernlock.airgap import bundle as bundles
    from kernlock.sync.engine import targets

    before = stamp(Path(path)) if Path(path).is_file() else ()
    opened = bundles.load(path)
    pairs = targets(opened.lock, opened.environments)
    opened.check(pairs)

    def source(entry: LockedKernel, variant: LockedVariant, locked: LockedFile) -> tuple[Path, int]:
        member = opened.members[bundles.member_name(entry, variant, locked)]
        return opened.path, member.offset

    catalog = Catalog()
    catalog.add(opened.lock, source, pairs)
    if stamp(opened.path) != before:
        raise IntegrityError(
            f"{path} changed while it was checked", fix="copy it whole, then start `kernlock serve` again"
        )
    return catalog


def stamp(file: Path) -> tuple[int, ...]:
    """What changes when a file is written or replaced: device, inode, size, mtime and ctime."""
    st = os.stat(file)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def from_cache(lock: Lock, cache: Path) -> Catalog:
    """The catalog of the locked variants a kernel cache holds, each checked against the lock (receipts, else a
    re-hash); a variant that is missing or does not match is not served and is listed in ``skipped``."""
    from kernlock.sync import engine as syncing

    catalog = Catalog()
    served = []
    for entry, variant in syncing.targets(lock, None):
        try:
            syncing.check_variant(entry, variant, cache=cache)
        except (NotSyncedError, IntegrityError) as err:
            catalog.skipped.append(f"{entry.repo} {variant.name}: {err}")
            continue
        served.append((entry, variant))

    def source(entry: LockedKernel, variant: LockedVariant, locked: LockedFile) -> tuple[Path, int]:
        # check_variant proved the link a symlink to its verified blob in the cache (or a verified copy)
        return names.under(syncing.variant_path(entry, variant, cache), *locked.path.split("/")), 0

    catalog.add(lock, source, served)
    if not catalog.repos:
        raise NotSyncedError(
            f"the kernel cache {cache} holds no locked variant to serve",
            fix="run `kernlock sync --all-environments` there first (or serve a bundle with `kernlock serve --from "
            "FILE`)",
        )
    return catalog


# -- the WSGI app ------------------------------------------------------------------------------------------


class MirrorApp:
    """The WSGI application: answers the Hub requests of the clients for exactly what the catalog holds."""

    def __init__(self, catalog: Catalog, page_size: int = 1000) -> None:
        self.catalog = catalog
        self.page_size = page_size

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        call = Call.from_environ(environ)
        try:
            response = self._route(call)
        except Abort as abort:
            response = abort.response
        return hubwire.send(call, response, start_response)

    def _route(self, call: Call) -> Response:
        segs = call.segments
        if segs == ["health"]:
            call.require("GET")
            repos = {r.repo_id: sorted(r.snapshots) for r in self.catalog.repos.values()}
            return json_response({"status": "ok", "kernels": repos, "files": self.catalog.file_count})
        if segs == ["api", "agent-harnesses"]:
            call.require("GET")
            return json_response({"standardEnvVars": [], "harnesses": {}})
        if len(segs) == 4 and segs[:2] == ["api", "organizations"] and segs[3] == "overview":
            call.require("GET")
            return self._overview(unquote(segs[2]))
        if segs in (["api", "kernels"], ["api", "models"]):  # listings: the locked kernel repos of one author
            call.require("GET")
            author = call.param("author")
            ids = sorted(r for r in self.catalog.repos if segs[1] == "kernels" and author in (None, r.split("/")[0]))
            return json_response([{"id": i, "author": i.split("/")[0]} for i in ids])
        if len(segs) >= 4 and segs[0] == "api" and segs[1] in _REPO_TYPES:
            return self._repo_api(call, self._repo(segs[1], segs[2], segs[3]), segs[4:])
        if len(segs) >= 6 and segs[0] in _REPO_TYPES and segs[3] == "resolve":
            return self._resolve(call, self._repo(segs[0], segs[1], segs[2]), segs[4:])
        if len(segs) >= 5 and segs[2] == "resolve":
            return self._resolve(call, self._repo("models", segs[0], segs[1]), segs[3:])
        return error(404, f"Not found: {call.raw_path} (this kernlock mirror serves only what kernels.lock pins)")

    def _overview(self, org: str) -> Response:
        """A locked org: trusted, since the lock already pins and hashes what is served (docs/airgap.md)."""
        count = sum(1 for repo in self.catalog.repos if repo.split("/")[0] == org)
        if not count:
            return error(404, f"Organization not found: {org} (no kernel of it is in kernels.lock)")
        return json_response({"name": org, "fullname": org, "type": "org", "numKernels": count, **_TRUSTED})

    def _repo(self, repo_type: str, org: str, name: str) -> Repo:
        repo_id = f"{unquote(org)}/{unquote(name)}"
        repo = self.catalog.repos.get(repo_id) if repo_type == "kernels" else None
        if repo is None:
            message = f"Repository not found: {repo_type[:-1]} {repo_id} is not in kernels.lock (kernlock mirror)"
            raise Abort(error(404, message, "RepoNotFound"))
        return repo

    @staticmethod
    def _commit_for(repo: Repo, rev: str) -> str:
        name = rev.removeprefix("refs/heads/").removeprefix("refs/tags/")
        commit = rev if rev in repo.snapshots else repo.refs.get(name)
        if commit is None:
            pinned = ", ".join([*repo.refs, *repo.snapshots]) or "none"
            message = f"Invalid rev id: {rev} (kernels.lock pins {repo.repo_id} at {pinned})"
            raise Abort(error(404, message, "RevisionNotFound"))
        return commit

    def _repo_api(self, call: Call, repo: Repo, rest: list[str]) -> Response:
        if not rest or (rest[0] == "revision" and len(rest) > 1):
            call.require("GET")
            return self._info(repo, hubwire.join(rest[1:]) if rest else "main")
        if rest == ["refs"]:
            call.require("GET")
            branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": c} for n, c in sorted(repo.refs.items())]
            return json_response({"branches": branches, "tags": [], "converts": []})
        if rest[0] == "tree" and len(rest) > 1:
            call.require("GET")
            rev, path = hubwire.split_revision(rest[1:])
            return self._tree(call, repo, rev, hubwire.join(path))
        if rest[0] == "paths-info" and len(rest) > 1:
            call.require("POST")
            snapshot = repo.snapshots[self._commit_for(repo, hubwire.join(rest[1:]))]
            by_path = {e.path: e for e in snapshot.entries()}
            paths = dict.fromkeys(p.strip("/") for p in call.form().get("paths", []))
            return json_response([by_path[p].to_json() for p in paths if p in by_path])
        return error(404, f"Not found: {call.raw_path} (this kernlock mirror answers refs, revision, tree, paths-info)")

    def _info(self, repo: Repo, rev: str) -> Response:
        commit = self._commit_for(repo, rev)
        files = [f.entry.sibling() for f in sorted(repo.snapshots[commit].files.values(), key=lambda f: f.entry.path)]
        author = repo.repo_id.split("/")[0]
        data: dict[str, Any] = {
            "_id": commit[:24],
            "id": repo.repo_id,
            "author": author,
            "sha": commit,
            "lastModified": _EPOCH,
        }
        data.update(private=False, disabled=False, gated=False, downloads=0, likes=0, tags=[], siblings=files)
        return json_response(data)

    def _tree(self, call: Call, repo: Repo, rev: str, path: str) -> Response:
        commit = self._commit_for(repo, rev)
        entries = repo.snapshots[commit].entries()
        if path and not any(e.path == path and e.kind == "directory" for e in entries):
            raise Abort(error(404, f"Entry not found: {path}", "EntryNotFound", [("X-Repo-Commit", commit)]))
        found = hubwire.listing(entries, path, hubwire.flag(call.param("recursive")))
        page, headers = hubwire.page(call, found, self.page_size)
        return json_response([e.to_json() for e in page], headers=headers)

    def _resolve(self, call: Call, repo: Repo, segs: list[str]) -> Response:
        call.require("GET")
        rev, rest = hubwire.split_revision(segs)
        commit = self._commit_for(repo, rev)
        path = hubwire.join(rest)
        served = repo.snapshots[commit].files.get(path)
        if served is None:
            message = f"Entry not found: {path} (not a file of a locked variant)"
            raise Abort(error(404, message, "EntryNotFound", [("X-Repo-Commit", commit)]))
        try:
            changed = stamp(served.file) != served.stamp
        except OSError:
            changed = True
        if changed:
            message = f"{served.file} changed since the mirror verified it; check it and restart `kernlock serve`"
            raise Abort(error(503, message))
        headers = hubwire.file_headers(commit, served.entry)
        return hubwire.ranged(call, None, served.file, served.entry.size, headers, served.offset)


def _check_free(host: str, port: int) -> None:
    """A ServeError naming ``--port``/``--host`` when the address cannot be listened on (gunicorn would retry
    for seconds, then log a bare error)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            probe.bind((host, port))
    except OSError as err:
        raise ServeError(
            f"cannot listen on {host} port {port}",
            why=f"port {port} is in use or {host} is not an address of this machine ({err.strerror})",
            fix="pick another with `--port` (or `--host`)",
        ) from err


_TRUSTED = {"avatarUrl": "", "isVerified": False, "trustedKernelPublisher": True}


# -- the production server ---------------------------------------------------------------------------------


def run(
    app: MirrorApp,
    host: str,
    port: int,
    workers: int,
    threads: int,
    access_log: str,
    announce: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` with gunicorn (``gthread`` workers: each a process with ``threads`` threads; files go out
    with ``sendfile``) until SIGINT/SIGTERM; the access log goes to ``access_log`` (``-``: stdout). ``announce``
    runs once gunicorn is found and the address is free, just before serving (so nothing says "serving" first and
    fails after)."""
    try:
        from gunicorn.app.base import BaseApplication
    except ImportError as err:
        raise ServeError(
            "`kernlock serve` runs on gunicorn, which is not installed",
            fix="install it with `pip install 'kernlock[serve]'` (or `pip install gunicorn`)",
        ) from err
    _check_free(host, port)
    options = {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",
        "threads": threads,
        "accesslog": access_log,
        "errorlog": "-",
        "timeout": 300,
        "keepalive": 5,
        "proc_name": "kernlock-serve",
    }

    class _Server(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> MirrorApp:
            return app

    if announce is not None:
        announce()
    _Server().run()
