"""Requests and wall time of a cold `kernlock sync`, a no-op sync, and `kernels download` of the same lock.

    python benchmarks/sync.py [--kernels 4] [--so-mib 32] [--latency 0.0]

Builds kernel repositories (README + several build variants per commit, one large LFS ``.so`` per variant) under
a temporary folder, serves them with kernlock's local Hub, locks them for this machine, then measures in this
process (imports warmed up, so only the work is timed):

- ``kernlock sync`` cold (empty cache) and again (no-op: every file present and verified by its receipt);
- ``kernels download`` (kernels' own CLI code path) of the same commits into another cache, cold and again;
- for context, a whole ``kernlock sync --frozen`` CLI process doing the no-op (interpreter start + imports).

Goal: the no-op sync makes zero requests and takes < 10% of the cold sync.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import free_port, in_scratch_folder


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", type=int, default=4, help="locked kernels (default 4)")
    parser.add_argument("--so-mib", type=float, default=32, help="size of each variant's .so in MiB (default 32)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every Hub request")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-sync-", lambda work: _run(args, work))


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    # huggingface_hub and kernels read these at import: set them before anything imports them.
    os.environ.update(
        {
            "HF_ENDPOINT": f"http://127.0.0.1:{port}",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(work / "hf-home"),
            "HF_HUB_CACHE": str(work / "unused-cache"),
            "KERNELS_CACHE": str(work / "kernels-cache"),  # kernels' download target (read at its import)
            "KERNLOCK_CACHE": str(work / "kernlock-own"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
    )
    for key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK", "DISABLE_TELEMETRY", "LOCAL_KERNELS"):
        os.environ.pop(key, None)

    from kernlock.testing.fixtures import CPU_VARIANT, KINDS, create_kernel_repo, set_org_trust
    from kernlock.testing.server import HubServer

    hub_root = work / "hub"
    variants = [
        CPU_VARIANT,
        "torch213-cxx11-cu128-x86_64-linux",
        "torch213-cxx11-cu130-x86_64-linux",
        "torch212-cxx11-cpu-x86_64-linux",
        "torch213-metal-aarch64-darwin",
    ]
    set_org_trust(hub_root, "bench-sync", True)
    repos = [f"bench-sync/kernel-{i:02d}" for i in range(args.kernels)]
    for i, repo in enumerate(repos):
        create_kernel_repo(
            hub_root, repo, {"v1": variants}, kind=KINDS[i % len(KINDS)], so_size=int(args.so_mib * 2**20)
        )

    import kernels.cli.download as kernels_download

    from kernlock import api
    from kernlock import sync as syncing
    from kernlock.environment import detect
    from kernlock.hub import Hub

    env = str(detect())  # imports torch once, outside the timings
    project = work / "project"
    project.mkdir()
    kernels_table = "".join(f'"{repo}" = "v1"\n' for repo in repos)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "bench"\nversion = "0"\n\n[tool.kernlock]\nenvironments = ["{env}"]\n\n'
        f"[tool.kernlock.kernels]\n{kernels_table}"
    )
    ours = work / "kernlock-cache"

    with HubServer(hub_root, port=port) as server:
        if args.latency:
            server.faults.latency(args.latency)
        lock = api.lock(project, hub=Hub()).lock
        rows = []

        def measure(name: str, fn) -> None:
            server.log.clear()
            start = time.perf_counter()
            fn()
            rows.append((name, len(server.log), time.perf_counter() - start))

        measure("kernlock sync (cold)", lambda: syncing.sync(lock, [env], hub=Hub(), cache=ours, progress=False))
        measure("kernlock sync (no-op)", lambda: syncing.sync(lock, [env], hub=Hub(), cache=ours, progress=False))

        theirs = work / "kernels-project"
        theirs.mkdir()
        (theirs / "kernels.lock").write_text(
            json.dumps(
                [{"dependency": {"repo-id": k.repo, "version": 1}, "lock": {"commit": k.commit}} for k in lock.kernels]
            )
        )
        download = argparse.Namespace(project_dir=theirs, all_variants=False)
        measure("kernels download (cold)", lambda: kernels_download.download_kernels(download))
        measure("kernels download (again)", lambda: kernels_download.download_kernels(download))

        cli_env = {**os.environ, "KERNELS_CACHE": str(ours)}
        cli = [sys.executable, "-m", "kernlock", "sync", "--frozen", "--project", str(project)]
        server.log.clear()
        start = time.perf_counter()
        done = subprocess.run(cli, env=cli_env, capture_output=True, text=True)
        cli_wall, cli_requests = time.perf_counter() - start, len(server.log)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1

    total = sum(f.size for _e, v in syncing.targets(lock, [env]) for f in v.files)
    files = sum(len(v.files) for _e, v in syncing.targets(lock, [env]))
    print(
        f"{len(lock.kernels)} kernels x 1 variant of {len(variants)} ({files} files, {total / 2**20:.1f} MiB) "
        f"for {env}; latency {args.latency * 1000:.0f} ms/request"
    )
    cold = rows[0][2]
    print(f"{'':28}{'requests':>10}{'wall s':>10}{'vs cold sync':>14}")
    for name, requests, wall in rows:
        print(f"{name:28}{requests:>10}{wall:>10.3f}{wall / cold:>13.1%}")
    print(f"{'kernlock sync CLI (no-op)':28}{cli_requests:>10}{cli_wall:>10.3f}{cli_wall / cold:>13.1%}")
    print("  (the CLI row is a whole process: interpreter start and imports; torch is not imported)")
    noop_requests, noop_wall = rows[1][1], rows[1][2]
    ok = noop_requests == 0 and noop_wall < 0.1 * cold
    print(
        f"goal: no-op sync makes 0 requests ({noop_requests}) and takes < 10% of the cold sync "
        f"({noop_wall / cold:.1%}): {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
