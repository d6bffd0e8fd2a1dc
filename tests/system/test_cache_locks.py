"""A cache on a filesystem whose ``flock`` is refused (ENOLCK, ENOSYS: NFS without a lock manager, Lustre without
``-o flock``) or locks nothing (issue 24): `kernlock sync` still ends with verified files, 8 concurrent syncs
still do, and no half file is ever visible (kernlock.util.sharing: per-process partial files, atomic renames).

The filesystem is simulated with an LD_PRELOAD shim over libc's ``flock``, compiled here with ``cc`` (skipped
without one): the real kernlock, filelock and huggingface_hub run above it, unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from projects import CPU_ENV, write_pyproject

from kernlock import api
from kernlock.sync import engine as syncing
from kernlock.testing import HubServer

pytestmark = pytest.mark.subprocess

PAGED = "kernels-community/paged-attention"  # depends on activation v1: two kernels, several files each

SHIM = r"""
#include <errno.h>
#include <stdlib.h>
#include <string.h>
int flock(int fd, int operation) {
    const char *how = getenv("FLOCK_SHIM");
    (void)fd; (void)operation;
    if (how && strcmp(how, "enolck") == 0) { errno = ENOLCK; return -1; }
    if (how && strcmp(how, "enosys") == 0) { errno = ENOSYS; return -1; }
    return 0;  /* "noop": every lock is granted, nothing is locked */
}
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the flock shim")
    folder = tmp_path_factory.mktemp("shim")
    (folder / "flock_shim.c").write_text(SHIM)
    library = folder / "flock_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(folder / "flock_shim.c")], check=True)
    return library


def _probe(shim: Path, how: str, env: dict[str, str]) -> str:
    """What ``fcntl.flock`` does under the shim (proves the shim is in effect)."""
    code = "import fcntl, os\ntry:\n fcntl.flock(os.open('/dev/null', os.O_RDONLY), fcntl.LOCK_EX); print('ok')\n"
    code += "except OSError as e:\n print(e.errno)"
    env = {**env, "LD_PRELOAD": str(shim), "FLOCK_SHIM": how}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()


def _sync_argv(project: Path) -> list[str]:
    return [sys.executable, "-m", "kernlock", "sync", "--project", str(project)]


@pytest.mark.parametrize("how", ["enolck", "enosys"])
def test_sync_where_flock_is_refused(shim: Path, how: str, user_env: dict[str, str], hub: HubServer, project: Path):
    import errno

    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV])
    lock = api.lock(project).lock
    assert _probe(shim, how, user_env) == str(getattr(errno, how.upper()))
    cache = project.parent / "nfs-cache"
    env = {**user_env, "KERNELS_CACHE": str(cache), "LD_PRELOAD": str(shim), "FLOCK_SHIM": how}
    done = subprocess.run(_sync_argv(project), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert syncing.verify(lock, [CPU_ENV], cache=cache).problems == ()
    again = subprocess.run(_sync_argv(project), env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 downloaded" in again.stdout, again.stdout + again.stderr


@pytest.mark.slow
def test_eight_concurrent_syncs_where_flock_locks_nothing(
    shim: Path, user_env: dict[str, str], hub: HubServer, project: Path
):
    """Every lock is granted and none holds: 8 syncs overlap on every file. Each ends with exit 0 and verified
    files; a watcher sees no file in blobs/ or snapshots/ with other bytes than the lock's at any time."""
    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV])
    lock = api.lock(project).lock
    assert _probe(shim, "noop", user_env) == "ok"
    cache = project.parent / "noop-lock-cache"
    sizes = {f.digest: f.size for _e, v in syncing.targets(lock, [CPU_ENV]) for f in v.files}
    env = {**user_env, "KERNELS_CACHE": str(cache), "LD_PRELOAD": str(shim), "FLOCK_SHIM": "noop"}
    hub.faults.latency(0.2, match="/resolve/")  # downloads overlap
    seen_half: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for blob in cache.glob("kernels--*/blobs/*"):
                if blob.name.endswith((".incomplete", ".tmp")):
                    continue
                try:
                    size = blob.stat().st_size
                except FileNotFoundError:
                    continue
                if blob.name in sizes and size != sizes[blob.name]:
                    seen_half.append(f"{blob.name}: {size} of {sizes[blob.name]} bytes")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    procs = [
        subprocess.Popen(_sync_argv(project), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    stop.set()
    watcher.join()
    assert [p.returncode for p in procs] == [0] * 8, [err for _out, err in outputs]
    assert seen_half == []
    assert syncing.verify(lock, [CPU_ENV], cache=cache).problems == ()
    leftovers = [p for p in cache.rglob("*") if p.name.endswith((".incomplete", ".tmp"))]
    assert leftovers == []


RANK_SYNC = """
import json, sys
from pathlib import Path
from kernlock import api
report = api.sync(Path(sys.argv[1]), progress=False)
print(json.dumps({"relocked": report.relocked, "commits": sorted((v.repo, v.commit) for v in report.variants)}))
"""


def _api_requests(hub: HubServer) -> int:
    """Requests of a resolution: refs, trees, the publisher's trust (not downloads, not huggingface_hub's own)."""
    return len([r for r in hub.log.entries if r.path.startswith(("/api/kernels/", "/api/organizations/"))])


@pytest.mark.slow
def test_eight_ranks_on_a_stale_lock_resolve_once(user_env: dict[str, str], hub: HubServer, project: Path):
    """pyproject.toml changed and 8 ranks run `kernlock sync` at once: the project lock lets one re-lock (as many
    Hub requests as one re-lock makes alone), one write of kernels.lock, and every rank syncs the same commits."""
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', [CPU_ENV])
    api.lock(project)
    write_pyproject(project, f'"{PAGED}" = "v1"\n"kernels-community/activation" = "v1"\n', [CPU_ENV])  # now stale
    alone = project.parent / "alone"
    shutil.copytree(project, alone)
    shutil.copytree(user_env["KERNLOCK_CACHE"], project.parent / "kl-alone")  # the same cached Hub answers
    hub.log.clear()
    single = subprocess.run(
        [sys.executable, "-c", RANK_SYNC, str(alone)],
        env={**user_env, "KERNLOCK_CACHE": str(project.parent / "kl-alone"), "HF_HUB_CACHE": str(alone / "c")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    one_relock = _api_requests(hub)
    assert one_relock > 0

    hub.log.clear()
    hub.faults.latency(0.05, match="/api/")  # the ranks overlap while the first one resolves
    before = (project / "kernels.lock").stat().st_ino
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SYNC, str(project)],
            env=user_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _out, err in outputs]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _err in outputs]
    assert sum(r["relocked"] is not None for r in reports) == 1, reports
    assert len({json.dumps(r["commits"]) for r in reports}) == 1
    assert _api_requests(hub) == one_relock, "one resolution, not one per rank"
    assert (project / "kernels.lock").stat().st_ino != before
    assert (project / ".kernlock" / ".gitignore").is_file()
