"""A refused build stays refused, on every try and for every loader (issue 29, items 1 and 2).

- A signed build whose signed digest disagrees with one of its files (a Python file changed after signing: the file
  an attacker changes, since Python runs it at import) is refused at lock time, whatever kind of file it is.
- A lock written before that check (it records the signature of such a build) is refused by `sync` before anything of
  the variant is visible: no snapshot folder, no receipt; the second `sync`, `verify`, an activated load and plain
  kernels offline all refuse it again, with the same reason where kernlock speaks.
- An interrupted `sync --all-environments` never shows half a variant: every variant folder a loader can see is
  complete at every instant, and a run that printed its summary exits 0.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from projects import CPU_ENV, fresh_hub, own_repo, write_pyproject

from kernlock import api
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock
from kernlock.project import inputs
from kernlock.signing.bundle import BUNDLE, METADATA, BundleVerifier
from kernlock.sync import cache as synccache
from kernlock.testing import Catalog, HubServer

pytestmark = pytest.mark.subprocess  # every test here starts kernlock, Python or a server process

REASON = "__init__.py does not match the hash its signed digest gives"


def _changed_after_signing(catalog: Catalog) -> str:
    """A repo whose v1 CPU build has a valid bundle over a metadata.json whose digest no longer matches its
    ``__init__.py`` (appended to after signing)."""
    repo = own_repo(catalog, {"v1": [CPU_ENV]})
    commit = catalog.repo(repo).head("v1")
    init = subprocess.run(
        ["git", "-C", str(catalog.repo(repo).path), "show", f"{commit}:build/{CPU_ENV}/__init__.py"],
        capture_output=True,
        check=True,
    ).stdout
    changed = init + b"\nimport os  # changed after signing: runs at import\n"
    catalog.repo(repo).upload_files("v1", {f"build/{CPU_ENV}/__init__.py": changed}, sign=False)
    return repo


def _snapshot(cache: Path, repo: str, commit: str, variant: str = CPU_ENV) -> Path:
    return cache / f"kernels--{repo.replace('/', '--')}" / "snapshots" / commit / "build" / variant


def _old_lock(project: Path, hub: HubServer, repo: str) -> Lock:
    """kernels.lock as kernlock wrote it before the lock-time check of every file: the bundle verified and its
    signature recorded, the Python files left to sync. Made by locking without signatures, then recording the
    bundle's verified signature, with the lock's requires-hash for the project's default (verifying) policy."""
    write_pyproject(project, f'"{repo}" = "v1"\n[tool.kernlock.signatures]\nmode = "off"\n', environments=[CPU_ENV])
    unsigned = api.lock(project, hub=fresh_hub(hub)).lock
    write_pyproject(project, f'"{repo}" = "v1"\n', environments=[CPU_ENV])
    project_now = inputs.load(project)
    client = fresh_hub(hub)
    verifier = BundleVerifier(project_now.signatures.trusted_root_path(project))
    kernels = []
    for entry in unsigned.kernels:
        variants = []
        for variant in entry.variants:
            blobs = {f.path: f.hash for f in variant.files}
            base = f"build/{variant.name}/"
            metadata = client.read_blob(entry.repo, entry.commit, base + METADATA, blobs[METADATA])
            bundle = client.read_blob(entry.repo, entry.commit, base + BUNDLE, blobs[BUNDLE])
            record = verifier.verify(repo, metadata, bundle, project_now.signatures.signers, fix="")
            variants.append(replace(variant, signature=record))
        kernels.append(replace(entry, variants=tuple(variants)))
    lock = replace(unsigned, kernels=tuple(kernels), requires_hash=project_now.requires_hash())
    lockfile.write(project / "kernels.lock", lock)
    return lock


def _activated_load(repo: str, project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = f"import kernlock.activate, kernels; kernels.get_kernel({repo!r}, version=1); print('LOADED')"
    return subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True)


def _plain_offline_load(repo: str, commit: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = f"import kernels; kernels.get_kernel({repo!r}, revision={commit!r}); print('LOADED')"
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], env=offline, capture_output=True, text=True)


def test_a_python_file_changed_after_signing_is_refused_at_lock_time(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
) -> None:
    repo = _changed_after_signing(catalog)
    write_pyproject(project, "", environments=[CPU_ENV])
    before = (project / "pyproject.toml").read_text()
    for _try in range(2):
        result = run_cli("add", repo, "--project", str(project), env=user_env)
        assert_clean_error(result, REASON, "kernels.lock was not written")
        assert not (project / "kernels.lock").exists()
        assert (project / "pyproject.toml").read_text() == before
    cache = Path(user_env["HF_HUB_CACHE"])
    assert not _snapshot(cache, repo, catalog.repo(repo).head("v1")).exists()
    assert "LOADED" not in _plain_offline_load(repo, catalog.repo(repo).head("v1"), user_env).stdout


@pytest.mark.slow
def test_a_build_refused_by_sync_is_never_visible_and_stays_refused(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
) -> None:
    repo = _changed_after_signing(catalog)
    lock = _old_lock(project, hub, repo)
    commit = lock.kernels[0].commit
    cache = Path(user_env["HF_HUB_CACHE"])
    folder = _snapshot(cache, repo, commit)
    entry, variant = synccache.targets(lock, [CPU_ENV])[0]

    for _try in range(2):  # the second sync is no "already verified": it checks again and refuses again
        result = run_cli("sync", "--project", str(project), env=user_env)
        assert_clean_error(result, REASON)
        assert "already verified" not in result.stdout + result.stderr
        assert not folder.exists(), sorted(p.name for p in folder.iterdir())
        receipt = synccache.receipt_path(entry, variant, cache)
        assert receipt is None or not receipt.exists()  # None: no receipt was ever written

    for _try in range(2):  # an activated load refuses with the same reason, and so does the next one
        loaded = _activated_load(repo, project, user_env)
        assert loaded.returncode == 1 and "LOADED" not in loaded.stdout, loaded.stderr
        assert REASON in loaded.stderr, loaded.stderr
    plain = _plain_offline_load(repo, commit, user_env)
    assert plain.returncode != 0 and "LOADED" not in plain.stdout

    verified = run_cli("verify", "--project", str(project), env=user_env)
    assert verified.returncode == 1 and REASON in verified.stdout + verified.stderr, verified
    assert not folder.exists()


@pytest.mark.slow
def test_a_load_that_fetches_such_a_build_refuses_it_before_it_is_visible(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
) -> None:
    """Never synced: the activated load downloads the variant itself, checks its signature in the staging folder,
    and refuses it there; neither it nor plain kernels offline can load it afterwards."""
    repo = _changed_after_signing(catalog)
    commit = _old_lock(project, hub, repo).kernels[0].commit
    for _try in range(2):
        loaded = _activated_load(repo, project, user_env)
        assert loaded.returncode == 1 and "LOADED" not in loaded.stdout, loaded.stderr
        assert REASON in loaded.stderr, loaded.stderr
        assert not _snapshot(Path(user_env["HF_HUB_CACHE"]), repo, commit).exists()
    assert "LOADED" not in _plain_offline_load(repo, commit, user_env).stdout


def test_a_build_verify_finds_tampered_is_withdrawn_and_the_next_sync_replaces_it(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
) -> None:
    """A synced file changed in the cache (its size and mtime put back): `verify` names it and withdraws the
    variant's receipt; the next `sync` replaces it (never "already verified"), and a load gets the locked bytes."""
    repo = own_repo(catalog, {"v1": [CPU_ENV]})
    write_pyproject(project, f'"{repo}" = "v1"\n', environments=[CPU_ENV])
    lock = api.lock(project, hub=fresh_hub(hub)).lock
    assert run_cli("sync", "--project", str(project), env=user_env).returncode == 0
    cache = Path(user_env["HF_HUB_CACHE"])
    init = _snapshot(cache, repo, lock.kernels[0].commit) / "__init__.py"
    original = init.read_bytes()
    st = init.stat()
    init.write_bytes(original[:-1] + (b"#" if original[-1:] != b"#" else b"!"))
    os.utime(init, ns=(st.st_atime_ns, st.st_mtime_ns))

    verified = run_cli("verify", "--project", str(project), env=user_env)
    assert verified.returncode == 1 and "__init__.py" in verified.stdout + verified.stderr
    synced = run_cli("sync", "--project", str(project), env=user_env)
    assert synced.returncode == 0, synced.stderr
    assert "already verified" not in synced.stdout.split("(")[-1] or "0 already verified" in synced.stdout
    assert init.read_bytes() == original
    assert run_cli("verify", "--project", str(project), env=user_env).returncode == 0


# -- an interrupted sync --------------------------------------------------------------------------------------

ENVIRONMENTS = [
    CPU_ENV,
    "torch212-cxx11-cpu-x86_64-linux",
    "torch213-cxx11-cu126-x86_64-linux",
    "torch213-cxx11-cu130-x86_64-linux",
    "torch212-cxx11-cu126-x86_64-linux",
    "torch212-cxx11-cu130-x86_64-linux",
]
PAGED = "kernels-community/paged-attention"  # depends on activation: two kernels, several files per variant


class _Watcher(threading.Thread):
    """Looks at every variant folder of the cache, over and over, while a sync runs: a folder it can see must
    hold every locked file of its variant (what a loader would find there)."""

    def __init__(self, cache: Path, lock: Lock) -> None:
        super().__init__(daemon=True)
        self.expected = {
            (entry.commit, variant.name): {f.path for f in variant.files}
            for entry, variant in synccache.targets(lock, None)
        }
        self.cache = cache
        self.seen_partial: list[str] = []
        self.looks = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for snapshots in self.cache.glob("kernels--*/snapshots"):
                for build in snapshots.glob("*/build/*"):
                    expected = self.expected.get((build.parent.parent.name, build.name))
                    if expected is None:
                        continue
                    try:
                        found = {str(p.relative_to(build)) for p in build.rglob("*") if not p.is_dir()}
                    except FileNotFoundError:
                        continue
                    missing = expected - found
                    if missing and build.exists():
                        self.seen_partial.append(f"{build}: missing {sorted(missing)}")
            self.looks += 1


@pytest.mark.slow
def test_an_interrupted_sync_never_shows_half_a_variant(
    user_env: dict[str, str], hub: HubServer, project: Path, tmp_path: Path
) -> None:
    write_pyproject(project, f'"{PAGED}" = "v1"\n', ENVIRONMENTS)
    lock = api.lock(project, hub=fresh_hub(hub)).lock
    rng = random.Random(29)
    hub.faults.latency(0.05, match="/resolve/")  # each file takes a moment: interrupts fall between files
    for attempt in range(20):
        cache = tmp_path / f"cache-{attempt}"
        env = {**user_env, "HF_HUB_CACHE": str(cache)}
        watcher = _Watcher(cache, lock)
        watcher.start()
        since = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kernlock", "sync", "--all-environments", "--project", str(project)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        while proc.poll() is None and not any(r.started >= since for r in hub.log.snapshot()):
            time.sleep(0.01)  # its first request: the command runs (Ctrl-C during Python's own start-up is Python's)
        time.sleep(rng.uniform(0.0, 1.8))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        watcher.stop.set()
        watcher.join()
        assert watcher.looks > 0
        assert watcher.seen_partial == [], watcher.seen_partial[:3]
        if "synced " in out:  # a run that printed its success summary succeeded
            assert proc.returncode == 0, (out, err)
        else:
            assert proc.returncode == 130, (out, err)
            assert "interrupted" in err and "Traceback" not in err
        for build in cache.glob("kernels--*/snapshots/*/build/*"):  # and after it: complete or absent
            expected = watcher.expected[(build.parent.parent.name, build.name)]
            assert expected <= {str(p.relative_to(build)) for p in build.rglob("*") if not p.is_dir()}
    hub.faults.clear()
