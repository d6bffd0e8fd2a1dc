"""What `kernlock lock` asks the Hub, counted by the local Hub's request log (docs/locking.md, "Requests").

A cold lock of K kernels costs 1 trust check per publisher, then per kernel 1 refs listing, 1 listing of
``build/`` at the resolved commit and 1 GET per distinct ``metadata.json`` blob among the variants it chose:
environments whose builds share a ``metadata.json`` (the tree listing names each file's blob id) cost one read;
and 1 GET per distinct ``metadata.json.sigstore`` blob of a signed variant (verified at lock time), once per build
however many environments load it; and 1 GET per distinct git file (Python source) a signed digest covers, checked
against it at lock time (docs/security.md).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from projects import write_pyproject

from kernlock import api
from kernlock.hub.client import Hub
from kernlock.lock.model import Signature
from kernlock.testing import Catalog, HubServer, create_kernel_repo

ENVIRONMENTS = [
    "torch213-cxx11-cpu-x86_64-linux",
    "torch213-cxx11-cu128-x86_64-linux",
    "torch212-cxx11-cpu-x86_64-linux",
    "torch212-cxx11-cu126-x86_64-linux",
]
SHARED = b'{\n  "python-depends": []\n}\n'


def _repo(catalog: Catalog, shared_metadata: bool) -> str:
    """A repo with a build for each environment; with ``shared_metadata``, every build's metadata.json is the same
    file (one blob), as a publisher's builds without dependencies often are."""
    repo_id = f"kernels-community/req-{uuid.uuid4().hex[:8]}"
    repo = create_kernel_repo(catalog.root, repo_id, {"v1": ENVIRONMENTS})
    if shared_metadata:
        repo.upload_files("v1", {f"build/{name}/metadata.json": SHARED for name in ENVIRONMENTS})
    return repo_id


def _metadata_gets(hub: HubServer) -> list[str]:
    return [r.path for r in hub.log.snapshot() if r.method == "GET" and r.path.endswith("/metadata.json")]


def test_each_distinct_metadata_blob_is_fetched_once(
    catalog: Catalog, hub: HubServer, user_env: dict, project: Path
) -> None:
    """Four environments, four variants, one metadata.json blob: one read instead of four. The whole request
    log is the documented formula: 1 trust check + per kernel (refs + build tree + distinct blobs); the shared
    metadata.json was uploaded by hand (its builds are unsigned), the distinct builds each have their bundle."""
    shared, distinct = _repo(catalog, True), _repo(catalog, False)
    write_pyproject(project, f'"{shared}" = "v1"\n"{distinct}" = "v1"\n', environments=ENVIRONMENTS)
    hub.log.clear()
    lock = api.lock(project, hub=Hub(endpoint=hub.url, backoff=0.01)).lock
    assert [len(k.variants) for k in lock.kernels] == [4, 4]  # four variants each, as the environments ask
    gets = _metadata_gets(hub)
    assert sum(shared in path for path in gets) == 1
    assert sum(distinct in path for path in gets) == 4
    assert sum(r.path.endswith("/metadata.json.sigstore") for r in hub.log.snapshot()) == 4
    sources = {  # the signed builds' git files besides the signature's own two: each distinct blob read once
        f.hash
        for k in lock.kernels
        for v in k.variants
        if isinstance(v.signature, Signature)
        for f in v.files
        if f.algorithm == "git-sha1" and f.path not in ("metadata.json", "metadata.json.sigstore")
    }
    assert sources and not any(
        k.repo == shared and isinstance(v.signature, Signature) for k in lock.kernels for v in k.variants
    )
    log = [f"{r.method} {r.path}" for r in hub.log.snapshot()]
    assert len(hub.log) == 1 + 2 * 2 + 1 + 4 + 4 + len(sources), log
    assert not any(line.endswith(".so") for line in log)
