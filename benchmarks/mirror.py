"""A fleet of nodes against `kernlock serve` (upstream Hub stopped) and against the local test Hub.

    python benchmarks/mirror.py            # full: 32 clients, 16 MiB .so files, then 4 clients with 256 MiB files
    python benchmarks/mirror.py --quick    # development: 4 clients, 4 MiB, then 2 clients with 32 MiB
    python benchmarks/mirror.py --static   # 64 clients: kernlock serve against `python -m http.server`, same bytes

Builds kernel repositories (one large LFS ``.so`` per variant) under a temporary folder, serves them with the
local test Hub, locks them for this machine and writes a bundle (`kernlock bundle`): the only Hub requests. The
Hub is then **stopped** and `kernlock serve --from BUNDLE` (gunicorn, 2 workers x 8 threads) serves the fleet:
half the clients run `kernlock sync`, half run plain `kernels.get_kernel` in a process without kernlock, each
with its own empty cache, all started at once. Every client is verified afterwards (kernlock's clients with
`kernlock verify`'s check, the others by hashing the files they downloaded against kernels.lock).

Reported per run: requests the server answered, MB the clients received (locked files in their caches), wall
time from the first start to the last exit, and the peak resident memory of all server processes (sampled every
20 ms). The same fleet then runs against the test Hub for comparison, and a last mirror run with much larger
files shows that the mirror's memory does not grow with file size (files are sent with ``sendfile``).

``--static`` measures the server alone: 64 clients (4 processes x 16 threads, a new connection per request, as
``http.server`` speaks HTTP/1.0) GET every locked file of the bundle ``--rounds`` times, once from `kernlock serve
--from BUNDLE` (gunicorn, 2 workers x 8 threads) and once from ``python -m http.server`` serving a folder that holds
the same bytes at the same URL paths; it prints requests/s and MB/s of each and their ratio.

Bytecode: compiled first (``python -m compileall -q``), since PYTHONDONTWRITEBYTECODE=1 is set on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import free_port, in_scratch_folder

from kernlock.testing.mirror_process import MirrorProcess, tree_rss

CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"
GET_KERNEL = """
import json, sys
sys.modules["kernlock"] = None  # a node without kernlock
import kernels
for repo in sys.argv[1:]:
    kernels.get_kernel(repo, version=1)
print(json.dumps({k.repo_info.repo_id: k.repo_info.revision for k in kernels.get_loaded_kernels() if k.repo_info}))
"""
HUB_CHILD = """
import signal, sys, threading
from kernlock.testing import HubServer
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
with HubServer(sys.argv[1], port=int(sys.argv[2])) as server:
    print(server.url, flush=True)
    stop.wait()
    print(len(server.log), flush=True)
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run for development")
    parser.add_argument("--clients", type=int, default=None, help="client processes (default 32; quick: 4)")
    parser.add_argument("--kernels", type=int, default=2, help="locked kernels (default 2)")
    parser.add_argument("--static", action="store_true", help="64 clients: the mirror against a static server")
    parser.add_argument("--rounds", type=int, default=2, help="--static: GETs of every file per client")
    parser.add_argument("--runs", type=int, default=1, help="--static: runs of each server (the best is kept)")
    return parser.parse_args()


def main() -> int:
    args = _args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).parents[1] / "kernlock")], check=True)
    return in_scratch_folder("kernlock-bench-mirror-", lambda work: _run(args, work))


class _Peak:
    """Samples the summed RSS of a process tree every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, tree_rss(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _build(work: Path, kernels: int, so_mib: float, env: dict[str, str]) -> tuple[Path, Path, list[str], Path]:
    """Repos, a locked project and its bundle (made against a test Hub that is stopped afterwards)."""
    from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo, set_org_trust

    hub_root = work / "hub"
    set_org_trust(hub_root, "bench-mirror", True)
    repos = [f"bench-mirror/kernel-{i:02d}" for i in range(kernels)]
    for repo in repos:
        variants = [CPU_VARIANT, "torch213-cxx11-cu128-x86_64-linux"]
        create_kernel_repo(hub_root, repo, {"v1": variants}, so_size=int(so_mib * 2**20))
    project = work / "project"
    project.mkdir()
    body = "".join(f'"{r}" = "v1"\n' for r in repos)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "fleet"\nversion = "0"\n\n[tool.kernlock]\nenvironments = ["{CPU_ENV}"]\n\n'
        f"[tool.kernlock.kernels]\n{body}"
    )
    bundle = work / "fleet.tar"
    with HubServer(hub_root) as hub:
        connected = {**env, **hub.env(), "HF_HUB_CACHE": str(work / "connected-cache")}
        for args in (["lock"], ["sync"]):
            subprocess.run(
                [sys.executable, "-m", "kernlock", *args, "--project", str(project)], env=connected, check=True
            )
        rss = _peak_rss_of(
            [sys.executable, "-m", "kernlock", "bundle", "-o", str(bundle), "--project", str(project)], connected
        )
        print(
            f"connected side: lock + sync + bundle cost {len(hub.log)} Hub requests; bundle "
            f"{bundle.stat().st_size >> 20} MiB written with a peak RSS of {rss >> 20} MB"
        )
    return hub_root, project, repos, bundle


def _peak_rss_of(argv: list[str], env: dict[str, str]) -> int:
    """Run ``argv``; its peak resident memory in bytes, sampled (``wait4``'s ru_maxrss would count the memory
    of this process that the child shares between fork and exec)."""
    proc = subprocess.Popen(argv, env=env)
    peak = _Peak(proc.pid)
    if proc.wait():
        raise subprocess.CalledProcessError(proc.returncode, argv)
    return peak.stop()


def _fleet(url: str, clients: int, project: Path, repos: list[str], work: Path, env: dict[str, str]) -> dict:
    """Start every client at once; wait; verify each. Returns wall time, bytes received, failures."""
    procs = []
    started = time.monotonic()
    for i in range(clients):
        cache = work / f"node-{i:02d}"
        node = {**env, "HF_ENDPOINT": url, "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache / "home")}
        if i % 2 == 0:
            argv = [
                sys.executable,
                "-m",
                "kernlock",
                "sync",
                "--frozen",
                "--all-environments",
                "--project",
                str(project),
            ]
        else:
            argv = [sys.executable, "-c", GET_KERNEL, *repos]
        procs.append(
            (cache, i % 2 == 0, subprocess.Popen(argv, env=node, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        )
    outputs = [(cache, kernlock, p.communicate()) for cache, kernlock, p in procs]
    wall = time.monotonic() - started
    return {"wall": wall, **_verify(project, outputs, [p.returncode for _, _, p in procs])}


def _verify(project: Path, outputs: list, codes: list[int]) -> dict:
    from kernlock.lock import file as lockfile
    from kernlock.sync import cache as caches
    from kernlock.sync import engine as syncing

    lock = lockfile.read(project / "kernels.lock")
    pairs = syncing.targets(lock, [CPU_ENV])
    failed, received = 0, 0
    for (cache, kernlock, (out, err)), code in zip(outputs, codes, strict=True):
        ok = code == 0
        if ok and kernlock:
            ok = syncing.verify(lock, [CPU_ENV], cache=cache).ok
        elif ok:
            loaded = json.loads(out.decode().strip().splitlines()[-1])
            ok = all(loaded.get(e.repo) == e.commit for e, _ in pairs)
            for entry, variant in pairs:
                root = cache / f"kernels--{entry.repo.replace('/', '--')}" / "snapshots" / entry.commit / "build"
                files = [(root / variant.name / f.path, f) for f in variant.files]
                ok = ok and all(caches.file_hash(p, f.algorithm) == f.hash for p, f in files)
        if not ok:
            failed += 1
            print(f"client in {cache} failed (exit {code}): {err.decode()[-800:]}", file=sys.stderr)
        received += sum(f.size for _, v in pairs for f in v.files) if ok else 0
    return {"failed": failed, "received": received}


def _mirror_run(bundle: Path, clients: int, project: Path, repos: list[str], work: Path, env: dict) -> dict:
    with MirrorProcess(["--from", str(bundle)], env, work / "access.log", workers=2, threads=8) as mirror:
        peak = _Peak(mirror.proc.pid)
        result = _fleet(mirror.url, clients, project, repos, work / "nodes", env)
        result["rss"] = peak.stop()
        result["requests"] = len(mirror.requests())
    return result


def _hub_run(hub_root: Path, clients: int, project: Path, repos: list[str], work: Path, env: dict) -> dict:
    port = free_port()
    hub = subprocess.Popen(
        [sys.executable, "-c", HUB_CHILD, str(hub_root), str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the tracebacks of connections the clients reset at exit
        text=True,
    )
    assert hub.stdout is not None
    url = hub.stdout.readline().strip()
    peak = _Peak(hub.pid)
    result = _fleet(url, clients, project, repos, work / "hub-nodes", env)
    result["rss"] = peak.stop()
    hub.terminate()
    result["requests"] = int(hub.communicate(timeout=30)[0].strip() or 0)
    return result


LOADER = """
import http.client, json, sys, threading
host, port, threads, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
paths = json.loads(sys.stdin.readline())
totals, errors, guard = [0, 0], [], threading.Lock()
def client():
    done = received = 0
    for _ in range(rounds):
        for path in paths:
            conn = http.client.HTTPConnection(host, port, timeout=120)
            conn.request("GET", path)
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            if answer.status != 200:
                errors.append(answer.status)
            done, received = done + 1, received + len(body)
    with guard:
        totals[0] += done
        totals[1] += received
sys.stdin.readline()  # go
workers = [threading.Thread(target=client) for _ in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps({"requests": totals[0], "bytes": totals[1], "errors": len(errors)}))
"""


def _load(port: int, paths: list[str], rounds: int, env: dict[str, str]) -> dict:
    """64 clients (4 processes x 16 threads) GET every path ``rounds`` times, all started at once."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LOADER, "127.0.0.1", str(port), "16", str(rounds)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for _ in range(4)
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(paths) + "\n")
        proc.stdin.flush()
    started = time.monotonic()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        results.append(json.loads(proc.stdout.read()))
        proc.wait()
    wall = time.monotonic() - started
    total = {key: sum(r[key] for r in results) for key in ("requests", "bytes", "errors")}
    return {**total, "wall": wall, "rps": total["requests"] / wall, "mbps": total["bytes"] / 1e6 / wall}


def _static_run(args: argparse.Namespace, work: Path) -> int:
    import shutil

    from kernlock.lock import file as lockfile
    from kernlock.sync import engine as syncing

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_", "KERNLOCK_"))}
    env.update({"HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    so_mib = 4 if args.quick else 16
    _, project, _repos, bundle = _build(work / "static", args.kernels, so_mib, env)
    lock = lockfile.read(project / "kernels.lock")
    cache = work / "static" / "connected-cache"
    site, paths = work / "static-site", []
    for entry, variant in syncing.targets(lock, [CPU_ENV]):
        snapshot = cache / f"kernels--{entry.repo.replace('/', '--')}" / "snapshots" / entry.commit
        for f in variant.files:
            url = f"/kernels/{entry.repo}/resolve/{entry.commit}/build/{variant.name}/{f.path}"
            target = site / url.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(snapshot / "build" / variant.name / f.path, target)
            paths.append(url)
    mirror_best, static_best = None, None
    for _ in range(args.runs):
        with MirrorProcess(["--from", str(bundle)], env, work / "access.log", workers=2, threads=8) as mirror:
            result = _load(mirror.port, paths, args.rounds, env)
        mirror_best = result if mirror_best is None or result["rps"] > mirror_best["rps"] else mirror_best
        port = free_port()
        static = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(site), str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_for(port)
            result = _load(port, paths, args.rounds, env)
        finally:
            static.terminate()
            static.wait()
        static_best = result if static_best is None or result["rps"] > static_best["rps"] else static_best
    assert mirror_best is not None and static_best is not None
    size = sum(f.size for _e, v in syncing.targets(lock, [CPU_ENV]) for f in v.files)
    rounds = f"{args.rounds} rounds x {len(paths)} files ({size / 1e6:.1f} MB a round)"
    print(f"\n64 clients x {rounds}, best of {args.runs}")
    print("| server | requests | errors | wall s | requests/s | MB/s |")
    print("|---|---|---|---|---|---|")
    for name, r in (("kernlock serve (gunicorn 2x8)", mirror_best), ("python -m http.server", static_best)):
        print(f"| {name} | {r['requests']} | {r['errors']} | {r['wall']:.2f} | {r['rps']:.0f} | {r['mbps']:.0f} |")
    print(f"ratio (mirror / static): {mirror_best['rps'] / static_best['rps']:.2f}x requests/s")
    return 1 if mirror_best["errors"] or static_best["errors"] else 0


def _wait_for(port: int) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _run(args: argparse.Namespace, work: Path) -> int:
    if args.static:
        return _static_run(args, work)
    clients = args.clients or (4 if args.quick else 32)
    small, big, big_clients = (4, 32, 2) if args.quick else (16, 256, 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_", "KERNLOCK_"))}
    env.update({"HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    for key in ("DO_NOT_TRACK", "DISABLE_TELEMETRY", "LOCAL_KERNELS"):
        env.pop(key, None)
    rows = []
    hub_root, project, repos, bundle = _build(work / "small", args.kernels, small, env)
    rows.append(
        ("kernlock serve (Hub stopped)", small, clients, _mirror_run(bundle, clients, project, repos, work, env))
    )
    rows.append(("local test Hub", small, clients, _hub_run(hub_root, clients, project, repos, work, env)))
    _, project, repos, bundle = _build(work / "big", 1, big, env)
    rows.append(
        (
            "kernlock serve (Hub stopped)",
            big,
            big_clients,
            _mirror_run(bundle, big_clients, project, repos, work / "big", env),
        )
    )
    print()
    print("| server | .so size | clients | requests | MB received | wall s | peak server RSS MB | clients verified |")
    print("|---|---|---|---|---|---|---|---|")
    for name, size, n, r in rows:
        verified = f"{n - r['failed']}/{n}"
        print(
            f"| {name} | {size} MiB | {n} | {r['requests']} | {r['received'] / 2**20:.0f} | {r['wall']:.1f} | "
            f"{r['rss'] / 2**20:.0f} | {verified} |"
        )
    print("\nHub requests after bundling: 0 (the Hub was stopped during every mirror run)")
    return 1 if any(r["failed"] for name, *_, r in rows if name.startswith("kernlock")) else 0


if __name__ == "__main__":
    sys.exit(main())
