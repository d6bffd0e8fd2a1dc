"""The Hub edge (kernlock/hub/client.py, hubhttp.py, hubdownload.py): a broken or hostile Hub, persistent and transient
faults, a dead endpoint.

Every case runs the real CLI in a fresh process against the local Hub, whose answers are rewritten
(``faults.rewrite``) or faulted (``faults.status/drop/truncate``): the command ends with exit 1 and one `error:`
line naming the Hub URL, no traceback, nothing half-written and nothing outside the test's folder; request counts
come from the server's log (never wall-clock time).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from projects import CPU_ENV, has_receipt, write_pyproject
from users import give_away

from kernlock.hub.answers import MAX_LISTING, MAX_READ
from kernlock.hub.client import Hub
from kernlock.hub.http import COMMAND_RETRIES, DEFAULT_RETRIES
from kernlock.lock import file as lockfile
from kernlock.sync import cache as caches
from kernlock.sync import engine as syncing
from kernlock.testing import Catalog, HubServer
from kernlock.testing.server import Transform
from kernlock.util import interrupt

ACTIVATION = "kernels-community/activation"
ROTARY = "kernels-community/rotary"
VARIANT = f"build/{CPU_ENV}"
ATTEMPTS = DEFAULT_RETRIES + 1


# -- helpers -------------------------------------------------------------------------------------------------


def _json_rewrite(change: Callable[[Any], Any]) -> Transform:
    """A transform that rewrites a JSON answer (errors pass through unchanged)."""

    def transform(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        if status != 200:
            return status, headers, body
        return status, headers, json.dumps(change(json.loads(body))).encode()

    return transform


def _tree(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Transform:
    return _json_rewrite(change)


def _entry(entries: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return next(e for e in entries if e["path"] == f"{VARIANT}/{suffix}")


def _set(suffix: str, **fields: Any) -> Transform:
    """Tree listing: set ``fields`` on the CPU variant's file ``suffix``."""

    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _entry(entries, suffix).update(fields)
        return entries

    return _tree(change)


def _set_lfs(**fields: Any) -> Transform:
    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        so = next(e for e in entries if e["path"].startswith(VARIANT) and e["path"].endswith(".so"))
        so["lfs"].update(fields)
        return entries

    return _tree(change)


def _add(path: str, **fields: Any) -> Transform:
    """Tree listing: add a file entry."""

    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        entry = {"type": "file", "oid": "ab" * 20, "size": 10, "path": path, **fields}
        return [*entries, entry]

    return _tree(change)


def _refs(change: Callable[[dict[str, Any]], None]) -> Transform:
    def apply(data: dict[str, Any]) -> dict[str, Any]:
        change(data)
        return data

    return _json_rewrite(apply)


def _branch(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in data["branches"] if b["name"] == name)


def _body(body: bytes) -> Transform:
    return lambda status, headers, _body: (200, headers, body)


def _one_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 1 and exactly one line on stderr, `error: ...`, holding every needle; no traceback."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _lock(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_cli("lock", "--project", str(project), env=env)


def _sync(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_cli("sync", "--project", str(project), env=env)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _files_outside(root: Path) -> list[Path]:
    return sorted(root.rglob("*")) if root.exists() else []


# -- a malicious Hub -------------------------------------------------------------------------------------------

# (id, request it rewrites, transform factory taking the sentinel folder, words of the error, requirement)
HOSTILE: list[tuple[str, str, Callable[[Path], Transform], str]] = [
    ("refs-non-sha", "/refs", lambda out: _refs(lambda d: _branch(d, "v1").update(targetCommit="v1")), "commit id"),
    ("refs-abs-path", "/refs", lambda out: _refs(lambda d: _branch(d, "v1").update(targetCommit=str(out))), "commit"),
    (
        "refs-traversal",
        "/refs",
        lambda out: _refs(lambda d: _branch(d, "v1").update(targetCommit=f"../../../../{out}")),
        "invalid commit id",
    ),
    ("refs-not-json", "/refs", lambda out: _body(b"<html>proxy error</html>"), "not JSON"),
    ("refs-not-an-object", "/refs", lambda out: _body(b"[1, 2]"), "without a list of branches"),
    ("tree-parent", "/tree/", lambda out: _set("__init__.py", path=f"{VARIANT}/../../x"), "not a plain relative"),
    ("tree-top-parent", "/tree/", lambda out: _set("__init__.py", path="../x"), "outside build/"),
    ("tree-absolute", "/tree/", lambda out: _set("__init__.py", path=str(out / "x")), "outside build/"),
    ("tree-abs-in-variant", "/tree/", lambda out: _set("__init__.py", path=f"{VARIANT}/{out}/x"), "relative"),
    ("tree-dot", "/tree/", lambda out: _set("__init__.py", path=f"{VARIANT}/./__init__.py"), "relative"),
    ("tree-nul", "/tree/", lambda out: _set("__init__.py", path=f"{VARIANT}/__init__\x00.py"), "relative"),
    ("tree-backslash", "/tree/", lambda out: _set("__init__.py", path=f"{VARIANT}/..\\..\\x.py"), "relative"),
    ("tree-pycache", "/tree/", lambda out: _add(f"{VARIANT}/__pycache__/x.pyc"), "__pycache__"),
    ("tree-twice", "/tree/", lambda out: _add(f"{VARIANT}/__INIT__.py"), "twice"),
    ("tree-file-and-folder", "/tree/", lambda out: _add(f"{VARIANT}/layers.py/x.py"), "both as a file"),
    ("tree-negative-size", "/tree/", lambda out: _set("__init__.py", size=-1), "file size"),
    ("tree-bool-size", "/tree/", lambda out: _set("__init__.py", size=True), "file size"),
    ("tree-huge-size", "/tree/", lambda out: _set("__init__.py", size=2**41), "file size"),
    ("tree-string-size", "/tree/", lambda out: _set("__init__.py", size="1344"), "file size"),
    ("tree-bad-blob-id", "/tree/", lambda out: _set("__init__.py", oid=str(out)), "blob id"),
    ("tree-bad-lfs-sha", "/tree/", lambda out: _set_lfs(oid="zz" * 32), "LFS sha256"),
    ("tree-short-lfs-sha", "/tree/", lambda out: _set_lfs(oid="ab" * 20), "LFS sha256"),
    ("tree-lfs-size", "/tree/", lambda out: _set_lfs(size=-4096), "file size"),
    # a regex `$` also matches before a final newline: ids and paths with one appended are refused too
    (
        "refs-sha-newline",
        "/refs",
        lambda out: _refs(lambda d: _branch(d, "v1").update(targetCommit="a" * 40 + "\n")),
        "commit",
    ),
    ("tree-blob-id-newline", "/tree/", lambda out: _set("__init__.py", oid="ab" * 20 + "\n"), "blob id"),
    ("tree-lfs-sha-newline", "/tree/", lambda out: _set_lfs(oid="ab" * 32 + "\n"), "LFS sha256"),
    ("tree-path-newline", "/tree/", lambda out: _set("__init__.py", path=f"{VARIANT}/__init__.py\n"), "relative"),
    ("tree-no-path", "/tree/", lambda out: _tree(lambda entries: [*entries, {"type": "file"}]), "without a path"),
    ("tree-not-a-list", "/tree/", lambda out: _body(b'{"evil": 1}'), "not a list"),
    (
        "tree-huge-listing",
        "/tree/",
        lambda out: _body(
            json.dumps(
                [{"type": "directory", "oid": "0" * 40, "path": f"build/d{i}"} for i in range(MAX_LISTING + 1)]
            ).encode()
        ),
        f"more than {MAX_LISTING} entries",
    ),
    (
        "tree-next-page-elsewhere",
        "/tree/",
        lambda out: (
            lambda status, headers, body: (
                status,
                [*headers, ("Link", '<http://evil.example/steal?cursor=1>; rel="next"')],
                body,
            )
        ),
        "another host",
    ),
    ("oversized-metadata", "metadata.json$", lambda out: _body(b" " * (MAX_READ + 1)), f"more than {MAX_READ} bytes"),
]


@pytest.mark.subprocess
@pytest.mark.parametrize(("match", "make", "words"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_malicious_hub_answers_end_in_one_error_line(
    hub: HubServer,
    user_env: dict[str, str],
    project: Path,
    tmp_path: Path,
    outside: Path,
    match: str,
    make: Callable[[Path], Transform],
    words: str,
):
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    hub.faults.rewrite(make(outside), match=match)
    result = _lock(project, user_env)
    _one_error(result, hub.url, words)
    assert not (project / "kernels.lock").exists()
    assert not outside.exists()
    assert not any(".." in p.name or "\\" in p.name for p in _files_outside(tmp_path))
    assert hub.log.count(contains=match.rstrip("$")) >= 1


@pytest.mark.subprocess
def test_malicious_commit_listing(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, outside: Path
):
    """A short sha is resolved through the commit listing, whose ids are checked like every other commit."""
    short = catalog.repo(ACTIVATION).head("v1")[:8]
    write_pyproject(project, f'"{ACTIVATION}" = "{short}"\n', [CPU_ENV])
    hub.faults.rewrite(_json_rewrite(lambda items: [{**c, "id": str(outside)} for c in items]), match="/commits/")
    _one_error(_lock(project, user_env), hub.url, "invalid commit id", ACTIVATION)
    assert not (project / "kernels.lock").exists() and not outside.exists()
    hub.faults.clear()
    ok = _lock(project, user_env)  # the same lock against a healthy Hub: the listing is what was refused
    assert ok.returncode == 0, ok.stderr
    (entry,) = lockfile.read(project / "kernels.lock").kernels
    assert entry.commit == catalog.repo(ACTIVATION).head("v1")


@pytest.mark.subprocess
def test_what_the_loader_ignores_is_skipped(hub: HubServer, user_env: dict[str, str], project: Path):
    """Unsafe ref names are ignored; build/ entries that are no variant, and files directly in build/, are skipped."""

    def refs(data: dict[str, Any]) -> None:
        target = _branch(data, "v1")["targetCommit"]
        data["branches"] += [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": "not-a-sha"}
            for name in ("../evil", "/abs", "a\\b", "x\x00y", 7)
        ]
        data["tags"].append({"name": "..", "ref": "refs/tags/..", "targetCommit": target})

    def tree(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        extra = ["build/../x.py", "build/Not A Variant/x.py", "build/.hidden/x.py", "build/README.md"]
        return [*entries, *({"type": "file", "oid": "ab" * 20, "size": 1, "path": p} for p in extra)]

    hub.faults.rewrite(_refs(refs), match="/refs")
    hub.faults.rewrite(_tree(tree), match="/tree/")
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    result = _lock(project, user_env)
    assert result.returncode == 0, result.stderr
    (entry,) = lockfile.read(project / "kernels.lock").kernels
    assert [v.name for v in entry.variants] == [CPU_ENV]


@pytest.mark.subprocess
def test_poisoned_kernlock_cache_is_fetched_again(hub: HubServer, user_env: dict[str, str], project: Path):
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    assert _lock(project, user_env).returncode == 0
    good = (project / "kernels.lock").read_text()
    (entry,) = lockfile.read(project / "kernels.lock").kernels
    folder = Path(user_env["KERNLOCK_CACHE"]) / "hub" / "kernels-community--activation" / entry.commit
    tree = folder / "build-tree.json"
    data = json.loads(tree.read_text())
    data[CPU_ENV][0][0] = "../../../escaped.py"
    tree.write_text(json.dumps(data))
    metadata = folder / "files" / VARIANT / "metadata.json"
    metadata.write_bytes(b"{" * (MAX_READ + 1))  # larger than any answer read_file accepts
    _relock_asks_tree_and_metadata_once(project, user_env, hub, good)
    assert json.loads(tree.read_text())[CPU_ENV][0][0] != "../../../escaped.py"  # the cache is repaired


@pytest.mark.subprocess
@pytest.mark.parametrize("unsafe", ["group-writable", pytest.param("another user's", marks=pytest.mark.root)])
def test_an_answer_cache_others_could_write_is_not_trusted(
    hub: HubServer, user_env: dict[str, str], project: Path, unsafe: str
):
    """A forged build tree that passes every check (another file hash) steers the lock when it sits in the user's
    own cache, which only the user can write; in a cache folder others can write it is never read. (Signatures
    are off here: with them, the signed digest refuses this forgery at lock time,
    tests/functional/test_signatures.py.)"""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    with (project / "pyproject.toml").open("a") as handle:
        handle.write('\n[tool.kernlock.signatures]\nmode = "off"\n')
    assert _lock(project, user_env).returncode == 0
    good = (project / "kernels.lock").read_text()
    (entry,) = lockfile.read(project / "kernels.lock").kernels
    cache = Path(user_env["KERNLOCK_CACHE"]) / "hub"
    tree = cache / "kernels-community--activation" / entry.commit / "build-tree.json"
    data = json.loads(tree.read_text())
    forged = "sha256:" + "0" * 64
    data[CPU_ENV][0][2] = forged
    tree.write_text(json.dumps(data))
    (project / "kernels.lock").unlink()
    assert _lock(project, user_env).returncode == 0
    assert forged in (project / "kernels.lock").read_text()  # the forgery works where it can be written
    if unsafe == "group-writable":
        cache.chmod(0o775)
    else:
        give_away(cache)
    _relock_asks_tree_and_metadata_once(project, user_env, hub, good)
    assert forged in tree.read_text()  # and nothing is written there either


def _relock_asks_tree_and_metadata_once(project: Path, user_env: dict[str, str], hub: HubServer, good: str) -> None:
    """A lock made again from scratch is ``good`` byte for byte and asks the Hub once for the build tree and once
    for metadata.json (the cached answers were not used)."""
    (project / "kernels.lock").unlink()
    hub.log.clear()
    result = _lock(project, user_env)
    assert result.returncode == 0, result.stderr
    assert (project / "kernels.lock").read_text() == good
    assert hub.log.count(contains="/tree/") == 1 and hub.log.count(contains="metadata.json") == 1


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_answer_cache_that_cannot_be_written_costs_requests_not_the_lock(
    hub: HubServer, user_env: dict[str, str], project: Path
):
    """Folders hold the places of the cached build tree and metadata.json (a cache kernlock cannot write there):
    the lock still succeeds, byte for byte the same, and each such answer is simply asked again."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    assert _lock(project, user_env).returncode == 0
    good = (project / "kernels.lock").read_text()
    (entry,) = lockfile.read(project / "kernels.lock").kernels
    folder = Path(user_env["KERNLOCK_CACHE"]) / "hub" / "kernels-community--activation" / entry.commit
    for cached in (folder / "build-tree.json", folder / "files" / VARIANT / "metadata.json"):
        cached.unlink()
        (cached / "in-the-way").mkdir(parents=True)
    for _attempt in range(2):
        _relock_asks_tree_and_metadata_once(project, user_env, hub, good)


@pytest.mark.subprocess
def test_cache_symlink_out_of_the_cache_is_not_followed(
    hub: HubServer, user_env: dict[str, str], project: Path, outside: Path
):
    cache = Path(user_env["KERNLOCK_CACHE"]) / "hub"
    cache.mkdir(parents=True)
    (cache / "kernels-community--activation").symlink_to(outside, target_is_directory=True)
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    result = _lock(project, user_env)
    assert result.returncode == 0, result.stderr
    assert not outside.exists()


# -- persistent and transient faults ---------------------------------------------------------------------------

REQUESTS = {  # request type -> (regex the fault matches, command, the requirement's revision)
    "overview": ("/api/organizations/", "lock", "v1"),
    "refs": ("/api/kernels/.*/refs", "lock", "v1"),
    "tree": ("/tree/", "lock", "v1"),
    "commits": ("/commits/", "lock", "short"),
    "metadata": ("/resolve/.*metadata.json$", "lock", "v1"),
    "download": ("/resolve/", "sync", "v1"),
}
FAULTS: dict[str, Callable[[HubServer, str, int | None], None]] = {
    "429+retry-after": lambda s, m, n: s.faults.status(429, times=n, match=m, retry_after=0),
    "500": lambda s, m, n: s.faults.status(500, times=n, match=m, retry_after=0),
    "503-backoff": lambda s, m, n: s.faults.status(503, times=n, match=m),
    "drop": lambda s, m, n: s.faults.drop(times=n, match=m),
    "truncate": lambda s, m, n: s.faults.truncate(times=n, match=m),
}
PERSISTENT = [
    *((fault, request) for fault in ("429+retry-after", "500") for request in REQUESTS),
    ("503-backoff", "refs"),
    *(("drop", request) for request in ("refs", "download")),  # one code path for every API request
    *(("truncate", request) for request in ("tree", "download")),
]
MESSAGES = {
    "429+retry-after": "HTTP 429",
    "500": "HTTP 500",
    "503-backoff": "HTTP 503",
    "drop": "the Hub at",
    "truncate": "the Hub at",
}


def _prepare(catalog: Catalog, project: Path, env: dict[str, str], request: str) -> tuple[str, str]:
    """Write the project for ``request`` (locked already when the command is sync); (fault regex, command)."""
    match, command, rev = REQUESTS[request]
    if rev == "short":
        rev = catalog.repo(ACTIVATION).head("v1")[:8]
    write_pyproject(project, f'"{ACTIVATION}" = "{rev}"\n', [CPU_ENV])
    if command == "sync":
        locked = _lock(project, env)
        assert locked.returncode == 0, locked.stderr
    return match, command


def _matching(server: HubServer, match: str) -> int:
    return sum(1 for r in server.log.snapshot() if re.search(match, r.path))


@pytest.mark.subprocess
@pytest.mark.parametrize(("fault", "request_type"), PERSISTENT, ids=[f"{f}-{r}" for f, r in PERSISTENT])
def test_persistent_fault_ends_with_one_line_and_bounded_requests(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path, fault: str, request_type: str
):
    match, command = _prepare(catalog, project, user_env, request_type)
    before = (project / "kernels.lock").read_bytes() if command == "sync" else None
    hub.log.clear()
    FAULTS[fault](hub, match, None)
    result = run_cli(command, "--project", str(project), env=user_env)
    _one_error(result, hub.url, MESSAGES[fault])
    # the CPU variant's 6 files are fetched in parallel; every other request is one at a time (the commit
    # listings of the 3 branches too), so the first that fails for good ends the command
    distinct = 6 if request_type == "download" else 1
    assert _matching(hub, match) <= min(ATTEMPTS * distinct, distinct + COMMAND_RETRIES)
    assert len(hub.log) <= 7 + COMMAND_RETRIES  # the whole command: its requests plus the command's retries
    if command == "lock":
        assert not (project / "kernels.lock").exists()
    else:
        assert (project / "kernels.lock").read_bytes() == before
        lock = lockfile.read(project / "kernels.lock")
        assert not any(syncing.is_synced(e, v) for e, v in syncing.targets(lock, [CPU_ENV]))


TRANSIENT = [
    ("429+retry-after", "refs", 2),
    ("500", "tree", 1),
    ("503-backoff", "commits", 1),
    ("drop", "overview", 1),
    ("truncate", "metadata", 1),
    ("drop", "download", 2),
    ("truncate", "download", 2),
    ("500", "download", 2),
]


@pytest.mark.subprocess
@pytest.mark.parametrize(("fault", "request_type", "times"), TRANSIENT, ids=[f"{f}-{r}" for f, r, _ in TRANSIENT])
def test_transient_faults_are_survived(
    catalog: Catalog,
    hub: HubServer,
    user_env: dict[str, str],
    project: Path,
    fault: str,
    request_type: str,
    times: int,
):
    match, command = _prepare(catalog, project, user_env, request_type)
    hub.log.clear()
    FAULTS[fault](hub, match, times)
    result = run_cli(command, "--project", str(project), env=user_env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""
    distinct = {"download": 6, "commits": 3}.get(request_type, 1)  # files; commits: one listing per branch
    assert _matching(hub, match) == distinct + times  # each fault cost exactly one more request
    if command == "sync":
        verified = run_cli("verify", "--project", str(project), env=user_env)
        assert verified.returncode == 0, verified.stderr


@pytest.mark.subprocess
def test_parallel_tasks_share_one_failed_org_overview(hub: HubServer, user_env: dict[str, str], project: Path):
    """Two kernels of one org ask for the org's trust at once: the failure is remembered, not asked again."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n"{ROTARY}" = "v1"\n', [CPU_ENV])
    hub.faults.status(500, times=None, match="/api/organizations/", retry_after=0)
    _one_error(_lock(project, user_env), hub.url, "HTTP 500", "kernels-community")
    assert hub.log.count(contains="/api/organizations/") <= ATTEMPTS
    assert hub.log.count(contains="/api/kernels/") == 0


def test_cancel_stops_a_retry_wait(hub: HubServer, user_env: dict[str, str]):
    """A stopped command (SIGINT, a failed sibling task) ends a backoff wait at once, never as a HubError."""
    hub.faults.status(503, times=None, match="/refs")
    timer = threading.Timer(0.2, interrupt.cancel)
    timer.start()
    try:
        with pytest.raises(interrupt.Cancelled):
            Hub(endpoint=hub.url, backoff=5.0).refs(ACTIVATION)  # waits 5 s, then 10 s, unless cancelled
    finally:
        timer.cancel()
        interrupt.reset()
    assert hub.log.count(contains="/refs") == 1


# -- a dead endpoint -------------------------------------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.parametrize("command", ["lock", "sync"])
def test_dead_endpoint_fails_with_one_short_line(hub: HubServer, user_env: dict[str, str], project: Path, command: str):
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n"kernels-community/paged-attention" = "v1"\n', [CPU_ENV])
    if command == "sync":
        assert _lock(project, user_env).returncode == 0
    dead = f"http://127.0.0.1:{_closed_port()}"
    env = {**user_env, "HF_ENDPOINT": dead, "KERNLOCK_CACHE": str(project.parent / "cold-cache")}
    result = run_cli(command, "--project", str(project), env=env)
    _one_error(result, f"cannot reach the Hub at {dead}", "HF_ENDPOINT")
    assert len(result.stdout.splitlines()) <= 1


# -- wrong files on download ------------------------------------------------------------------------------------


def _longer(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, headers, body + b"\0" * 100


def _shorter(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, headers, body[:-100]


def _lying_length(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, [*headers, ("Content-Length", "100")], body  # announces 100 bytes, sends them all


def _other_bytes(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, headers, bytes(reversed(body))


WRONG = [
    ("longer", _longer, "with 4196 bytes, but kernels.lock records 4096 bytes"),
    ("shorter", _shorter, "with 3996 bytes, but kernels.lock records 4096 bytes"),
    ("content-length", _lying_length, "with 100 bytes, but kernels.lock records 4096 bytes"),
    ("other-bytes", _other_bytes, "with sha256:"),
]


@pytest.mark.subprocess
@pytest.mark.parametrize(("transform", "words"), [w[1:] for w in WRONG], ids=[w[0] for w in WRONG])
def test_wrong_file_is_refused_and_removed(
    hub: HubServer, user_env: dict[str, str], project: Path, transform: Transform, words: str
):
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    assert _lock(project, user_env).returncode == 0
    lock = lockfile.read(project / "kernels.lock")
    ((entry, variant),) = syncing.targets(lock, [CPU_ENV])
    so = next(f for f in variant.files if f.path.endswith(".so"))
    hub.faults.rewrite(transform, match=r"\.so$")
    result = _sync(project, user_env)
    _one_error(result, hub.url, so.path, words)
    cache = Path(user_env["HF_HUB_CACHE"])
    assert not (syncing.variant_path(entry, variant, cache) / so.path).exists()
    blobs = caches.repo_folder(ACTIVATION, cache) / "blobs"
    assert not (blobs / so.digest).exists()
    assert sorted(p.name for p in blobs.glob("*.incomplete")) == []
    assert not has_receipt(entry, variant, cache)

    hub.faults.clear()
    again = _sync(project, user_env)
    assert again.returncode == 0, again.stderr
    assert run_cli("verify", "--project", str(project), env=user_env).returncode == 0


@pytest.mark.subprocess
def test_a_body_shorter_than_announced_is_resumed(hub: HubServer, user_env: dict[str, str], project: Path):
    """A body cut short is a network fault: the next attempt resumes with a Range request."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    assert _lock(project, user_env).returncode == 0

    def cut(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        return status, [*headers, ("Content-Length", str(len(body)))], body[:1000]

    hub.faults.rewrite(cut, match=r"\.so$", times=1)
    hub.log.clear()
    result = _sync(project, user_env)
    assert result.returncode == 0, result.stderr
    so = [r.status for r in hub.log.snapshot() if r.path.endswith(".so")]
    assert so == [200, 206]
    assert run_cli("verify", "--project", str(project), env=user_env).returncode == 0


# -- what kernlock uses of huggingface_hub ---------------------------------------------------------------------

HUB_MODULES = ("hub/client.py", "hub/answers.py", "hub/http.py", "hub/download.py", "hub/missing.py", "sync/fetch.py")


def test_the_hub_layer_uses_only_public_huggingface_hub_names():
    """Every name kernlock's Hub modules import from huggingface_hub is public and exists in the installed
    version, and the header builder still takes the keywords kernlock passes: an upstream rename fails here,
    naming the module and the name, before any user meets it as an ImportError or a TypeError mid-request."""
    import ast
    import importlib
    import inspect

    import kernlock

    imported = []
    for name in HUB_MODULES:
        tree = ast.parse((Path(kernlock.__file__).parent / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "huggingface_hub":
                imported += [(name, node.module, alias.name) for alias in node.names]
    assert {n for _, _, n in imported} >= {"get_session", "build_hf_headers", "hf_raise_for_status", "hf_hub_url"}
    private = [f"{where}: {module}.{name}" for where, module, name in imported if name.startswith("_")]
    assert private == [], "private huggingface_hub names; use a public one or one adapter with a test"
    missing = [
        f"{where}: {module}.{name}"
        for where, module, name in imported
        if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == [], f"huggingface_hub {importlib.import_module('huggingface_hub').__version__} lacks them"

    from huggingface_hub.utils import build_hf_headers

    assert {"token", "library_name", "library_version"} <= set(inspect.signature(build_hf_headers).parameters)
    headers = build_hf_headers(token=None, library_name="kernlock", library_version=kernlock.__version__)
    assert f"kernlock/{kernlock.__version__}" in headers["user-agent"]
