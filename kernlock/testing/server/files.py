"""The test Hub's file downloads (``/{repo}/resolve/{rev}/{path}``): a git blob, or an LFS object from the
repository's ``.git/lfs/objects``, with the Hub's headers (commit, ETag, linked size) and byte ranges."""

from __future__ import annotations

from kernlock.hub.wire import Abort as _Abort
from kernlock.hub.wire import Call as _Call
from kernlock.hub.wire import Response as _Response
from kernlock.hub.wire import error as _error
from kernlock.hub.wire import join as _join
from kernlock.hub.wire import ranged as _ranged
from kernlock.hub.wire import split_revision as _split_revision
from kernlock.testing.server.answers import commit_for
from kernlock.testing.server.git import GitRepo

__all__ = ["resolve"]


def resolve(call: _Call, repo: GitRepo, segs: list[str]) -> _Response:
    """One file of ``repo`` at a revision: ``segs`` are the path's parts after ``resolve/``."""
    call.require("GET")
    rev, rest = _split_revision(segs)
    sha = commit_for(repo, rev)
    path = _join(rest)
    entry = repo.snapshot(sha).by_path.get(path)
    commit_header = ("X-Repo-Commit", sha)
    if entry is None or entry.kind != "file":
        raise _Abort(_error(404, f"Entry not found: {path}", "EntryNotFound", [commit_header]))
    headers = [commit_header, ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
    if entry.lfs is None:
        git_etag = ("ETag", f'"{entry.oid}"')
        return _ranged(call, repo.blob(entry.oid), None, entry.size, [*headers, git_etag])
    lfs_file = repo.lfs_path(entry.lfs.oid)
    if not lfs_file.is_file():
        message = f"LFS object {entry.lfs.oid} of {path} is missing in {repo.path}"
        return _error(500, message, headers=[commit_header])
    etag = f'"{entry.lfs.oid}"'
    linked = [("ETag", etag), ("X-Linked-Etag", etag), ("X-Linked-Size", str(entry.lfs.size))]
    return _ranged(call, None, lfs_file, entry.lfs.size, [*headers, *linked])
