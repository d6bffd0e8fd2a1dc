"""`kernlock sync` / `verify` / `show`: exactly the locked files, verified, offline-ready (issue #4).

Real huggingface_hub, kernels and torch against the local Hub; CLI and kernel loads run in fresh processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli import run_cli
from click.testing import CliRunner
from projects import CPU_ENV, has_receipt, receipt_file, write_pyproject

from kernlock import api
from kernlock.cli.app import main
from kernlock.errors import HubError, IntegrityError, LockError, NotSyncedError
from kernlock.hub.client import Hub
from kernlock.lock.model import Lock
from kernlock.project import inputs as projects
from kernlock.sync import cache as caches
from kernlock.sync import engine as syncing
from kernlock.sync.integrity import FileState
from kernlock.testing import Catalog, HubServer

CUDA_ENV = "torch212-cxx11-cu130-x86_64-linux"
ACTIVATION = "kernels-community/activation"
PAGED = "kernels-community/paged-attention"  # kernel-depends on activation version 1 (its own lock entry)


def _lock(project: Path, kernels: str, environments: list[str] | None = None) -> Lock:
    write_pyproject(project, kernels, environments if environments is not None else [CPU_ENV])
    return api.lock(project).lock


def _cache(env: dict[str, str]) -> Path:
    return Path(env["HF_HUB_CACHE"])


def _entry_variant(lock: Lock, repo: str, env: str = CPU_ENV):
    entry = lock.entry_for(repo, env)
    assert entry is not None
    variant = entry.variant_for(env)
    assert variant is not None
    return entry, variant


def _resolve_gets(server: HubServer) -> int:
    return server.log.count(method="GET", contains="/resolve/")


def _cli(*args: str) -> subprocess.CompletedProcess:
    """Run the kernlock CLI in this process (the environment is the test's user_env)."""
    result = CliRunner().invoke(main, list(args))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )


# -- offline-ready ------------------------------------------------------------------------------------------


_LOAD_OFFLINE = """
    import json, kernels
    a1 = kernels.get_kernel("kernels-community/activation", version=1)
    a2 = kernels.get_kernel("kernels-community/activation", revision="{commit}")
    paged = kernels.get_kernel("kernels-community/paged-attention", version=1)
    print(json.dumps([a1.KERNEL_IDENTITY, a2.KERNEL_IDENTITY, paged.DEPENDENCY_IDENTITIES]))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_sync_then_offline_load_with_server_stopped(catalog: Catalog, user_env: dict[str, str], project: Path):
    """The repository holds a README and ~26 other variants: only the locked variant is fetched, and the
    kernels library itself then loads it (by commit, by version=N, and as a kernel dependency) with the
    server stopped and HF_HUB_OFFLINE=1 - the case where `kernels download` + offline load fails."""
    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV, CUDA_ENV])
    with HubServer(catalog.root) as server:
        env = {**user_env, **server.env()}
        result = run_cli("sync", "--project", str(project), env=env)  # no lock yet: sync locks first
        assert result.returncode == 0, result.stderr
        assert "re-locked kernels.lock first (no kernels.lock yet)" in result.stdout
        assert "downloaded kernels-community/activation torch213-cxx11-cpu-x86_64-linux" in result.stdout
        # kernels' own `kernels download` of the same commit, into another cache, for contrast
        lock = api.read_lock(projects.load(project))
        entry, _variant = _entry_variant(lock, ACTIVATION)
        theirs = project.parent / "kernels-project"
        theirs.mkdir()
        (theirs / "kernels.lock").write_text(
            json.dumps([{"dependency": {"repo-id": ACTIVATION, "version": 1}, "lock": {"commit": entry.commit}}])
        )
        their_env = {**env, "HF_HUB_CACHE": str(project.parent / "kernels-cache")}
        downloaded = subprocess.run(
            [sys.executable, "-c", "from kernels.cli import main; main()", "download", str(theirs)],
            env=their_env,
            capture_output=True,
            text=True,
        )
        assert downloaded.returncode == 0, downloaded.stderr

    snapshot = caches.repo_folder(ACTIVATION, _cache(user_env)) / "snapshots" / entry.commit
    assert sorted(p.name for p in (snapshot / "build").iterdir()) == [CPU_ENV]  # not cu128, not README
    assert not (snapshot / "README.md").exists()

    offline = {**user_env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    loaded = _run_python(_LOAD_OFFLINE.format(commit=entry.commit), offline)
    assert loaded.returncode == 0, loaded.stderr
    by_version, by_commit, deps = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert by_version == by_commit == deps[ACTIVATION]
    assert by_version["variant"] == CPU_ENV and by_version["branch"] == "v1"

    their_offline_env = {**offline, "HF_HUB_CACHE": their_env["HF_HUB_CACHE"]}
    theirs_offline = _run_python(_LOAD_OFFLINE.format(commit=entry.commit), their_offline_env)
    assert theirs_offline.returncode != 0  # kernels' own download is not enough to load offline
    assert "offline mode" in theirs_offline.stderr

    result = _cli("sync", "--offline", "--project", str(project))
    assert result.returncode == 0, result.stderr
    assert "checked offline" in result.stdout


@pytest.mark.subprocess
def test_second_sync_makes_zero_requests(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{PAGED}" = "v1"\n')
    hub.log.clear()
    first = run_cli("sync", "--project", str(project), env=user_env)
    assert first.returncode == 0, first.stderr
    files = sum(len(v.files) for _e, v in syncing.targets(lock, [CPU_ENV]))
    assert _resolve_gets(hub) == files  # one GET per locked file, no HEAD, nothing else
    assert hub.log.count(method="HEAD") == 0
    hub.log.clear()

    second = run_cli("sync", "--project", str(project), env=user_env)
    assert second.returncode == 0, second.stderr
    assert "0 downloaded, 2 already verified" in second.stdout
    assert len(hub.log) == 0

    shown = _cli("show", "--json", "--project", str(project))
    rows = json.loads(shown.stdout)
    assert {(r["repo"], r["variant"], r["synced"]) for r in rows} == {
        (ACTIVATION, CPU_ENV, True),
        (PAGED, CPU_ENV, True),
    }
    assert [r["required-by"] for r in rows if r["repo"] == ACTIVATION] == [[PAGED]]
    assert len(hub.log) == 0


def test_show_before_sync_and_table(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    rows = api.show(project).rows
    assert rows[0]["synced"] is False and rows[0]["commit"] == lock.kernels[0].commit
    table = _cli("show", "--project", str(project))
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()
    assert header.split()[:4] == ["kernel", "requested", "ref", "commit"]
    signer = ["huggingface/kernels-community", "build.yaml@refs/heads/main"]
    assert line.split() == [ACTIVATION, "v1", "v1", lock.kernels[0].commit[:12], CPU_ENV, "no", *signer]


@pytest.mark.subprocess
def test_all_environments_fills_a_shared_cache(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV, CUDA_ENV])
    shared = project.parent / "shared-cache"
    env = {**user_env, "KERNELS_CACHE": str(shared)}
    result = run_cli("sync", "--all-environments", "--project", str(project), env=env)
    assert result.returncode == 0, result.stderr
    entry = lock.kernels[0]
    assert sorted(
        p.name for p in (caches.repo_folder(ACTIVATION, shared) / "snapshots" / entry.commit / "build").iterdir()
    ) == sorted([CPU_ENV, CUDA_ENV])
    assert not (_cache(user_env) / "kernels--kernels-community--activation").exists()  # KERNELS_CACHE wins
    checked = run_cli("verify", "--all-environments", "--project", str(project), env=env)
    assert checked.returncode == 0, checked.stderr
    assert "verified 2 variants" in checked.stdout


# -- lock modes ---------------------------------------------------------------------------------------------


def test_locked_frozen_and_default_modes(user_env: dict[str, str], hub: HubServer, project: Path):
    _lock(project, f'"{ACTIVATION}" = "v1"\n')
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n"kernels-community/rotary" = "v1"\n', [CPU_ENV])
    hub.log.clear()

    locked = _cli("sync", "--locked", "--project", str(project))
    assert locked.returncode == 1
    assert "stale" in locked.stderr and "`kernlock lock`" in locked.stderr
    assert "Traceback" not in locked.stderr
    assert len(hub.log) == 0 and not _cache(user_env).exists()

    offline = _cli("sync", "--offline", "--project", str(project))
    assert offline.returncode == 1 and "--frozen" in offline.stderr and len(hub.log) == 0

    both = _cli("sync", "--locked", "--frozen", "--project", str(project))
    assert both.returncode == 2

    frozen = _cli("sync", "--frozen", "--project", str(project))
    assert frozen.returncode == 0, frozen.stderr
    assert "activation" in frozen.stdout and "rotary" not in frozen.stdout
    before = (project / "kernels.lock").read_text()

    default = _cli("sync", "--project", str(project))
    assert default.returncode == 0, default.stderr
    assert "re-locked kernels.lock first" in default.stdout
    assert "downloaded kernels-community/rotary" in default.stdout
    assert (project / "kernels.lock").read_text() != before
    assert _cli("sync", "--locked", "--project", str(project)).returncode == 0


def test_offline_sync_of_an_empty_cache_names_the_fix(user_env: dict[str, str], hub: HubServer, project: Path):
    _lock(project, f'"{ACTIVATION}" = "v1"\n')
    hub.log.clear()
    result = _cli("sync", "--offline", "--project", str(project))
    assert result.returncode == 1
    assert ACTIVATION in result.stderr and "`kernlock sync`" in result.stderr and "without --offline" in result.stderr
    assert len(hub.log) == 0


# -- tampering ----------------------------------------------------------------------------------------------


def test_tampered_and_truncated_files(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    api.sync(project, progress=False)
    hub.log.clear()
    entry, variant = _entry_variant(lock, ACTIVATION)
    root = syncing.variant_path(entry, variant)
    so = next(f.path for f in variant.files if f.path.endswith(".so"))
    tampered = root / "__init__.py"
    tampered.write_text(tampered.read_text().replace("KERNEL_IDENTITY", "KERNEL_IDENTITX", 1))  # same size
    with open(root / so, "r+b") as handle:
        handle.truncate(100)

    verify = _cli("verify", "--project", str(project))
    assert verify.returncode == 1
    for name in (ACTIVATION, CPU_ENV, "__init__.py", so, "`kernlock sync`"):
        assert name in verify.stderr
    assert "size 100 bytes" in verify.stderr

    offline = _cli("sync", "--offline", "--project", str(project))
    assert offline.returncode == 1 and "__init__.py" in offline.stderr and so in offline.stderr

    with pytest.raises(IntegrityError, match=r"kernels-community/activation .*__init__\.py.*`kernlock sync`"):
        syncing.check_variant(entry, variant)

    hub.log.clear()
    repaired = _cli("sync", "--project", str(project))
    assert repaired.returncode == 0, repaired.stderr
    assert "repaired kernels-community/activation" in repaired.stdout
    assert _resolve_gets(hub) == 2  # exactly the two bad files
    assert _cli("verify", "--project", str(project)).returncode == 0
    assert syncing.check_variant(entry, variant, full=True) == root


def test_a_folder_where_the_locked_ref_belongs_does_not_fail_the_sync(
    user_env: dict[str, str], hub: HubServer, project: Path
):
    """``refs/<ref>`` only serves kernels' own ``version=N`` lookup (every locked load is by commit): a cache where
    it cannot be written (here a folder holds its place) still syncs, and the variant is intact."""
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    entry, variant = _entry_variant(lock, ACTIVATION)
    ref = caches.repo_folder(ACTIVATION) / "refs" / entry.ref
    (ref / "not-a-ref").mkdir(parents=True)
    report = syncing.sync(lock, [CPU_ENV], progress=False)
    assert [v.status for v in report.variants] == ["downloaded"]
    assert ref.is_dir() and syncing.check_variant(entry, variant, full=True) == report.variants[0].path


def test_receipt_check_survives_touch_and_catches_tampering(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    entry, variant = _entry_variant(lock, ACTIVATION)
    with pytest.raises(NotSyncedError, match="`kernlock sync`"):
        syncing.check_variant(entry, variant)
    with pytest.raises(NotSyncedError, match="`kernlock sync`"):
        syncing.ensure_variant(entry, variant, offline=True)
    path = syncing.ensure_variant(entry, variant)
    assert path == syncing.variant_path(entry, variant, _cache(user_env))
    receipt = json.loads(receipt_file(entry, variant).read_text())
    assert set(receipt["files"]) == {f.path for f in variant.files}
    assert syncing.is_synced(entry, variant)

    os.utime(path / "__init__.py", ns=(1, 1))  # new mtime, same bytes: re-hashed once, receipt refreshed
    assert not syncing.is_synced(entry, variant)
    assert syncing.check_variant(entry, variant) == path
    assert syncing.is_synced(entry, variant)

    (path / "_ops.py").write_text("import os\n")  # tampered: ensure_variant offline refuses, online repairs
    with pytest.raises(IntegrityError):
        syncing.ensure_variant(entry, variant, offline=True)
    hub.log.clear()
    assert syncing.ensure_variant(entry, variant) == path
    assert _resolve_gets(hub) == 1


def _receipts(lock: Lock) -> dict[str, tuple[bytes, int, int, int]]:
    """Every synced variant's receipt: its bytes, mtime_ns, inode and ctime_ns (a rewrite changes the inode)."""
    found = {}
    for entry, variant in syncing.targets(lock, None):
        path = receipt_file(entry, variant)
        st = path.stat()
        found[f"{entry.repo} {variant.name}"] = (path.read_bytes(), st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    return found


def test_verify_rewrites_no_receipt_that_still_holds(user_env: dict[str, str], hub: HubServer, project: Path):
    """`verify` re-hashes every file, but a receipt that already says what it found is left as it is (not even
    rewritten with the same bytes); a touched file gets its receipt record updated, a tampered one is reported
    and its receipt never vouches for it."""
    lock = _lock(project, f'"{PAGED}" = "v1"\n', [CPU_ENV, CUDA_ENV])
    syncing.sync(lock, [CPU_ENV, CUDA_ENV], progress=False)
    before = _receipts(lock)
    assert len(before) == 4  # paged-attention and activation, two environments each
    checked = _cli("verify", "--all-environments", "--project", str(project))
    assert checked.returncode == 0, checked.stderr
    assert "verified 4 variants" in checked.stdout
    assert _receipts(lock) == before

    entry, variant = _entry_variant(lock, ACTIVATION)
    key = f"{ACTIVATION} {CPU_ENV}"
    touched = syncing.variant_path(entry, variant) / "__init__.py"
    os.utime(touched, ns=(1, 1))  # same bytes, new stat: re-hashed, found intact, its receipt record updated
    assert _cli("verify", "--all-environments", "--project", str(project)).returncode == 0
    after = _receipts(lock)
    assert {k: v for k, v in after.items() if k != key} == {k: v for k, v in before.items() if k != key}
    records = json.loads(after[key][0])["files"]
    assert records["__init__.py"]["stat"] == caches.stat_key(touched.stat())
    assert records["__init__.py"]["stat"] != json.loads(before[key][0])["files"]["__init__.py"]["stat"]

    touched.write_text(touched.read_text().replace("KERNEL_IDENTITY", "KERNEL_IDENTITX", 1))  # tampered
    tampered = _cli("verify", "--all-environments", "--project", str(project))
    assert tampered.returncode == 1 and "__init__.py" in tampered.stderr and "mismatch" in tampered.stderr
    assert _receipts(lock) == after  # not refreshed: the stat key it holds no longer vouches for the file
    assert not syncing.is_synced(entry, variant)
    with pytest.raises(IntegrityError, match=r"__init__\.py"):
        syncing.check_variant(entry, variant)


def test_verify_finds_the_same_with_and_without_threads(
    user_env: dict[str, str], hub: HubServer, project: Path, monkeypatch: pytest.MonkeyPatch
):
    """`verify` hashes in threads only above PARALLEL_BYTES (the fixtures are far below it): with the threshold
    at 0 it fans out, and finds exactly what it finds in one thread, in the same order."""
    from kernlock.sync import verify as verifying

    lock = _lock(project, f'"{PAGED}" = "v1"\n', [CPU_ENV, CUDA_ENV])
    syncing.sync(lock, [CPU_ENV, CUDA_ENV], progress=False)
    entry, variant = _entry_variant(lock, ACTIVATION, CUDA_ENV)
    root = syncing.variant_path(entry, variant)
    (root / "__init__.py").write_text("tampered\n")
    (root / "stray.py").write_text("")
    serial = syncing.verify(lock, [CPU_ENV])
    monkeypatch.setattr(verifying, "PARALLEL_BYTES", 0)
    threaded = syncing.verify(lock, [CPU_ENV])
    assert threaded == serial
    assert len(serial.checked) == 4
    assert {(p.variant, p.path, p.kind) for p in serial.problems} == {
        (CUDA_ENV, "__init__.py", FileState.MISMATCH),
        (CUDA_ENV, "stray.py", FileState.UNEXPECTED),
    }


# -- network faults, resume, concurrency --------------------------------------------------------------------


def test_faults_are_survived(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{PAGED}" = "v1"\n')
    hub.log.clear()
    hub.faults.status(429, times=2, retry_after=0.01, match="/resolve/")
    hub.faults.status(503, times=2, match="/resolve/")
    hub.faults.status(500, times=1, match="/resolve/")
    hub.faults.drop(times=1, match=r"\.so$")
    hub.faults.truncate(times=1, match=r"\.so$")
    report = syncing.sync(lock, [CPU_ENV], hub=Hub(backoff=0.01), progress=False)
    assert {v.status for v in report.variants} == {"downloaded"}
    assert syncing.verify(lock, [CPU_ENV]).problems == ()
    statuses = [r.status for r in hub.log.entries if "/resolve/" in r.path]
    files = sum(len(v.files) for _e, v in syncing.targets(lock, [CPU_ENV]))
    assert len(statuses) == files + 7  # each fault cost exactly one more request
    assert [statuses.count(code) for code in (429, 503, 500, 0)] == [2, 2, 1, 1]  # 0: the dropped connection


def test_persistent_5xx_is_reported_and_nothing_half_written(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    hub.faults.status(503, times=None, match=r"\.so$")
    with pytest.raises(HubError, match=r"HTTP 503.*attempt") as err:
        syncing.sync(lock, [CPU_ENV], hub=Hub(backoff=0.01, retries=2), progress=False)
    assert "try again later" in str(err.value)
    entry, variant = _entry_variant(lock, ACTIVATION)
    assert not syncing.variant_path(entry, variant).exists()  # whole or not at all: none of its files is visible
    assert not has_receipt(entry, variant)
    hub.faults.clear()
    result = _cli("verify", "--project", str(project))
    assert result.returncode == 1 and f"{ACTIVATION} {variant.name}" in result.stderr and "not synced" in result.stderr


def test_interrupted_download_resumes(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    entry, variant = _entry_variant(lock, ACTIVATION)
    so = next(f for f in variant.files if f.path.endswith(".so"))
    api.sync(project, progress=False)
    blob = caches.repo_folder(ACTIVATION) / "blobs" / so.digest
    content = blob.read_bytes()
    blob.unlink()
    blob.with_name(blob.name + ".incomplete").write_bytes(content[: len(content) // 2])  # as a killed sync leaves
    hub.log.clear()
    assert api.sync(project, progress=False).variants[0].downloaded == (so.path,)
    assert [r.status for r in hub.log.entries] == [206]
    assert blob.read_bytes() == content and not blob.with_name(blob.name + ".incomplete").exists()

    blob.unlink()
    blob.with_name(blob.name + ".incomplete").write_bytes(b"\0" * (len(content) // 2))  # a wrong partial file
    hub.log.clear()
    api.sync(project, progress=False)
    assert [r.status for r in hub.log.entries] == [206, 200]  # resumed, failed the hash, fetched again
    assert syncing.check_variant(entry, variant, full=True)


@pytest.mark.slow
@pytest.mark.subprocess
def test_sixteen_concurrent_syncs_on_one_cache(user_env: dict[str, str], hub: HubServer, project: Path):
    lock = _lock(project, f'"{PAGED}" = "v1"\n')
    shared = project.parent / "shared"
    env = {**user_env, "KERNELS_CACHE": str(shared)}
    hub.faults.latency(0.25, match="/resolve/")  # downloads overlap
    hub.log.clear()
    command = [sys.executable, "-m", "kernlock", "sync", "--all-environments", "--project", str(project)]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(16)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 16, [err for _out, err in outputs]
    files = sum(len(v.files) for _e, v in syncing.targets(lock, [CPU_ENV]))
    assert _resolve_gets(hub) == files  # one copy: every file fetched once across all 16 processes
    assert syncing.verify(lock, [CPU_ENV], cache=shared).problems == ()
    leftovers = [p for p in shared.rglob("*") if p.name.endswith((".incomplete", ".tmp"))]
    assert leftovers == []


def test_sync_needs_this_environment_in_the_lock(user_env: dict[str, str], hub: HubServer, project: Path):
    _lock(project, f'"{ACTIVATION}" = "v1"\n', [CUDA_ENV])
    with pytest.raises(LockError, match=r"torch213-cxx11-cpu-x86_64-linux.*--all-environments"):
        api.sync(project)


def test_verify_says_what_it_did_not_check(user_env: dict[str, str], hub: HubServer, project: Path):
    """`verify` with nothing of this machine to check is not a green "all match" (issue 42): it names what it
    could not check and why, exit 1; a partial check says what it left out."""
    _lock(project, f'"{ACTIVATION}" = "v1"\n', [CUDA_ENV])  # this machine (CPU) is not an environment of the lock
    for _ in range(2):
        nothing = _cli("verify", "--project", str(project))
        assert nothing.returncode == 1, nothing.stdout
        assert "all match" not in nothing.stdout + nothing.stderr
        line = nothing.stderr.strip().splitlines()[-1]
        assert line.startswith("error: nothing verified") and "none of kernels.lock's 1 variant" in line, line
        assert f"this machine ({CPU_ENV}) is not an environment of kernels.lock" in line
        assert "--all-environments" in line, line
    _lock(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV, CUDA_ENV])
    api.sync(project)  # this machine's variant only
    partial = _cli("verify", "--project", str(project))
    assert partial.returncode == 0, partial.stderr
    assert "verified 1 variant" in partial.stdout and "all match kernels.lock" in partial.stdout
    assert f"not checked: 1 variant of other environments ({CUDA_ENV}), not in this cache" in partial.stdout


def test_add_syncs_unless_no_sync(user_env: dict[str, str], hub: HubServer, project: Path):
    write_pyproject(project, "", [CPU_ENV])
    skipped = _cli("add", f"{ACTIVATION}@v1", "--no-sync", "--project", str(project))
    assert skipped.returncode == 0, skipped.stderr
    assert "synced" not in skipped.stdout and not _cache(user_env).exists()
    added = _cli("add", f"{ACTIVATION}@v1", "--project", str(project))
    assert added.returncode == 0, added.stderr
    assert f"downloaded {ACTIVATION} {CPU_ENV}" in added.stdout
    assert "synced 1 variant of 1 kernel" in added.stdout


def test_signature_files_are_locked_and_synced_with_their_variant(
    user_env: dict[str, str], hub: HubServer, project: Path
):
    """kernels is starting to validate `metadata.json.sigstore` at load: it is locked, hashed and synced beside the
    metadata.json it signs, so that validation finds exactly what the publisher signed."""
    lock = _lock(project, f'"{ACTIVATION}" = "v1"\n')
    entry, variant = _entry_variant(lock, ACTIVATION)
    signed = {f.path: f for f in variant.files}
    assert {"metadata.json", "metadata.json.sigstore"} <= set(signed)
    api.sync(project, progress=False)
    folder = syncing.variant_path(entry, variant)
    for name in ("metadata.json", "metadata.json.sigstore"):
        assert caches.file_hash(folder / name, signed[name].algorithm) == signed[name].hash
