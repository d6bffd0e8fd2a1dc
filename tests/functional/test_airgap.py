"""Air-gapped sites: `kernlock bundle`, `kernlock sync --from` and the `kernlock serve` mirror (issue #15).

A module-wide project locks two kernels for two environments against the local Hub and syncs them; everything
after that runs with HF_ENDPOINT pointed at a dead port or at the mirror, and the Hub's request log must stay
empty. Clients of the mirror are fresh processes with real huggingface_hub, kernels and transformers in which
kernlock cannot be imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from envs import clean_env
from processes import CHILD_PRELUDE
from projects import CPU_ENV, write_pyproject

from kernlock.airgap import bundle as bundles
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant
from kernlock.sync import engine as syncing
from kernlock.testing import CPU_VARIANT, Catalog, HubServer, create_kernel_repo, read_identity
from kernlock.testing.mirror_process import MirrorProcess, client_env, free_port

pytestmark = pytest.mark.subprocess

ACTIVATION = "kernels-community/activation"
FA2 = "kernels-community/flash-attn2"
CUDA_ENV = "torch212-cxx11-cu128-x86_64-linux"
REQUIREMENTS = f'"{ACTIVATION}" = "v2"\n"{FA2}" = "v4"\n'  # v4: what transformers asks for here


@dataclass
class Site:
    hub: HubServer
    catalog: Catalog
    project: Path
    lock: Lock
    bundle: Path
    env: dict[str, str]  # a user's environment with HF_ENDPOINT pointing nowhere
    synced_cache: Path  # the connected machine's cache

    def fresh_env(self, tmp: Path) -> dict[str, str]:
        """The user's environment with an empty cache."""
        return {**self.env, "HF_HUB_CACHE": str(tmp / "cache"), "HF_HOME": str(tmp / "hf-home")}


def _base_env(tmp: Path) -> dict[str, str]:
    return clean_env(HF_HOME=str(tmp / "hf-home"), HF_HUB_CACHE=str(tmp / "cache"), HF_HUB_DISABLE_XET="1")


@pytest.fixture(scope="module")
def site(hub_server: HubServer, catalog: Catalog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("airgap")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, REQUIREMENTS, [CPU_ENV, CUDA_ENV])
    env = _base_env(base)
    connected = {**env, **hub_server.env()}
    assert run_cli("lock", "--project", str(project), env=connected).returncode == 0
    out = run_cli("bundle", "-o", str(base / "site.tar"), "--project", str(project), env=connected)
    assert out.returncode == 0, out.stderr
    assert "bundled 4 variants" in out.stdout
    hub_server.log.clear()
    # nothing listens at HF_ENDPOINT; the site has the test sigstore instance's trusted root (a file it keeps, as a
    # site verifying a private instance's signatures must), so `sync --from` verifies the bundles offline
    trusted_root = {"KERNLOCK_SIGSTORE_TRUSTED_ROOT": hub_server.env()["KERNLOCK_SIGSTORE_TRUSTED_ROOT"]}
    offline = {**env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", **trusted_root}
    lock = lockfile.read(project / "kernels.lock")
    yield Site(hub_server, catalog, project, lock, base / "site.tar", offline, base / "cache")
    assert len(hub_server.log) == 0, "an air-gapped step sent a request to the Hub"


@pytest.fixture(autouse=True)
def _site_trusted_root(hub_server: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process verifies the site's signatures too (``syncing.verify``): against the test instance's root."""
    monkeypatch.setenv("KERNLOCK_SIGSTORE_TRUSTED_ROOT", hub_server.env()["KERNLOCK_SIGSTORE_TRUSTED_ROOT"])


def _installed(cache: Path) -> list[str]:
    """Every file or link the cache holds below a kernel repo (nothing: nothing was installed)."""
    return sorted(str(p.relative_to(cache)) for p in cache.glob("kernels--*/**/*") if not p.is_dir())


# -- bundle and sync --from ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_bundle_round_trip_offline_and_deterministic(site: Site, tmp_path: Path):
    with tarfile.open(site.bundle) as tar:
        names = tar.getnames()
        infos = tar.getmembers()
        manifest = json.loads(tar.extractfile(bundles.MANIFEST).read())  # type: ignore[union-attr]
    assert names[:3] == [bundles.MANIFEST, bundles.MANIFEST_HASH, bundles.LOCK]
    assert all(i.isreg() and i.mtime == 0 and i.uid == 0 and i.mode == 0o644 for i in infos)
    assert manifest["environments"] == sorted([CPU_ENV, CUDA_ENV])
    expected = {bundles.member_name(e, v, f) for e, v in syncing.targets(site.lock, None) for f in v.files}
    assert set(names[3:]) == expected

    # The same lock and files, from another cache whose files have other mtimes: the same bytes.
    env = {**site.fresh_env(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = run_cli("sync", "--from", str(site.bundle), "--all-environments", "--project", str(site.project), env=env)
    assert result.returncode == 0, result.stderr
    assert "synced 4 variants" in result.stdout
    again = tmp_path / "again.tar"
    result = run_cli("bundle", "-o", str(again), "--project", str(site.project), env=env)
    assert result.returncode == 0, result.stderr
    assert again.read_bytes() == site.bundle.read_bytes()
    assert not list(tmp_path.glob(".again.tar.*"))  # no temporary file left

    assert syncing.verify(site.lock, [CPU_ENV, CUDA_ENV], cache=tmp_path / "cache").problems == ()
    assert run_cli("verify", "--all-environments", "--project", str(site.project), env=env).returncode == 0


def test_bundle_of_files_not_in_the_cache_offline_says_so_and_writes_nothing(site: Site, tmp_path: Path):
    env = {**site.fresh_env(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = run_cli("bundle", "-o", str(tmp_path / "b.tar"), "--project", str(site.project), env=env)
    assert result.returncode == 1
    assert "locked files not in the cache" in result.stderr and "kernlock sync" in result.stderr
    assert list(tmp_path.glob("*.tar*")) == []


def test_sync_from_installs_only_this_environment_by_default(site: Site, tmp_path: Path):
    env = site.fresh_env(tmp_path)
    result = run_cli("sync", "--from", str(site.bundle), "--project", str(site.project), env=env)
    assert result.returncode == 0, result.stderr
    assert f"synced 2 variants of 2 kernels for {CPU_ENV}" in result.stdout
    assert syncing.verify(site.lock, [CPU_ENV], cache=tmp_path / "cache").problems == ()
    assert all(CUDA_ENV.split("-")[2] not in p for p in _installed(tmp_path / "cache"))


def _flip(bundle: Path, member: str, tmp: Path) -> Path:
    """A copy of ``bundle`` with one byte of ``member``'s data changed."""
    with tarfile.open(bundle) as tar:
        info = tar.getmember(member)
    copy = tmp / "flipped.tar"
    shutil.copyfile(bundle, copy)
    with open(copy, "r+b") as handle:
        handle.seek(info.offset_data + info.size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x01]))
    return copy


def test_a_flipped_byte_is_refused_naming_the_file_and_nothing_is_installed(site: Site, tmp_path: Path):
    entry = site.lock.entry_for(FA2, CPU_ENV)
    assert entry is not None
    variant = entry.variant_for(CPU_ENV)
    assert variant is not None
    locked = next(f for f in variant.files if f.algorithm == "sha256")  # the LFS .so
    flipped = _flip(site.bundle, bundles.member_name(entry, variant, locked), tmp_path)
    result = run_cli("sync", "--from", str(flipped), "--project", str(site.project), env=site.fresh_env(tmp_path))
    assert result.returncode == 1
    assert f"{FA2} {variant.name} {locked.path}" in result.stderr
    assert "nothing was installed" in result.stderr
    assert _installed(tmp_path / "cache") == []


def test_a_bundle_made_for_another_lock_is_refused(site: Site, tmp_path: Path):
    other = tmp_path / "other"
    other.mkdir()
    write_pyproject(other, f'"{ACTIVATION}" = "v2"\n', [CPU_ENV])
    shutil.copyfile(site.project / "kernels.lock", other / "kernels.lock")
    lock = lockfile.read(other / "kernels.lock")
    lockfile.write(other / "kernels.lock", dataclasses.replace(lock, kernels=lock.kernels[:1]))
    result = run_cli("sync", "--from", str(site.bundle), "--project", str(other), env=site.fresh_env(tmp_path))
    assert result.returncode == 1
    assert "was made for another kernels.lock" in result.stderr
    assert _installed(tmp_path / "cache") == []


def _tar(path: Path, site: Site, extra: tarfile.TarInfo, data: bytes = b"") -> Path:
    """The real bundle's header members, then ``extra``."""
    with tarfile.open(site.bundle) as src, tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as out:
        for name in (bundles.MANIFEST, bundles.MANIFEST_HASH, bundles.LOCK):
            info = src.getmember(name)
            out.addfile(info, src.extractfile(info))
        out.addfile(extra, io.BytesIO(data) if extra.isreg() else None)
    return path


def _hostile(kind: str, outside: Path) -> tuple[tarfile.TarInfo, bytes]:
    if kind in ("dotdot", "absolute"):
        name = "kernlock-bundle/../../escaped.so" if kind == "dotdot" else str(outside / "escaped.so")
        info = tarfile.TarInfo(name)
        info.size = 3
        return info, b"bad"
    info = tarfile.TarInfo("kernlock-bundle/files/x")
    if kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, str(outside)
    elif kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
    else:
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, b""


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink", "device"])
def test_a_hostile_tar_is_refused_and_writes_nothing(kind: str, site: Site, tmp_path: Path, outside: Path):
    info, data = _hostile(kind, outside)
    hostile = _tar(tmp_path / "hostile.tar", site, info, data)
    for args in (["sync", "--from", str(hostile), "--project", str(site.project)], ["serve", "--from", str(hostile)]):
        result = run_cli(*args, env=site.fresh_env(tmp_path))
        assert result.returncode == 1, result.stdout
        assert "is not a usable kernlock bundle" in result.stderr
    assert _installed(tmp_path / "cache") == []
    assert not outside.exists()  # (and the sentinel fixture checks its whole tree)


@pytest.mark.slow
def test_an_interrupted_sync_from_resumes(hub_server: HubServer, tmp_path: Path):
    """SIGKILL while a large file is being copied out of the bundle: nothing partial is visible, and the next
    `sync --from` completes, verified."""
    root = tmp_path / "hub"
    create_kernel_repo(root, "big-org/big", {"v1": [CPU_VARIANT]}, so_size=96 * 2**20, trusted=True)
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, '"big-org/big" = "v1"\n', [CPU_ENV])
    env = {**_base_env(tmp_path), "KERNLOCK_SIGSTORE_TRUSTED_ROOT": str(root / "sigstore" / "trusted_root.json")}
    with HubServer(root) as hub:
        assert run_cli("lock", "--project", str(project), env={**env, **hub.env()}).returncode == 0
        result = run_cli("bundle", "-o", str(tmp_path / "big.tar"), "--project", str(project), env={**env, **hub.env()})
        assert result.returncode == 0, result.stderr
    lock = lockfile.read(project / "kernels.lock")
    (large,) = [f for f in lock.kernels[0].variants[0].files if f.size == 96 * 2**20]
    argv = [sys.executable, "-m", "kernlock", "sync", "--from", str(tmp_path / "big.tar"), "--project", str(project)]

    def copied(cache: Path) -> int:
        """Bytes of the large file in its partial file (0: none yet, or gone: renamed into place)."""
        for partial in cache.glob(f"kernels--big-org--big/blobs/{large.digest}.*.incomplete"):
            with contextlib.suppress(OSError):
                return partial.stat().st_size
        return 0

    # The kill follows the sight of a partial copy, but a loaded machine may let the copy end (and the file move
    # into place) in between: then the attempt proves nothing and the next one starts from an empty cache.
    for attempt in range(5):
        cache = tmp_path / f"node-{attempt}"
        node = {**env, "HF_HUB_CACHE": str(cache), "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
        proc = subprocess.Popen(argv, env=node, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not copied(cache):
            time.sleep(0.002)
        proc.kill()
        proc.wait()
        if 0 < copied(cache) < large.size:
            break
    else:
        pytest.fail("the copy of the large file never got interrupted")
    assert all(p.kind.value in ("missing", "not synced") for p in syncing.verify(lock, [], cache=cache).problems)
    result = subprocess.run(argv, env=node, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert syncing.verify(lock, [CPU_ENV], cache=cache).problems == ()
    assert not list(cache.glob("kernels--*/blobs/*.incomplete"))


# -- the mirror ------------------------------------------------------------------------------------------------

# First, before anything else: kernlock cannot be imported in the client, and every socket is recorded.
CLIENT_PRELUDE = CHILD_PRELUDE + 'sys.modules["kernlock"] = None  # an import of kernlock fails from here on\n'


def _client(code: str, env: dict[str, str]) -> dict:
    """Run ``code`` (which sets ``OUT``) in a fresh process without kernlock; returns OUT and the modules."""
    tail = "\nOUT['kernlock_modules'] = [m for m in sys.modules if m.startswith('kernlock') and sys.modules[m]]\n"
    tail += "OUT['connects'] = CONNECTS\nprint('REPORT ' + json.dumps(OUT))\n"
    result = subprocess.run(
        [sys.executable, "-c", CLIENT_PRELUDE + textwrap.dedent(code) + tail],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line[len("REPORT ") :])
    assert report["kernlock_modules"] == []
    return report


@pytest.fixture(scope="module")
def mirror(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MirrorProcess]:
    log = tmp_path_factory.mktemp("mirror") / "access.log"
    with MirrorProcess(["--from", str(site.bundle)], site.env, log, workers=2, threads=4) as server:
        yield server


_LOAD = """
import kernels, torch
from transformers import AutoModelForCausalLM, LlamaConfig

act = kernels.get_kernel("kernels-community/activation", version=2)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = AutoModelForCausalLM.from_config(config, attn_implementation="kernels-community/flash-attn2")
ids = torch.randint(0, 64, (2, 8))
model(input_ids=ids, labels=ids).loss.backward()
OUT = {
    k.repo_info.repo_id: {"commit": k.repo_info.revision, "identity": k.module.KERNEL_IDENTITY,
                          "calls": dict(k.module.CALL_COUNTS)}
    for k in kernels.get_loaded_kernels() if k.repo_info is not None
}
OUT["attn"] = model.config._attn_implementation
"""


@pytest.mark.slow
def test_get_kernel_and_transformers_load_the_locked_builds_through_the_mirror(
    site: Site, mirror: MirrorProcess, tmp_path: Path
):
    report = _client(_LOAD, client_env(site.env, mirror.url, tmp_path / "node-cache"))
    assert report["attn"] == FA2
    for repo in (ACTIVATION, FA2):
        entry = site.lock.entry_for(repo, CPU_ENV)
        assert entry is not None and entry.variant_for(CPU_ENV) is not None
        assert report[repo]["commit"] == entry.commit
        assert report[repo]["identity"] == read_identity(site.catalog.root, repo, entry.commit, CPU_VARIANT)
    assert sum(report[FA2]["calls"].values()) > 0  # transformers ran the locked attention kernel
    assert all(str(mirror.port) in c for c in report["connects"])  # only the mirror was asked
    assert any("/resolve/" in line for line in mirror.requests())  # the access log records the downloads


_NOT_FOUND = """
import huggingface_hub as hf
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
OUT = {}
def attempt(name, call, error):
    try:
        call()
        OUT[name] = "no error"
    except error as err:
        OUT[name] = type(err).__name__
attempt("unlocked repo", lambda: hf.HfApi().kernel_info("kernels-community/rotary"), RepositoryNotFoundError)
attempt("unlocked revision", lambda: hf.hf_hub_download("kernels-community/activation", "README.md",
        repo_type="kernel", revision="v1"), RevisionNotFoundError)
attempt("unlocked file", lambda: hf.hf_hub_download("kernels-community/activation", "README.md",
        repo_type="kernel", revision="v2"), EntryNotFoundError)
attempt("model repo", lambda: hf.HfApi().model_info("kernels-community/activation"), RepositoryNotFoundError)
import kernels
attempt("kernels unlocked", lambda: kernels.get_kernel("kernels-community/rotary", version=1), Exception)
OUT["refs"] = sorted(b.name for b in hf.HfApi().list_repo_refs("kernels-community/activation",
                     repo_type="kernel").branches)
"""


@pytest.mark.slow
def test_anything_not_in_the_lock_is_a_not_found_error_for_the_clients(mirror: MirrorProcess, site: Site, tmp_path):
    report = _client(_NOT_FOUND, client_env(site.env, mirror.url, tmp_path / "node-cache"))
    assert report["unlocked repo"] == "RepositoryNotFoundError"
    assert report["unlocked revision"] == "RevisionNotFoundError"
    assert report["unlocked file"] in ("EntryNotFoundError", "RemoteEntryNotFoundError")
    assert report["model repo"] == "RepositoryNotFoundError"
    assert report["kernels unlocked"] == "RepositoryNotFoundError"
    assert report["refs"] == ["v2"]  # only the locked ref, pinned to the locked commit


def test_kernlock_sync_against_a_mirror_of_a_cache(site: Site, tmp_path: Path):
    """`kernlock serve --cache` over the connected machine's cache; a node runs plain `kernlock sync`."""
    log = tmp_path / "access.log"
    args = ["--cache", str(site.synced_cache), "--project", str(site.project)]
    with MirrorProcess(args, site.env, log) as server:
        node = client_env(site.env, server.url, tmp_path / "node-cache")
        result = run_cli("sync", "--all-environments", "--project", str(site.project), env=node)
        assert result.returncode == 0, result.stderr
        assert syncing.verify(site.lock, [CPU_ENV, CUDA_ENV], cache=tmp_path / "node-cache").problems == ()
        with urllib.request.urlopen(f"{server.url}/health") as response:
            health = json.loads(response.read())
    assert health["status"] == "ok" and set(health["kernels"]) == {ACTIVATION, FA2}
    assert "serving 2 kernels" in server.output()


def _locked_so(site: Site, env: str) -> tuple[LockedKernel, LockedVariant, LockedFile]:
    """FA2's locked entry and variant for ``env``, and its LFS ``.so``."""
    entry = site.lock.entry_for(FA2, env)
    assert entry is not None
    variant = entry.variant_for(env)
    assert variant is not None
    return entry, variant, next(f for f in variant.files if f.algorithm == "sha256")


def _get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lowercase names, body)."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as response:
            status, answer, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        status, answer, body = err.code, err.headers, err.read()
    return status, {k.lower(): v for k, v in answer.items()}, body


def test_the_mirror_answers_ranges_from_the_bundle_with_the_hub_headers(site: Site, mirror: MirrorProcess):
    entry, variant, so = _locked_so(site, CPU_ENV)
    with tarfile.open(site.bundle) as tar:
        content = tar.extractfile(bundles.member_name(entry, variant, so)).read()  # type: ignore[union-attr]
    url = f"{mirror.url}/kernels/{FA2}/resolve/v4/build/{variant.name}/{so.path}"
    status, headers, body = _get(url, "HEAD")
    assert status == 200 and body == b""
    assert headers["x-repo-commit"] == entry.commit
    assert headers["x-linked-etag"].strip('"') == so.digest and headers["x-linked-size"] == str(so.size)
    assert headers["content-length"] == str(so.size)
    status, headers, body = _get(url, headers={"Range": "bytes=100-"})
    assert status == 206 and body == content[100:]
    assert headers["content-range"] == f"bytes 100-{so.size - 1}/{so.size}"
    assert _get(url, headers={"Range": f"bytes={so.size}-"})[0] == 416
    status, headers, _ = _get(f"{mirror.url}/kernels/{FA2}/resolve/{entry.commit}/README.md")
    assert status == 404 and headers["x-error-code"] == "EntryNotFound"
    assert _get(f"{mirror.url}/anything/else")[0] == 404
    assert _get(f"{mirror.url}/api/kernels/{FA2}/refs", "POST")[0] == 405  # read-only


def test_serve_names_the_missing_server_and_imports_no_test_code(site: Site):
    code = (
        "import sys; sys.modules['gunicorn.app.base'] = None\n"
        "import kernlock.airgap.mirror\nassert not [m for m in sys.modules if m.startswith('kernlock.testing')]\n"
        "from kernlock.cli.app import main\nmain(['serve', '--from', sys.argv[1], '--port', '0'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(site.bundle)], env=site.env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr
    assert "pip install 'kernlock[serve]'" in result.stderr
    assert "serving" not in result.stdout + result.stderr  # nothing says it serves before it fails


def _cache_copy(site: Site, tmp: Path, env: str) -> tuple[Path, Any, Any, Any, Path]:
    """A copy of the connected machine's cache, and FA2's locked variant for ``env``, its LFS .so and its blob."""
    cache = tmp / "cache"
    shutil.copytree(site.synced_cache, cache, symlinks=True)
    entry, variant, so = _locked_so(site, env)
    return cache, entry, variant, so, cache / f"kernels--{FA2.replace('/', '--')}" / "blobs" / so.digest


def test_serve_from_a_cache_leaves_out_a_variant_that_does_not_match_the_lock(site: Site, tmp_path: Path):
    cache, entry, variant, so, blob = _cache_copy(site, tmp_path, CUDA_ENV)
    data = bytearray(blob.read_bytes())
    data[0] ^= 1
    blob.write_bytes(bytes(data))
    with MirrorProcess(["--cache", str(cache), "--project", str(site.project)], site.env, tmp_path / "log") as server:
        bad = _get(f"{server.url}/kernels/{FA2}/resolve/{entry.commit}/build/{variant.name}/{so.path}")
        tree = json.loads(_get(f"{server.url}/api/kernels/{FA2}/tree/{entry.commit}/build")[2])
        output = server.output()
    assert bad[0] == 404 and bad[1]["x-error-code"] == "EntryNotFound"
    assert sorted(e["path"] for e in tree) == [f"build/{CPU_VARIANT}"]
    assert f"not served: {FA2} {variant.name}" in output


def _with_manifest(path: Path, site: Site, manifest: bytes) -> Path:
    """The real bundle with its manifest replaced by ``manifest`` (and a matching manifest.json.sha256)."""
    digest = hashlib.sha256(manifest).hexdigest()
    with tarfile.open(site.bundle) as src, tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as out:
        for info in src:
            data = src.extractfile(info).read()  # type: ignore[union-attr]
            if info.name == bundles.MANIFEST:
                data = manifest
            elif info.name == bundles.MANIFEST_HASH:
                data = f"{digest}  manifest.json\n".encode()
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return path


def _edited_manifest(site: Site, edit: str) -> bytes:
    with tarfile.open(site.bundle) as tar:
        data = json.loads(tar.extractfile(bundles.MANIFEST).read())  # type: ignore[union-attr]
    if edit == "nested":
        return b"[" * 100_000 + b"]" * 100_000
    if edit == "no-lock-sha256":
        del data["lock-sha256"]
    elif edit == "environments-int":
        data["environments"] = 5
    elif edit == "repo-int":
        data["files"][0]["repo"] = 5
    elif edit == "size-differs":
        data["files"][0]["size"] += 1
    return json.dumps(data).encode()


@pytest.mark.parametrize("edit", ["nested", "no-lock-sha256", "environments-int", "repo-int", "size-differs"])
def test_a_hostile_manifest_is_refused_in_one_message(edit: str, site: Site, tmp_path: Path):
    hostile = _with_manifest(tmp_path / "hostile.tar", site, _edited_manifest(site, edit))
    for args in (["sync", "--from", str(hostile), "--project", str(site.project)], ["serve", "--from", str(hostile)]):
        result = run_cli(*args, env=site.fresh_env(tmp_path))
        assert result.returncode == 1, result.stdout
        assert "Traceback" not in result.stderr
        assert "is not a usable kernlock bundle" in result.stderr
    assert _installed(tmp_path / "cache") == []


def test_the_mirror_answers_hostile_requests_with_4xx_and_no_file(site: Site, mirror: MirrorProcess):
    entry = site.lock.entry_for(FA2, CPU_ENV)
    assert entry is not None
    base = f"{mirror.url}/kernels/{FA2}/resolve/{entry.commit}"
    for path in (
        "../../../../etc/passwd",
        "%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "..%2f..%2f..%2fetc%2fpasswd",
        "build//x",
        "..\\..\\etc\\passwd",
        "build/%00",
        "x?" + "a" * 3000,
    ):
        status, _, body = _get(f"{base}/{path}")
        assert status == 404 and b"root:" not in body, (path, status)
    assert _get(f"{mirror.url}/kernels/{FA2}/resolve/not-a-locked-branch/build/x")[0] == 404
    assert _get(f"{mirror.url}/api/organizations/kernels-community/overview", "DELETE")[0] == 405
    paths_info = f"{mirror.url}/api/kernels/{FA2}/paths-info/{entry.commit}"
    for content_type, body in (
        ("application/json", b"{not json"),
        ("application/json", b"[1]"),
        ("application/x-www-form-urlencoded", b"\xff\xfe"),
    ):
        request = urllib.request.Request(paths_info, body, {"Content-Type": content_type}, method="POST")
        try:
            urllib.request.urlopen(request)
            status = 200
        except urllib.error.HTTPError as err:
            status = err.code
        assert status == 400, (body, status)


def test_bundle_onto_the_lock_or_a_folder_is_refused_and_writes_nothing(site: Site, tmp_path: Path):
    lock_bytes = (site.project / "kernels.lock").read_bytes()
    folder = tmp_path / "out"
    folder.mkdir()
    for target in (site.project / "kernels.lock", folder, site.project / "pyproject.toml"):
        before = sorted(p.name for p in target.parent.iterdir())
        result = run_cli("bundle", "-o", str(target), "--project", str(site.project), env=site.env)
        assert result.returncode == (2 if target == folder else 1), (target, result.stdout)  # a folder: usage
        assert "Traceback" not in result.stderr and "-o" in result.stderr
        assert sorted(p.name for p in target.parent.iterdir()) == before  # no temporary file left
    assert (site.project / "kernels.lock").read_bytes() == lock_bytes
    assert list(folder.iterdir()) == []


def test_the_mirror_never_serves_a_bundle_altered_after_it_started(site: Site, tmp_path: Path):
    entry, variant, so = _locked_so(site, CPU_ENV)
    copy = tmp_path / "site.tar"
    shutil.copyfile(site.bundle, copy)
    with MirrorProcess(["--from", str(copy)], site.env, tmp_path / "access.log") as server:
        url = f"{server.url}/kernels/{FA2}/resolve/{entry.commit}/build/{variant.name}/{so.path}"
        assert _get(url)[0] == 200
        _flip(copy, bundles.member_name(entry, variant, so), tmp_path)  # a copy of the copy, flipped...
        os.replace(tmp_path / "flipped.tar", copy)  # ...put in its place, as an editor or `cp` would
        status, headers, _ = _get(url)
        assert status == 503 and "restart" in headers["x-error-message"]
        assert _get(url, "HEAD")[0] == 503


def test_serve_on_a_port_in_use_says_so_and_exits_1(site: Site):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = run_cli("serve", "--from", str(site.bundle), "--port", port, env=site.env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"port {port} is in use" in result.stderr and "--port" in result.stderr


def test_the_mirror_refuses_a_huge_request_body_without_reading_it(site: Site, mirror: MirrorProcess):
    import http.client

    entry = site.lock.entry_for(FA2, CPU_ENV)
    assert entry is not None
    connection = http.client.HTTPConnection("127.0.0.1", mirror.port, timeout=30)
    connection.putrequest("POST", f"/api/kernels/{FA2}/paths-info/{entry.commit}")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(50 * 1024**3))  # 50 GiB announced, a few bytes sent
    connection.endheaders(b'{"paths": []}')
    assert connection.getresponse().status == 413
    connection.close()


def _damaged(kind: str, site: Site, tmp: Path) -> Path:
    path = tmp / "damaged.tar"
    if kind == "gzip":
        import gzip

        path.write_bytes(gzip.compress(site.bundle.read_bytes()))
    elif kind == "not-a-tar":
        path.write_text("hello\n" * 1000)
    elif kind == "truncated":
        data = site.bundle.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        info = tarfile.TarInfo(
            {
                "duplicate": bundles.LOCK,
                "backslash": "kernlock-bundle\\..\\..\\escaped",
                "long": "kernlock-bundle/files/" + "a" * 5000,
                "fifo": "kernlock-bundle/files/fifo",
            }[kind]
        )
        data = b"x"
        if kind == "fifo":
            info.type, data = tarfile.FIFOTYPE, b""
        info.size = len(data)
        _tar(path, site, info, data)
    return path


@pytest.mark.parametrize("kind", ["gzip", "not-a-tar", "truncated", "duplicate", "backslash", "long", "fifo"])
def test_a_damaged_or_odd_tar_is_refused_in_one_message(kind: str, site: Site, tmp_path: Path):
    damaged = _damaged(kind, site, tmp_path)
    result = run_cli("sync", "--from", str(damaged), "--project", str(site.project), env=site.fresh_env(tmp_path))
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert "bundle" in result.stderr and "nothing was installed" in result.stderr
    assert _installed(tmp_path / "cache") == []


def test_the_mirror_answers_odd_ranges_as_http_says(site: Site, mirror: MirrorProcess):
    entry, variant, so = _locked_so(site, CPU_ENV)
    url = f"{mirror.url}/kernels/{FA2}/resolve/{entry.commit}/build/{variant.name}/{so.path}"
    full = _get(url)[2]
    assert len(full) == so.size
    for header in ("bytes=abc", "bytes=0-1,5-9", "items=0-5", "bytes=9-3"):  # ignored: the whole file
        status, _, body = _get(url, headers={"Range": header})
        assert (status, body) == (200, full), header
    assert _get(url, headers={"Range": "bytes=-10"})[2] == full[-10:]
    assert _get(url, headers={"Range": f"bytes=-{so.size * 2}"})[2] == full
    assert _get(url, headers={"Range": f"bytes=0-{so.size * 2}"})[2] == full
    status, headers, _ = _get(url, headers={"Range": f"bytes={so.size + 5}-{so.size + 9}"})
    assert status == 416 and headers["content-range"] == f"bytes */{so.size}"
    status, headers, body = _get(url, "HEAD", {"Range": "bytes=0-9"})
    assert status == 206 and body == b"" and headers["content-length"] == "10"


def test_serve_from_a_cache_never_serves_a_blob_altered_after_it_started(site: Site, tmp_path: Path):
    cache, entry, variant, so, blob = _cache_copy(site, tmp_path, CPU_ENV)
    with MirrorProcess(["--cache", str(cache), "--project", str(site.project)], site.env, tmp_path / "log") as server:
        url = f"{server.url}/kernels/{FA2}/resolve/{entry.commit}/build/{variant.name}/{so.path}"
        assert _get(url)[0] == 200
        data = bytearray(blob.read_bytes())
        data[0] ^= 1
        with open(blob, "r+b") as handle:  # in place, same size
            handle.write(bytes(data[:1]))
        assert _get(url)[0] == 503


def test_bundle_and_sync_from_a_sub_folder_of_the_project(site: Site, tmp_path: Path):
    sub = site.project / "src" / "deep"
    sub.mkdir(parents=True, exist_ok=True)
    try:
        assert run_cli("bundle", "-o", "here.tar", env=site.env, cwd=sub).returncode == 0
        assert (sub / "here.tar").is_file()  # -o is relative to where the user is
        result = run_cli("sync", "--from", "here.tar", env=site.fresh_env(tmp_path), cwd=sub)
    finally:
        shutil.rmtree(site.project / "src")
    assert result.returncode == 0, result.stderr
    assert "synced 2 variants" in result.stdout and _installed(tmp_path / "cache")
