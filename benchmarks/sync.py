"""Requests and wall time of `kernlock sync` and of `kernels download` for the same lock, cold and again.

    python benchmarks/sync.py [--kernels 4] [--so-mib 8] [--repeats 5] [--latencies 0,0.02] [--max-concurrent 0]

Builds kernel repositories (README + five build variants per commit, one LFS ``.so`` per variant) under a
temporary folder, serves them with kernlock's local Hub, locks them for this machine, then measures, at each Hub
latency, every row ``--repeats`` times in turn (medians printed):

- in this process (imports done first: ``torch`` too, which kernels imports on its first download; neither
  tool pays an import inside a timing): ``kernlock sync`` (the library call) cold (empty cache) and again
  (every file present and verified by its receipt), ``kernels download`` (kernels' own CLI code) cold and again;
- whole processes, as a user runs them (interpreter start and imports included): ``kernlock sync --frozen`` and
  ``kernels download``, each cold and again.

``--max-concurrent N`` makes the Hub serve at most N requests of a client at once (a rate-limited Hub: the rest
wait their turn). Bytecode is compiled first. Goal: the no-op sync makes zero requests and takes < 10% of the
cold sync.

Then the real-size rows (``benchmarks/real_size.py``, run as its own process): a cold ``kernlock sync --frozen``
of one variant whose ``.so`` is ``--real-size-mib`` MiB (1024 by default; 0 leaves them out) and of 8 variants of
a quarter of that, each beside its floor, ``curl -o`` of the same bytes from the same server then ``sha256sum``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import compile_bytecode, free_port, in_scratch_folder, use_local_hub, write_project

VARIANTS = [
    "torch213-cxx11-cu128-x86_64-linux",
    "torch213-cxx11-cu130-x86_64-linux",
    "torch212-cxx11-cpu-x86_64-linux",
    "torch213-metal-aarch64-darwin",
]


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kernels", type=int, default=4, help="locked kernels (default 4)")
    parser.add_argument("--so-mib", type=float, default=8, help="size of each variant's .so in MiB (default 8)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of every row, median printed (default 5)")
    parser.add_argument("--latencies", default="0,0.02", help="Hub latencies in seconds (default 0,0.02)")
    parser.add_argument("--max-concurrent", type=int, default=0, help="requests served at once per client (0: any)")
    parser.add_argument(
        "--real-size-mib", type=int, default=1024, help="the real-size rows' .so in MiB (default 1024; 0: none)"
    )
    return parser.parse_args()


def main() -> int:
    args = _args()
    status = in_scratch_folder("kernlock-bench-sync-", lambda work: _run(args, work))
    if args.real_size_mib > 0:
        print(f"\nreal sizes (benchmarks/real_size.py --so-mib {args.real_size_mib}):", flush=True)
        real_size = [sys.executable, str(Path(__file__).with_name("real_size.py")), "--so-mib", str(args.real_size_mib)]
        fleet = max(1, args.real_size_mib // 4)
        status |= subprocess.run([*real_size, "--fleet-mib", str(fleet), "--repeats", "3"]).returncode
    return status


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    use_local_hub(work, port, KERNELS_CACHE=str(work / "kernels-cache"))  # kernels' target, read at its import
    compile_bytecode()

    import torch  # noqa: F401 - kernels imports it on its first download: outside every timing
    from kernels.cli import download as kernels_download

    from kernlock import api
    from kernlock.environments.environment import detect
    from kernlock.hub.client import Hub
    from kernlock.sync import engine as syncing
    from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo, set_org_trust
    from kernlock.testing.fixtures import KINDS

    hub_root = work / "hub"
    set_org_trust(hub_root, "bench-sync", True)
    repos = [f"bench-sync/kernel-{i:02d}" for i in range(args.kernels)]
    for i, repo in enumerate(repos):
        size = int(args.so_mib * 2**20)
        create_kernel_repo(hub_root, repo, {"v1": [CPU_VARIANT, *VARIANTS]}, kind=KINDS[i % len(KINDS)], so_size=size)
    env = str(detect())
    project, theirs = work / "project", work / "kernels-project"
    write_project(project, repos, [env])
    kernels_cache = Path(os.environ["KERNELS_CACHE"])
    tables = []
    capped = {"max_concurrent": args.max_concurrent} if args.max_concurrent else {}
    with HubServer(hub_root, port=port, **capped) as server:
        lock = api.lock(project, hub=Hub()).lock
        theirs.mkdir()
        (theirs / "kernels.lock").write_text(
            json.dumps(
                [{"dependency": {"repo-id": k.repo, "version": 1}, "lock": {"commit": k.commit}} for k in lock.kernels]
            )
        )
        download = argparse.Namespace(project_dir=theirs, all_variants=False)
        ours = work / "kernlock-cache"

        def fresh(*folders: Path) -> None:
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)

        def library_sync() -> None:
            syncing.sync(lock, [env], hub=Hub(), cache=ours, progress=False)

        def process(argv: list[str], cache: Path) -> Callable[[], None]:
            def run() -> None:
                done = subprocess.run(argv, env={**os.environ, "KERNELS_CACHE": str(cache)}, capture_output=True)
                if done.returncode != 0:
                    raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr.decode()[-3000:]}")

            return run

        def their_library() -> None:
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # its "Downloading kernel:" lines
                kernels_download.download_kernels(download)

        our_cli = process([sys.executable, "-m", "kernlock", "sync", "--frozen", "--project", str(project)], ours)
        their_cli = process([str(Path(sys.executable).parent / "kernels"), "download", str(theirs)], kernels_cache)
        rows: list[tuple[str, Callable[[], None] | None, Callable[[], None]]] = [
            ("kernlock sync, cold", lambda: fresh(ours), library_sync),
            ("kernlock sync, no-op", None, library_sync),
            (
                "kernels download, cold",
                lambda: fresh(kernels_cache),
                lambda: kernels_download.download_kernels(download),
            ),
            ("kernels download, again", None, lambda: kernels_download.download_kernels(download)),
            ("kernlock sync CLI, cold", lambda: fresh(ours), our_cli),
            ("kernlock sync CLI, no-op", None, our_cli),
            ("kernels download CLI, cold", lambda: fresh(kernels_cache), their_cli),
            ("kernels download CLI, again", None, their_cli),
        ]
        for latency in (float(x) for x in args.latencies.split(",")):
            server.faults.clear()
            if latency:
                server.faults.latency(latency)
            results: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in rows}
            for _ in range(args.repeats):
                for name, before, fn in rows:
                    if before is not None:
                        before()
                    server.log.clear()
                    start = time.perf_counter()
                    fn()
                    results[name].append((time.perf_counter() - start, len(server.log)))
            tables.append((latency, results))

    files = sum(len(v.files) for _e, v in syncing.targets(lock, [env]))
    total = sum(f.size for _e, v in syncing.targets(lock, [env]) for f in v.files)
    cap = f", at most {args.max_concurrent} requests at once per client" if args.max_concurrent else ""
    print(
        f"{len(lock.kernels)} kernels x 1 variant of {1 + len(VARIANTS)} ({files} files, {total / 2**20:.1f} MiB) "
        f"for {env}; median of {args.repeats} runs per row{cap}"
    )
    ok = True
    for latency, results in tables:
        print(f"\nHub latency {latency * 1000:.0f} ms/request")
        print(f"{'':30}{'requests':>10}{'wall s':>10}{'vs kernlock cold':>18}")
        medians = {name: statistics.median(t for t, _ in runs) for name, runs in results.items()}
        for name, runs in results.items():
            base = medians["kernlock sync CLI, cold" if "CLI" in name else "kernlock sync, cold"]
            requests = statistics.median(n for _, n in runs)
            print(f"{name:30}{requests:>10.0f}{medians[name]:>10.3f}{medians[name] / base:>17.2f}x")
        noop = results["kernlock sync, no-op"]
        ok = (
            ok
            and max(n for _, n in noop) == 0
            and medians["kernlock sync, no-op"] < 0.1 * medians["kernlock sync, cold"]
        )
    print("\n(library rows: in this process, imports done; CLI rows: whole processes, interpreter start and imports)")
    print(f"goal: the no-op sync makes 0 requests and takes < 10% of the cold sync: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
