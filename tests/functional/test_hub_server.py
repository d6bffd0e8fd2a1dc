"""The test Hub server answers the real huggingface_hub and kernels clients (no mocks, real git repos)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
import wsgiref.simple_server
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from envs import clean_env
from installs import ROOT

from kernlock.testing import HubServer, make_app

_GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}
_BIG = bytes(range(256)) * 4096 * 24  # 24 MiB: above huggingface_hub's 10 MiB download chunk
_LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"


# ------------------------------------------------------------------------------------ a tiny git repo builder


@dataclass
class Repo:
    """A non-bare git repository with the test Hub's on-disk layout."""

    path: Path
    clock: int = 1_700_000_000

    @classmethod
    def init(cls, root: Path, kind: str, repo_id: str) -> Repo:
        repo = cls(root / kind / repo_id)
        repo.path.mkdir(parents=True)
        repo.git("init", "-q", "-b", "main")
        return repo

    def git(self, *args: str) -> str:
        self.clock += 60
        env = {**_GIT_ENV, "GIT_AUTHOR_DATE": f"@{self.clock} +0000", "GIT_COMMITTER_DATE": f"@{self.clock} +0000"}
        cmd = ["git", "-C", str(self.path), *args]
        return subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.strip()

    def write(self, rel: str, content: str | bytes) -> None:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)

    def write_lfs(self, rel: str, content: bytes) -> str:
        """Commit-ready LFS pointer at ``rel``, content in .git/lfs/objects; returns the sha256."""
        oid = hashlib.sha256(content).hexdigest()
        obj = self.path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(content)
        self.write(rel, _LFS_POINTER.format(oid=oid, size=len(content)))
        return oid

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


def _metadata(version: int) -> str:
    meta = {"id": f"_relu_cpu_v{version}", "name": "relu", "version": version, "license": "apache-2.0"}
    return json.dumps({**meta, "python-depends": [], "backend": {"type": "cpu"}})


def _kernel_init(version: int) -> str:
    return f"VERSION = {version}\n\n\ndef relu(x):\n    return x.clamp(min=0)\n"


@dataclass
class World:
    """The repos of the test root and the facts the tests check against."""

    root: Path
    relu: Repo
    shas: dict[str, str]
    so_v1: bytes
    so_v2: bytes


def build_world(root: Path) -> World:
    relu = Repo.init(root, "kernels", "acme/relu")
    shas: dict[str, str] = {}
    relu.write("README.md", "# relu\n")
    shas["main"] = relu.commit("Initial commit")
    relu.git("checkout", "-q", "-b", "v1")
    so_v1 = bytes(range(256)) * 20
    relu.write("build/torch-cpu/__init__.py", _kernel_init(1))
    relu.write("build/torch-cpu/metadata.json", _metadata(1))
    relu.write_lfs("build/torch-cpu/_relu.abi3.so", so_v1)
    relu.write("build/torch-universal/__init__.py", _kernel_init(1))
    shas["v1_first"] = relu.commit("Upload v1 builds\n\nFrom kernel-builder.")
    relu.write("build/torch-cpu/__init__.py", _kernel_init(1) + "# rebuilt\n")
    shas["v1"] = relu.commit("Rebuild v1")
    relu.git("tag", "v1.0.0", shas["v1_first"])
    relu.git("checkout", "-q", "-b", "v2", "main")
    so_v2 = b"v2-binary" * 700
    relu.write("build/torch-cpu/__init__.py", _kernel_init(2))
    relu.write("build/torch-cpu/metadata.json", _metadata(2))
    relu.write_lfs("build/torch-cpu/_relu.abi3.so", so_v2)
    shas["v2"] = relu.commit("Upload v2 builds")
    relu.git("tag", "-a", "v2.0.0", "-m", "Release 2.0.0")
    relu.git("update-ref", "refs/pr/1", shas["v1_first"])
    relu.git("checkout", "-q", "main")
    relu.write("UNCOMMITTED.txt", "work tree only\n")  # never served

    gelu = Repo.init(root, "kernels", "other/gelu")
    gelu.write("README.md", "# gelu\n")
    shas["gelu"] = gelu.commit("Initial commit")
    moving = Repo.init(root, "kernels", "acme/moving")
    moving.write("README.md", "one\n")
    shas["moving_1"] = moving.commit("One")
    big = Repo.init(root, "kernels", "acme/big")
    big.write_lfs("big.bin", _BIG)
    big.commit("Add a file larger than the client's download chunk")
    model = Repo.init(root, "models", "acme/tiny-model")
    model.write("config.json", '{"hidden_size": 4}\n')
    model.write_lfs("model.safetensors", b"weights" * 100)
    shas["model"] = model.commit("Add model")
    (root / "organizations.json").write_text(json.dumps({"acme": {"trustedKernelPublisher": True}}))
    return World(root, relu, shas, so_v1, so_v2)


# ------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("hub"))


@pytest.fixture(scope="module")
def server(world: World) -> Any:
    with HubServer(world.root, page_size=2) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_faults(server: HubServer) -> Any:
    server.faults.clear()
    yield
    server.faults.clear()


def run_client(server: HubServer, home: Path, code: str) -> Any:
    """Run ``code`` in a fresh interpreter pointed at the server; returns the JSON it prints last."""
    env = clean_env(**server.env(), HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"), KERNELS_CACHE=str(home / "k"))
    prelude = "import json, hashlib, os\nimport huggingface_hub as hh\napi = hh.HfApi()\n"
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """Plain urllib request; HTTP errors are returned, not raised."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


# -------------------------------------------------------------------------------- the API, through the client

_API_SCRIPT = """
def err(call):
    try:
        call()
    except Exception as e:  # the class name is what the test checks
        return type(e).__name__, getattr(getattr(e, "response", None), "status_code", None)
    return None

def files(entries):
    return [
        [e.path, type(e).__name__, getattr(e, "size", None), e.lfs.sha256 if getattr(e, "lfs", None) else None]
        for e in entries
    ]

out = {}
refs = api.list_repo_refs("acme/relu", repo_type="kernel", include_pull_requests=True)
out["branches"] = {b.name: [b.ref, b.target_commit] for b in refs.branches}
out["tags"] = {t.name: [t.ref, t.target_commit] for t in refs.tags}
out["prs"] = {p.name: p.target_commit for p in refs.pull_requests}
out["converts"] = refs.converts
out["tree_root"] = files(api.list_repo_tree("acme/relu", repo_type="kernel", revision="v1"))
out["tree_all"] = files(api.list_repo_tree("acme/relu", repo_type="kernel", revision="v1", recursive=True))
out["tree_sub"] = files(
    api.list_repo_tree("acme/relu", "build/torch-cpu", repo_type="kernel", revision="refs/heads/v1")
)
expanded = list(api.list_repo_tree("acme/relu", "build", repo_type="kernel", revision="v1", expand=True))
out["expand"] = [e.last_commit.oid for e in expanded]
revs = ["v1", "v1.0.0", "v2.0.0", "refs/heads/v1", "refs/tags/v2.0.0", "refs/pr/1", SHAS["v1_first"]]
out["info"] = {rev: api.kernel_info("acme/relu", revision=rev).sha for rev in revs}
info = api.kernel_info("acme/relu")
out["default"] = [info.id, info.sha, info.last_modified.isoformat(), info.private]
out["repo_info"] = api.repo_info("acme/relu", repo_type="kernel", revision="v2").sha
model = api.model_info("acme/tiny-model", files_metadata=True)
out["model"] = [model.sha, sorted((s.rfilename, s.size, s.lfs.sha256 if s.lfs else None) for s in model.siblings)]
out["commits"] = [
    [c.commit_id, c.title, c.message, c.authors, c.created_at.isoformat()]
    for c in api.list_repo_commits("acme/relu", repo_type="kernel", revision="v1")
]
paths = ["build/torch-cpu/_relu.abi3.so", "build", "missing.txt", "README.md"]
out["paths_info"] = files(api.get_paths_info("acme/relu", paths, repo_type="kernel", revision="v1"))
out["overview"] = {o: api.get_organization_overview(o).trustedKernelPublisher for o in ["acme", "other"]}
out["errors"] = {
    "no_repo": err(lambda: api.kernel_info("acme/nope")),
    "no_rev": err(lambda: api.kernel_info("acme/relu", revision="v9")),
    "short_sha": err(lambda: api.kernel_info("acme/relu", revision=SHAS["v1"][:7])),
    "no_tree_rev": err(lambda: list(api.list_repo_tree("acme/relu", repo_type="kernel", revision="v9"))),
    "no_org": err(lambda: api.get_organization_overview("nobody")),
    "no_file": err(
        lambda: hh.hf_hub_download("acme/relu", "nope.txt", repo_type="kernel", revision="v1")
    ),
    "no_file_repo": err(lambda: hh.hf_hub_download("acme/nope", "x.txt", repo_type="kernel")),
    "no_file_rev": err(lambda: hh.hf_hub_download("acme/relu", "README.md", repo_type="kernel", revision="v9")),
}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def api_out(server: HubServer, world: World, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    code = f"SHAS = {world.shas!r}\n" + _API_SCRIPT
    return run_client(server, tmp_path_factory.mktemp("client"), code)


@pytest.mark.subprocess
def test_refs_peel_both_tag_kinds(api_out: dict[str, Any], world: World) -> None:
    shas = world.shas
    assert api_out["branches"] == {
        "main": ["refs/heads/main", shas["main"]],
        "v1": ["refs/heads/v1", shas["v1"]],
        "v2": ["refs/heads/v2", shas["v2"]],
    }
    assert api_out["tags"] == {
        "v1.0.0": ["refs/tags/v1.0.0", shas["v1_first"]],
        "v2.0.0": ["refs/tags/v2.0.0", shas["v2"]],
    }
    assert api_out["prs"] == {"1": shas["v1_first"]}
    assert api_out["converts"] == []


@pytest.mark.subprocess
def test_tree_listings_are_paged_and_carry_lfs(api_out: dict[str, Any], world: World) -> None:
    lfs_oid = hashlib.sha256(world.so_v1).hexdigest()
    assert api_out["tree_root"] == [["README.md", "RepoFile", 7, None], ["build", "RepoFolder", None, None]]
    assert api_out["tree_all"] == [
        ["README.md", "RepoFile", 7, None],
        ["build", "RepoFolder", None, None],
        ["build/torch-cpu", "RepoFolder", None, None],
        ["build/torch-cpu/__init__.py", "RepoFile", len(_kernel_init(1)) + 10, None],
        ["build/torch-cpu/_relu.abi3.so", "RepoFile", len(world.so_v1), lfs_oid],
        ["build/torch-cpu/metadata.json", "RepoFile", len(_metadata(1)), None],
        ["build/torch-universal", "RepoFolder", None, None],
        ["build/torch-universal/__init__.py", "RepoFile", len(_kernel_init(1)), None],
    ]
    assert [p for p, *_ in api_out["tree_sub"]] == [
        "build/torch-cpu/__init__.py",
        "build/torch-cpu/_relu.abi3.so",
        "build/torch-cpu/metadata.json",
    ]
    assert api_out["expand"] == [world.shas["v1"], world.shas["v1_first"]]


@pytest.mark.subprocess
def test_info_by_branch_tag_commit_and_ref(api_out: dict[str, Any], world: World) -> None:
    shas = world.shas
    assert api_out["info"] == {
        "v1": shas["v1"],
        "v1.0.0": shas["v1_first"],
        "v2.0.0": shas["v2"],
        "refs/heads/v1": shas["v1"],
        "refs/tags/v2.0.0": shas["v2"],
        "refs/pr/1": shas["v1_first"],
        shas["v1_first"]: shas["v1_first"],
    }
    assert api_out["default"][:2] == ["acme/relu", shas["main"]]
    assert api_out["default"][3] is False
    assert api_out["repo_info"] == shas["v2"]
    weights = hashlib.sha256(b"weights" * 100).hexdigest()
    assert api_out["model"] == [shas["model"], [["config.json", 19, None], ["model.safetensors", 700, weights]]]


@pytest.mark.subprocess
def test_commits_and_paths_info(api_out: dict[str, Any], world: World) -> None:
    shas = world.shas
    commits = api_out["commits"]
    assert [c[0] for c in commits] == [shas["v1"], shas["v1_first"], shas["main"]]
    assert commits[1][1:4] == ["Upload v1 builds", "From kernel-builder.", ["Ada"]]
    assert commits[0][4].endswith("+00:00")
    assert api_out["paths_info"] == [
        ["build/torch-cpu/_relu.abi3.so", "RepoFile", len(world.so_v1), hashlib.sha256(world.so_v1).hexdigest()],
        ["build", "RepoFolder", None, None],
        ["README.md", "RepoFile", 7, None],
    ]


def test_commit_listings_are_paged_by_number_as_the_hub_pages_them(server: HubServer, world: World) -> None:
    """`GET .../commits/{rev}`: page ``p`` (from 0) of ``limit`` commits, a ``Link`` to page ``p + 1`` while more
    follow (the page size of this server is 2; 50 on a default one); what list_repo_commits above followed."""
    shas = world.shas
    url = f"{server.url}/api/kernels/acme/relu/commits/v1"
    status, headers, body = fetch(url)
    assert status == 200 and [c["id"] for c in json.loads(body)] == [shas["v1"], shas["v1_first"]]
    assert headers["Link"] == f'<{url}?p=1>; rel="next"'
    status, headers, body = fetch(f"{url}?p=1")
    assert status == 200 and [c["id"] for c in json.loads(body)] == [shas["main"]] and "Link" not in headers
    status, headers, body = fetch(f"{url}?limit=1&p=2")
    assert [c["id"] for c in json.loads(body)] == [shas["main"]] and "Link" not in headers
    status, headers, _ = fetch(f"{url}?limit=1")
    assert headers["Link"] == f'<{url}?limit=1&p=1>; rel="next"'
    assert fetch(f"{url}?p=x")[0] == 400 and fetch(f"{url}?limit=0")[0] == 400


@pytest.mark.subprocess
def test_org_overview_trust(api_out: dict[str, Any]) -> None:
    assert api_out["overview"] == {"acme": True, "other": False}


@pytest.mark.subprocess
def test_errors_map_to_client_exceptions(api_out: dict[str, Any]) -> None:
    assert api_out["errors"] == {
        "no_repo": ["RepositoryNotFoundError", 404],
        "no_rev": ["RevisionNotFoundError", 404],
        "short_sha": ["RevisionNotFoundError", 404],
        "no_tree_rev": ["RevisionNotFoundError", 404],
        "no_org": ["HfHubHTTPError", 404],
        "no_file": ["RemoteEntryNotFoundError", 404],
        "no_file_repo": ["RepositoryNotFoundError", 404],
        "no_file_rev": ["RevisionNotFoundError", 404],
    }


# ------------------------------------------------------------------------------------------------- downloads

_DOWNLOAD_SCRIPT = """
def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()

def snap(revision, patterns):
    folder = hh.snapshot_download("acme/relu", repo_type="kernel", revision=revision, allow_patterns=patterns)
    return sorted(
        os.path.relpath(os.path.join(d, f), folder).replace(os.sep, "/") for d, _, fs in os.walk(folder) for f in fs
    ), open(os.path.join(folder, "build/torch-cpu/__init__.py")).read(), os.path.basename(folder)

out = {}
so = hh.hf_hub_download("acme/relu", "build/torch-cpu/_relu.abi3.so", repo_type="kernel", revision="v1")
out["so_v1"] = [sha256(so), os.path.getsize(so)]
out["snap_branch"] = snap("v1", ["build/torch-cpu/*"])
out["snap_tag"] = snap("v2.0.0", ["build/torch-cpu/*.py"])
out["so_v2_via_ref"] = sha256(
    hh.hf_hub_download("acme/relu", "build/torch-cpu/_relu.abi3.so", repo_type="kernel", revision="refs/heads/v2")
)
out["snap_commit"] = snap(SHAS["v1_first"], ["build/torch-cpu/__init__.py", "README.md"])
out["snap_slash"] = snap("refs/heads/v1", ["*.md", "build/torch-cpu/__init__.py"])
out["main_files"] = sorted(os.listdir(hh.snapshot_download("acme/relu", repo_type="kernel")))
print(json.dumps(out))
"""


@pytest.mark.subprocess
def test_downloads_by_branch_tag_commit_and_slash_revision(server: HubServer, world: World, tmp_path: Path) -> None:
    out = run_client(server, tmp_path, f"SHAS = {world.shas!r}\n" + _DOWNLOAD_SCRIPT)
    assert out["so_v1"] == [hashlib.sha256(world.so_v1).hexdigest(), len(world.so_v1)]
    assert out["so_v2_via_ref"] == hashlib.sha256(world.so_v2).hexdigest()
    cpu = ["build/torch-cpu/__init__.py", "build/torch-cpu/_relu.abi3.so", "build/torch-cpu/metadata.json"]
    assert out["snap_branch"] == [cpu, _kernel_init(1) + "# rebuilt\n", world.shas["v1"]]
    assert out["snap_tag"] == [[cpu[0]], _kernel_init(2), world.shas["v2"]]
    assert out["snap_commit"] == [["README.md", cpu[0]], _kernel_init(1), world.shas["v1_first"]]
    assert out["snap_slash"] == [["README.md", *cpu], _kernel_init(1) + "# rebuilt\n", world.shas["v1"]]
    assert out["main_files"] == ["README.md"]  # the uncommitted file of the work tree is not served


@pytest.mark.subprocess
def test_kernels_get_kernel_loads_through_the_server(server: HubServer, tmp_path: Path) -> None:
    code = """
    import kernels
    relu = kernels.get_kernel("acme/relu", version=2)
    print(json.dumps({"version": relu.VERSION}))
    """
    assert run_client(server, tmp_path, code) == {"version": 2}
    assert server.log.count("GET", "/api/organizations/acme/overview") >= 1


# ------------------------------------------------------------------------------------------- live repository


def test_branch_moved_while_serving_is_seen(server: HubServer, world: World, tmp_path: Path) -> None:
    moving = Repo(world.root / "kernels" / "acme" / "moving")
    url = f"{server.url}/api/kernels/acme/moving/revision/main"
    assert json.loads(fetch(url)[2])["sha"] == world.shas["moving_1"]
    moving.write("README.md", "two\n")
    second = moving.commit("Two")
    assert json.loads(fetch(url)[2])["sha"] == second
    status, headers, body = fetch(f"{server.url}/kernels/acme/moving/resolve/main/README.md")
    assert (status, headers["X-Repo-Commit"], body) == (200, second, b"two\n")
    moving.git("branch", "v1", world.shas["moving_1"])
    assert branches(server, "acme/moving") == {"main": second, "v1": world.shas["moving_1"]}
    moving.git("pack-refs", "--all")
    moving.git("update-ref", "refs/heads/v1", second)
    assert branches(server, "acme/moving") == {"main": second, "v1": second}
    moving.git("branch", "-D", "v1")
    assert branches(server, "acme/moving") == {"main": second}


def branches(server: HubServer, repo_id: str) -> dict[str, str]:
    refs = json.loads(fetch(f"{server.url}/api/kernels/{repo_id}/refs")[2])
    return {b["name"]: b["targetCommit"] for b in refs["branches"]}


def test_make_app_runs_under_another_wsgi_server(world: World) -> None:
    httpd = wsgiref.simple_server.make_server("127.0.0.1", 0, make_app(world.root), handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{httpd.server_port}"
        info = json.loads(fetch(f"{base}/api/kernels/acme/relu/revision/refs%2Fheads%2Fv2")[2])
        assert info["sha"] == world.shas["v2"]
        assert fetch(f"{base}/kernels/acme/relu/resolve/v2/build/torch-cpu/_relu.abi3.so")[2] == world.so_v2
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


# --------------------------------------------------------------------------------------- raw HTTP behaviour


def test_resolve_headers_and_ranges(server: HubServer, world: World) -> None:
    base = f"{server.url}/kernels/acme/relu/resolve/v1/build/torch-cpu/_relu.abi3.so"
    oid = hashlib.sha256(world.so_v1).hexdigest()
    status, headers, body = fetch(base, "HEAD")
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == world.shas["v1"]
    assert headers["ETag"] == headers["X-Linked-Etag"] == f'"{oid}"'
    assert headers["X-Linked-Size"] == headers["Content-Length"] == str(len(world.so_v1))
    assert not any(h.lower().startswith("x-xet") for h in headers)
    status, headers, body = fetch(base, headers={"Range": "bytes=100-"})
    assert (status, body) == (206, world.so_v1[100:])
    assert headers["Content-Range"] == f"bytes 100-{len(world.so_v1) - 1}/{len(world.so_v1)}"
    status, headers, body = fetch(base, headers={"Range": "bytes=10-19"})
    assert (status, body, headers["Content-Length"]) == (206, world.so_v1[10:20], "10")
    assert fetch(base, headers={"Range": f"bytes={len(world.so_v1)}-"})[0] == 416
    readme = f"{server.url}/kernels/acme/relu/resolve/{world.shas['main']}/README.md"
    status, headers, body = fetch(readme)
    blob = world.relu.git("rev-parse", f"{world.shas['main']}:README.md")
    assert (status, headers["ETag"], body) == (200, f'"{blob}"', b"# relu\n")
    status, headers, _ = fetch(f"{server.url}/kernels/acme/relu/resolve/v1/nope.txt")
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (404, "EntryNotFound", world.shas["v1"])
    model = f"{server.url}/acme/tiny-model/resolve/main/config.json"
    assert fetch(model)[2] == b'{"hidden_size": 4}\n'


def test_unknown_routes_and_agent_harnesses(server: HubServer) -> None:
    status, _, body = fetch(f"{server.url}/api/whatever")
    assert status == 404 and "error" in json.loads(body)
    assert json.loads(fetch(f"{server.url}/api/agent-harnesses")[2]) == {"standardEnvVars": [], "harnesses": {}}
    assert fetch(f"{server.url}/api/kernels/acme/relu/paths-info/v1")[0] == 405


def test_keep_alive_serves_many_requests_on_one_connection(server: HubServer) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    for _ in range(20):
        conn.request("GET", "/api/kernels/acme/relu/refs")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["branches"]
    sock = conn.sock
    conn.request("GET", "/api/kernels/acme/relu")
    conn.getresponse().read()
    assert conn.sock is sock
    conn.close()


# ------------------------------------------------------------------------------------- log and fault injection


@pytest.mark.subprocess
def test_log_counts_the_requests_of_known_client_calls(server: HubServer, tmp_path: Path) -> None:
    code = """
    api.kernel_info("acme/relu", revision="v1")
    for _ in range(2):
        hh.hf_hub_download("acme/relu", "README.md", repo_type="kernel", revision="v1")
    print(json.dumps({}))
    """
    server.log.clear()
    run_client(server, tmp_path, code)
    assert server.log.count(contains="/api/kernels/") == 1
    assert server.log.count("GET", "/api/kernels/acme/relu/revision/v1") == 1
    assert server.log.count("HEAD", "/kernels/acme/relu/resolve/v1/README.md") == 2
    assert server.log.count("GET", "/kernels/acme/relu/resolve/v1/README.md") == 1
    assert len(server.log) == server.log.count(contains="/resolve/") + 1 + server.log.count(contains="agent")
    assert all(entry.status == 200 for entry in server.log.snapshot())


def test_injected_status_with_retry_after(server: HubServer) -> None:
    server.faults.status(429, match="/refs", retry_after=2.5)
    url = f"{server.url}/api/kernels/acme/relu/refs"
    status, headers, body = fetch(url)
    assert (status, headers["Retry-After"]) == (429, "3")
    assert "error" in json.loads(body)
    assert fetch(url)[0] == 200
    assert [e.status for e in server.log.snapshot()[-2:]] == [429, 200]


def test_injected_latency_delays_only_matching_requests(server: HubServer) -> None:
    """An overview that arrived first is answered after a refs request that came later: only it was delayed."""
    server.faults.latency(2.0, match="overview")
    server.log.clear()
    slow = threading.Thread(target=fetch, args=(f"{server.url}/api/organizations/acme/overview",))
    slow.start()
    time.sleep(0.2)  # let the overview request arrive first (not a measurement)
    assert fetch(f"{server.url}/api/kernels/acme/relu/refs")[0] == 200
    slow.join()
    refs, overview = server.log.snapshot()
    assert (refs.path, overview.path) == ("/api/kernels/acme/relu/refs", "/api/organizations/acme/overview")
    assert overview.started < refs.started and overview.status == 200


_PARALLEL_INFO = """
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(8) as pool:
    shas = list(pool.map(lambda _: api.kernel_info("acme/relu", revision="v1").sha, range(8)))
print(json.dumps(shas))
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("cap", [2, None], ids=["max_concurrent=2", "uncapped"])
def test_max_concurrent_caps_what_one_client_is_served_at_once(world: World, tmp_path: Path, cap: int | None) -> None:
    """A rate-limited Hub (issue 12): with ``max_concurrent=2``, eight parallel requests of the real client (each
    held 0.4 s by injected latency) are never more than two at the server at once; the others wait for a slot
    (no 429) and every one is answered. Uncapped, the same requests overlap beyond two: the count sees real
    parallelism, so the cap is what holds it at two."""
    with HubServer(world.root, max_concurrent=cap) as hub:
        hub.faults.latency(0.4, match="/revision/")
        shas = run_client(hub, tmp_path, _PARALLEL_INFO)
        answered = [e.status for e in hub.log.snapshot() if "/revision/" in e.path]
        concurrency = hub.concurrency
        assert (concurrency.limit, concurrency.in_flight) == (cap, 0)
        if cap is None:
            assert concurrency.peak > 2 and concurrency.queued == 0
        else:
            assert concurrency.peak == 2 and concurrency.queued > 0
        concurrency.clear()
        assert (concurrency.peak, concurrency.queued) == (0, 0)
    assert shas == [world.shas["v1"]] * 8
    assert answered == [200] * 8


def test_dropped_connection(server: HubServer) -> None:
    server.faults.drop(match="/refs")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(f"{server.url}/api/kernels/acme/relu/refs", timeout=10)
    assert server.log.snapshot()[-1].status == 0
    assert fetch(f"{server.url}/api/kernels/acme/relu/refs")[0] == 200


def test_truncated_body(server: HubServer, world: World) -> None:
    server.faults.truncate(match="resolve/v1/build/torch-cpu/_relu")
    with (
        pytest.raises(http.client.IncompleteRead),
        urllib.request.urlopen(f"{server.url}/kernels/acme/relu/resolve/v1/build/torch-cpu/_relu.abi3.so") as resp,
    ):
        resp.read()
    assert fetch(f"{server.url}/kernels/acme/relu/resolve/v1/build/torch-cpu/_relu.abi3.so")[2] == world.so_v1


def test_rewrite_changes_the_real_answer(server: HubServer, world: World) -> None:
    refs_url = f"{server.url}/api/kernels/acme/relu/refs"
    so_url = f"{server.url}/kernels/acme/relu/resolve/v1/build/torch-cpu/_relu.abi3.so"

    def hostile_refs(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list, bytes]:
        data = json.loads(body)
        data["branches"][0]["targetCommit"] = "/tmp/evil"
        return status, headers, json.dumps(data).encode()

    server.faults.rewrite(hostile_refs, match="/refs", times=1)
    status, headers, body = fetch(refs_url)
    assert status == 200 and json.loads(body)["branches"][0]["targetCommit"] == "/tmp/evil"
    assert headers["Content-Length"] == str(len(body))  # recomputed for the new body
    assert json.loads(fetch(refs_url)[2])["branches"][0]["targetCommit"] != "/tmp/evil"  # times=1: used up

    server.faults.rewrite(lambda status, headers, body: (203, headers, body[::-1]), match="_relu")  # every time
    for _ in range(2):
        status, headers, body = fetch(so_url)
        assert (status, body) == (203, world.so_v1[::-1])
    assert fetch(so_url, method="HEAD")[1]["Content-Length"] == str(len(world.so_v1))
    server.faults.clear()

    # a Content-Length of its own: announced as given, then the connection is closed
    longer = str(len(world.so_v1) + 10)
    server.faults.rewrite(lambda s, h, b: (s, [*h, ("Content-Length", longer)], b), match="_relu", times=1)
    with pytest.raises(http.client.IncompleteRead), urllib.request.urlopen(so_url, timeout=10) as resp:
        resp.read()
    server.faults.rewrite(lambda s, h, b: (s, [*h, ("Content-Length", "5")], b), match="_relu", times=1)
    status, headers, body = fetch(so_url)
    assert (status, body, headers["Connection"]) == (200, world.so_v1[:5], "close")
    assert fetch(so_url)[2] == world.so_v1  # the server answers normally afterwards
    assert [e.status for e in server.log.snapshot()[-4:]] == [203, 200, 200, 200]  # the HEAD was rewritten too
    with pytest.raises(TypeError):
        server.faults.rewrite("not callable")  # type: ignore[arg-type]


@pytest.mark.subprocess
def test_client_retries_and_raises_on_injected_faults(server: HubServer, world: World, tmp_path: Path) -> None:
    server.faults.status(500, match="/tree/")
    server.faults.status(503, times=None, match="/revision/v2")
    server.faults.truncate(times=2, match="/big.bin")  # the HEAD (no body), then the GET
    code = """
    out = {"tree": [e.path for e in api.list_repo_tree("acme/relu", repo_type="kernel", revision="v1")]}
    try:
        api.kernel_info("acme/relu", revision="v2")
    except hh.errors.HfHubHTTPError as e:
        out["info"] = e.response.status_code
    big = hh.hf_hub_download("acme/big", "big.bin", repo_type="kernel")
    out["big"] = hashlib.sha256(open(big, "rb").read()).hexdigest()
    print(json.dumps(out))
    """
    server.log.clear()
    out = run_client(server, tmp_path, code)
    assert out == {"tree": ["README.md", "build"], "info": 503, "big": hashlib.sha256(_BIG).hexdigest()}
    tree = [e.status for e in server.log.snapshot() if "/tree/" in e.path]
    assert tree == [500, 200]
    downloads = [(e.method, e.status) for e in server.log.snapshot() if "big.bin" in e.path]
    assert downloads == [("HEAD", 200), ("GET", 200), ("GET", 206)]  # truncated, then resumed with a Range


# ------------------------------------------------------------------------------------------------------- CLI


@pytest.mark.subprocess
def test_cli_prints_a_url_that_answers(world: World) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernlock.testing", str(world.root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        body = json.loads(fetch(f"{url}/api/kernels/acme/relu/revision/v2")[2])
        assert body["sha"] == world.shas["v2"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_testing_hub_example_passes_under_pytest(tmp_path: Path) -> None:
    """docs/testing-hub.md's example is what a user copies into their CI: as written, it passes under pytest."""
    page = (ROOT / "docs" / "testing-hub.md").read_text()
    [example] = [block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "def test_" in block]
    (tmp_path / "test_with_a_local_hub.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_with_a_local_hub.py"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
