"""The test Hub's API answers, as JSON: a repository's info, refs, tree, commits and paths-info, an organization's
overview and a publisher's repositories, paginated as the Hub paginates them."""

from __future__ import annotations

from typing import Any

from kernlock.hub.wire import COMMITS_PAGE as _COMMITS_PAGE
from kernlock.hub.wire import Abort as _Abort
from kernlock.hub.wire import Call as _Call
from kernlock.hub.wire import Entry as _Entry
from kernlock.hub.wire import Response as _Response
from kernlock.hub.wire import error as _error
from kernlock.hub.wire import flag as _flag
from kernlock.hub.wire import json_response as _json
from kernlock.hub.wire import numbered_page as _numbered_page
from kernlock.hub.wire import page as _page
from kernlock.testing.server.git import REPO_TYPES, GitRepo, Store

__all__ = ["commit_for", "commits", "info", "listing", "overview", "paths_info", "refs", "tree"]

_EXPAND_PAGE_MAX = 50


def commit_for(repo: GitRepo, rev: str) -> str:
    """The commit ``rev`` names in ``repo``; the Hub's 404 (``RevisionNotFound``) when it names none."""
    sha = repo.resolve(rev)
    if sha is None:
        raise _Abort(_error(404, f"Invalid rev id: {rev}", "RevisionNotFound"))
    return sha


def info(call: _Call, repo: GitRepo, rev: str | None) -> _Response:
    """``GET /api/{type}/{org}/{name}[/revision/{rev}]``: the repository at a revision (the default branch)."""
    sha = commit_for(repo, rev or repo.refs().default_branch)
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


def refs(call: _Call, repo: GitRepo) -> _Response:
    """``GET .../refs``: branches, tags, converts, and pull requests when asked for."""
    found = repo.refs()

    def group(kind: str) -> list[dict[str, str]]:
        return [
            {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha} for name, sha in found.group(kind).items()
        ]

    data: dict[str, Any] = {"branches": group("heads"), "tags": group("tags")}
    data["converts"] = group("convert")
    if _flag(call.param("include_prs")):
        data["pullRequests"] = group("pr")
    return _json(data)


def tree(call: _Call, repo: GitRepo, rev: str, path: str, page_size: int) -> _Response:
    """``GET .../tree/{rev}/{path}``: one folder's entries (all below it with ``recursive``), a page at a time; with
    ``expand`` each with its last commit, in pages of at most 50."""
    sha = commit_for(repo, rev)
    snapshot = repo.snapshot(sha)
    if path and (path not in snapshot.by_path or snapshot.by_path[path].kind != "directory"):
        raise _Abort(_error(404, f"Entry not found: {path}", "EntryNotFound", [("X-Repo-Commit", sha)]))
    expand = _flag(call.param("expand"))
    size = min(page_size, _EXPAND_PAGE_MAX) if expand else page_size
    page, headers = _page(call, snapshot.listing(path, _flag(call.param("recursive"))), size)
    items = [_tree_item(repo, sha, e, expand) for e in page]
    return _json(items, headers=headers)


def _tree_item(repo: GitRepo, sha: str, entry: _Entry, expand: bool) -> dict[str, Any]:
    data = entry.to_json()
    if expand:
        data["lastCommit"] = repo.last_commit(sha, entry.path).last_commit()
    return data


def commits(call: _Call, repo: GitRepo, rev: str, page_size: int) -> _Response:
    """``GET .../commits/{rev}``: the history from ``rev``, newest first."""
    sha = commit_for(repo, rev)
    # Paged as the Hub pages it (``p`` and ``limit``, 50 a page by default); a smaller ``page_size`` still wins.
    page, headers = _numbered_page(call, repo.history(sha), min(page_size, _COMMITS_PAGE))
    return _json([c.to_json() for c in page], headers=headers)


def paths_info(call: _Call, repo: GitRepo, rev: str) -> _Response:
    """``POST .../paths-info/{rev}``: the entries of the paths the form names that exist at ``rev``."""
    sha = commit_for(repo, rev)
    snapshot = repo.snapshot(sha)
    form = call.form()
    expand = _flag((form.get("expand") or ["false"])[-1])
    paths = [p.strip("/") for p in form.get("paths", [])]
    found = [snapshot.by_path[p] for p in dict.fromkeys(paths) if p in snapshot.by_path]
    return _json([_tree_item(repo, sha, e, expand) for e in found])


def listing(call: _Call, store: Store, repo_type: str, page_size: int) -> _Response:
    """``GET /api/{kernels,models}?author=ORG``: the repositories of one publisher, as ``[{id, author}]``, sorted by
    id and paginated like other listings (the whole Hub when no author is given)."""
    author = call.param("author")
    orgs = [author] if author else sorted(p.name for p in (store.root / repo_type).glob("*") if p.is_dir())
    ids = [f"{org}/{name}" for org in orgs for name in store.repo_names(repo_type, org)]
    items, headers = _page(call, [{"id": i, "author": i.split("/")[0]} for i in ids], page_size)
    return _json(items, headers=headers)


def overview(store: Store, org: str) -> _Response:
    """``GET /api/organizations/{org}/overview``: its repository counts, and what ``organizations.json`` says of it."""
    orgs = store.organizations()
    counts = {t: store.repo_count(t, org) for t in REPO_TYPES}
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
