"""The test Hub's routing: which answer a request path gets (the API, uploads, file downloads), the repository it
names, and the methods each route takes."""

from __future__ import annotations

from urllib.parse import unquote

from kernlock.hub.wire import Abort as _Abort
from kernlock.hub.wire import Call as _Call
from kernlock.hub.wire import Response as _Response
from kernlock.hub.wire import error as _error
from kernlock.hub.wire import join as _join
from kernlock.hub.wire import json_response as _json
from kernlock.hub.wire import split_revision as _split_revision
from kernlock.testing import uploads
from kernlock.testing.server import answers
from kernlock.testing.server.files import resolve
from kernlock.testing.server.git import REPO_TYPES, GitRepo, Store

__all__ = ["Routes"]


class Routes:
    """The routes of the repositories under ``store``; listings are paged ``page_size`` at a time."""

    def __init__(self, store: Store, page_size: int) -> None:
        self.store = store
        self.page_size = page_size

    def route(self, call: _Call) -> _Response:
        """The answer to ``call``; a 404 for a path no route takes."""
        segs = call.segments
        if segs[:1] == ["api"]:
            return self._api(call, segs[1:])
        if len(segs) >= 6 and segs[0] == "kernels" and segs[3] == "resolve":
            return resolve(call, self._repo("kernels", segs[1], segs[2]), segs[4:])
        if len(segs) >= 5 and segs[2] == "resolve":
            return resolve(call, self._repo("models", segs[0], segs[1]), segs[3:])
        return _error(404, f"Not found: {call.raw_path}")

    def _api(self, call: _Call, segs: list[str]) -> _Response:
        if segs == ["agent-harnesses"]:
            call.require("GET")
            return _json({"standardEnvVars": [], "harnesses": {}})
        if len(segs) == 3 and segs[0] == "organizations" and segs[2] == "overview":
            call.require("GET")
            return answers.overview(self.store, unquote(segs[1]))
        if segs == ["repos", "create"]:  # uploads: kernlock.testing.uploads
            return uploads.create_repo(call, self.store.root, self.store.env)
        if segs == ["validate-yaml"]:
            return uploads.validate_yaml(call)
        if len(segs) >= 3 and segs[0] in REPO_TYPES:
            return self._repo_api(call, self._repo(segs[0], segs[1], segs[2]), segs[3:])
        if len(segs) == 1 and segs[0] in REPO_TYPES:
            call.require("GET")
            return answers.listing(call, self.store, segs[0], self.page_size)
        return _error(404, f"Not found: {call.raw_path}")

    def _repo(self, repo_type: str, org: str, name: str) -> GitRepo:
        repo = self.store.repo(repo_type, unquote(org), unquote(name))
        if repo is None:
            message = f"Repository not found: {repo_type[:-1]} {unquote(org)}/{unquote(name)}"
            raise _Abort(_error(404, message, "RepoNotFound"))
        return repo

    def _repo_api(self, call: _Call, repo: GitRepo, rest: list[str]) -> _Response:
        if not rest or (rest[0] == "revision" and len(rest) > 1):
            call.require("GET")
            return answers.info(call, repo, _join(rest[1:]) if rest else None)
        if rest == ["refs"]:
            call.require("GET")
            return answers.refs(call, repo)
        if rest[0] == "tree" and len(rest) > 1:
            call.require("GET")
            rev, path = _split_revision(rest[1:])
            return answers.tree(call, repo, rev, _join(path), self.page_size)
        if rest[0] == "commits" and len(rest) > 1:
            call.require("GET")
            return answers.commits(call, repo, _join(rest[1:]), self.page_size)
        if rest[0] == "paths-info" and len(rest) > 1:
            call.require("POST")
            return answers.paths_info(call, repo, _join(rest[1:]))
        if rest[0] in ("preupload", "commit") and len(rest) > 1:
            return self._upload(call, repo, rest[0], _join(rest[1:]))
        return _error(404, f"Not found: {call.raw_path}")

    def _upload(self, call: _Call, repo: GitRepo, what: str, rev: str) -> _Response:
        """``preupload`` and ``commit`` of a branch (kernlock.testing.uploads)."""
        sha = answers.commit_for(repo, rev)
        if what == "preupload":
            return uploads.preupload(call, repo.path, sha, self.store.env)
        if f"refs/heads/{rev}" not in repo.refs().refs:
            return _error(400, f"Commits go to a branch, not {rev}")
        prefix = "" if repo.path.parent.parent.name == "models" else "kernels/"
        page = f"{call.base_url}/{prefix}{repo.repo_id}/commit/"
        return uploads.commit(call, repo.path, rev, sha, self.store.env, lambda commit: page + commit)
