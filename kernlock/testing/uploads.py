"""Uploads to the test Hub: the write API that ``huggingface_hub``'s ``create_repo`` and ``create_commit`` speak
(and so ``PreTrainedModel.push_to_hub`` and ``HfApi.upload_folder`` without hf_xet), for model repositories.

Enough of the Hub's protocol for a push to land as a real git commit the server then serves like any other:

* ``POST /api/repos/create`` ``{name, organization, type}``: a new repository with one commit (``.gitattributes``,
  as the Hub makes it), 409 when it exists;
* ``POST /api/validate-yaml``: accepts every model card (the Hub checks its YAML header; this server does not);
* ``POST /api/{models,kernels}/{org}/{name}/preupload/{rev}``: every file is a ``regular`` upload (no LFS or Xet),
  with the blob id the branch already holds for it (the client then skips unchanged files);
* ``POST /api/{models,kernels}/{org}/{name}/commit/{rev}`` (NDJSON: a ``header``, then ``file`` with base64
  content, ``deletedFile``, ``deletedFolder``): one commit on the branch, through a private index file (the work
  tree is never touched); ``parentCommit`` must be the branch head when given. ``lfsFile`` and ``create_pr`` are
  refused (400): this server stores no uploaded LFS objects and makes no pull requests.

No authentication: anyone who reaches the server can write. It listens on 127.0.0.1 for tests only.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernlock.hub.wire import Abort, Call, Response, error, json_response
from kernlock.util import names

__all__ = ["commit", "create_repo", "preupload", "validate_yaml"]

_AUTHOR = {
    "GIT_AUTHOR_NAME": "kernlock test Hub",
    "GIT_AUTHOR_EMAIL": "hub@kernlock.invalid",
    "GIT_COMMITTER_NAME": "kernlock test Hub",
    "GIT_COMMITTER_EMAIL": "hub@kernlock.invalid",
}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(path), threading.Lock())


def _json_body(call: Call) -> Any:
    try:
        return json.loads(call.body() or b"{}")
    except (ValueError, RecursionError) as err:
        raise Abort(error(400, f"Invalid request body: {err}")) from err


def _git(path: Path, env: dict[str, str], *args: str, data: bytes | None = None) -> str:
    cmd = ["git", "-c", "safe.directory=*", "-C", str(path), *args]
    proc = subprocess.run(cmd, input=data, capture_output=True, env={**env, **_AUTHOR}, check=False)
    if proc.returncode != 0:
        raise Abort(error(500, f"{' '.join(args[:2])}: {proc.stderr.decode('utf-8', 'replace').strip()}"))
    return proc.stdout.decode().strip()


def create_repo(call: Call, root: Path, env: dict[str, str]) -> Response:
    call.require("POST")
    data = _json_body(call)
    kind = {"model": "models", None: "models", "kernel": "kernels"}.get(data.get("type"))
    org, name = data.get("organization"), data.get("name")
    try:
        repo_id = names.check_repo(f"{org}/{name}")
    except ValueError as err:
        raise Abort(error(400, f"Invalid repo name: {err}")) from err
    if kind is None:
        raise Abort(error(400, f"This test Hub creates model and kernel repos, not {data.get('type')!r}"))
    path = root / kind / org / name
    prefix = "" if kind == "models" else "kernels/"
    url = f"{call.base_url}/{prefix}{repo_id}"
    with _lock(path):
        if (path / ".git").exists():
            return error(409, f"You already created this {kind[:-1]} repo: {repo_id}")
        path.mkdir(parents=True)
        _git(path, env, "init", "-q", "-b", "main")
        blob = _git(path, env, "hash-object", "-w", "--stdin", data=b"*.safetensors filter=lfs diff=lfs merge=lfs\n")
        tree = _git(path, env, "mktree", data=f"100644 blob {blob}\t.gitattributes\n".encode())
        head = _git(path, env, "commit-tree", tree, "-m", "initial commit")
        _git(path, env, "update-ref", "refs/heads/main", head)
    return json_response({"url": url, "name": repo_id, "id": repo_id})


def validate_yaml(call: Call) -> Response:
    call.require("POST")
    _json_body(call)
    return json_response({"errors": [], "warnings": []})


def preupload(call: Call, repo: Path, sha: str, env: dict[str, str]) -> Response:
    call.require("POST")
    files = _json_body(call).get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in files):
        raise Abort(error(400, "Invalid preupload request: `files` must be a list of {path, sample, size}"))
    answer = []
    for item in files:
        held = _exists(repo, sha, item["path"], env)
        oid = _git(repo, env, "rev-parse", "-q", "--verify", f"{sha}:{item['path']}") if held else None
        answer.append({"path": item["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": oid})
    return json_response({"files": answer, "commitOid": sha})


def _exists(repo: Path, sha: str, path: str, env: dict[str, str]) -> bool:
    cmd = ["git", "-c", "safe.directory=*", "-C", str(repo), "cat-file", "-e", f"{sha}:{path}"]
    return subprocess.run(cmd, capture_output=True, env=env, check=False).returncode == 0


def commit(call: Call, repo: Path, branch: str, head: str, env: dict[str, str], url: Callable[[str], str]) -> Response:
    """One commit of the NDJSON operations on ``branch`` (at ``head``); ``url(sha)`` is its commit page."""
    call.require("POST")
    if call.param("create_pr"):
        raise Abort(error(400, "This test Hub makes no pull requests"))
    header: dict[str, Any] = {}
    adds: dict[str, bytes] = {}
    deletes: list[tuple[str, bool]] = []
    for line in call.body().splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = dict(value)
            elif key == "file":
                adds[names.check_path(value["path"])] = base64.b64decode(value["content"], validate=True)
            elif key in ("deletedFile", "deletedFolder"):
                deletes.append((str(value["path"]).strip("/"), key == "deletedFolder"))
            else:
                raise Abort(error(400, f"This test Hub does not accept {key!r} operations (no LFS uploads)"))
        except (ValueError, KeyError, TypeError) as err:
            raise Abort(error(400, f"Invalid commit payload: {err}")) from err
    parent = header.get("parentCommit")
    with _lock(repo), tempfile.TemporaryDirectory() as scratch:
        current = _git(repo, env, "rev-parse", "-q", "--verify", f"refs/heads/{branch}")
        if (parent is not None and parent != current) or current != head:
            return error(412, f"A commit has happened since {parent or head}; retry on the new head")
        index = {**env, "GIT_INDEX_FILE": os.path.join(scratch, "index")}
        _git(repo, index, "read-tree", current)
        for path, folder in deletes:
            _git(repo, index, "rm", "-q", "--cached", "-r", "--ignore-unmatch", path if folder else f"{path}")
        for path, content in adds.items():
            blob = _git(repo, env, "hash-object", "-w", "--stdin", data=content)
            _git(repo, index, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
        tree = _git(repo, index, "write-tree")
        message = str(header.get("summary") or "Upload files") + (
            f"\n\n{header['description']}" if header.get("description") else ""
        )
        sha = _git(repo, env, "commit-tree", tree, "-p", current, "-m", message)
        _git(repo, env, "update-ref", f"refs/heads/{branch}", sha, current)
    return json_response({"commitUrl": url(sha), "commitOid": sha, "pullRequestUrl": None})
