"""Time and requests from "load this kernel" to "module ready", three ways, and the cost of activation.

    python benchmarks/load.py [--kernels 10] [--repeats 3] [--latency 0.02]

Builds ``--kernels`` kernel repositories (kernels' benchmark catalog: versions v1, v2, 26 build variants each),
serves them with kernlock's local Hub (``--latency`` seconds added to every request), locks v1 for this machine
and syncs it. Then, in fresh processes (imports done before the clock starts, so only the load is timed), each
process loads every kernel once, three ways:

- **activated + synced**: ``import kernlock.activate``, then ``kernels.get_kernel(repo, version=2)`` (the lock
  pins v1 and wins): verified against the lock (receipt check) and imported from the cache;
- **kernels online**: the kernels library's default path, ``get_kernel(repo, version=1)`` against the Hub, with
  a warm cache (files already downloaded by an earlier process: the steady state of a re-run); the cold first
  download is shown too;
- **floor**: ``kernels.get_local_kernel(<synced snapshot folder>)``: a local import and nothing else.

The first load of an activated process also reads the lock and detects the environment; it is shown apart.
Finally ``import kernlock.activate`` is timed in fresh interpreters (and checked not to import torch).

Goals: activated loads make 0 requests and take at most 1.2x the floor; ``import kernlock.activate`` < 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import free_port, in_scratch_folder

CHILD = r"""
import json, sys, time
way, repos, paths = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
if way == "activated":
    import kernlock.activate  # noqa: F401
import torch  # noqa: F401
import kernels

times = []
for repo, path in zip(repos, paths):
    start = time.perf_counter()
    if way == "activated":
        module = kernels.get_kernel(repo, version=2)
    elif way == "online":
        module = kernels.get_kernel(repo, version=1)
    else:
        from pathlib import Path
        module = kernels.get_local_kernel(Path(path))
    times.append(time.perf_counter() - start)
    assert module.KERNEL_IDENTITY["version"] == 1, module.KERNEL_IDENTITY
print(json.dumps(times))
"""

ACTIVATE = r"""
import sys, time
start = time.perf_counter()
import kernlock.activate  # noqa: F401
elapsed = time.perf_counter() - start
print(elapsed, any(name in sys.modules for name in ("torch", "transformers", "kernels")))
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kernels", type=int, default=10, help="kernels loaded per process (default 10)")
    parser.add_argument("--repeats", type=int, default=3, help="processes per way (default 3)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added to every Hub request")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-load-", lambda work: _run(args, work))


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    # huggingface_hub and kernels read these at import: set them before anything imports them.
    os.environ.update(
        {
            "HF_ENDPOINT": f"http://127.0.0.1:{port}",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(work / "hf-home"),
            "HF_HUB_CACHE": str(work / "kernlock-synced"),
            "KERNLOCK_CACHE": str(work / "kernlock-own"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
    )
    for key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK", "DISABLE_TELEMETRY", "LOCAL_KERNELS"):
        os.environ.pop(key, None)
    for key in ("KERNELS_CACHE", "KERNLOCK_LOCKFILE", "KERNLOCK_MODE", "KERNLOCK_VERIFY"):
        os.environ.pop(key, None)

    from kernlock import api
    from kernlock import sync as syncing
    from kernlock.environment import detect
    from kernlock.testing import HubServer, build_benchmark_catalog

    root = work / "hub"
    repos = build_benchmark_catalog(root, kernels=args.kernels, versions=2, variants=26)
    env = str(detect())
    project = work / "project"
    project.mkdir()
    table = "".join(f'"{repo}" = "v1"\n' for repo in repos)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "bench"\nversion = "0"\n\n[tool.kernlock]\nenvironments = ["{env}"]\n\n'
        f"[tool.kernlock.kernels]\n{table}"
    )

    with HubServer(root, port=port) as server:
        lock = api.lock(project).lock
        api.sync(project, progress=False)
        paths = []
        for repo in repos:
            entry = lock.entry_for(repo, env)
            assert entry is not None
            variant = entry.variant_for(env)
            assert variant is not None
            paths.append(str(syncing.variant_path(entry, variant).parent.parent))  # snapshots/<commit>
        server.faults.latency(args.latency)

        def child(way: str, extra: dict[str, str]) -> tuple[list[float], int]:
            server.log.clear()
            argv = [sys.executable, "-c", CHILD, way, json.dumps(repos), json.dumps(paths)]
            done = subprocess.run(
                argv, env={**os.environ, **extra}, cwd=project, capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise SystemExit(f"{way} child failed:\n{done.stderr[-3000:]}")
            requests = sum(1 for r in server.log.entries if "agent-harnesses" not in r.path)
            return json.loads(done.stdout.strip().splitlines()[-1]), requests

        theirs = {"HF_HUB_CACHE": str(work / "kernels-default")}
        cold, cold_requests = child("online", theirs)
        results = {"activated": [], "online": [], "floor": []}
        requests = {way: 0 for way in results}
        for _ in range(args.repeats):
            for way, extra in (("activated", {}), ("online", theirs), ("floor", {})):
                times, count = child(way, extra)
                results[way].append(times)
                requests[way] += count

    activation = [_activation_cost(project) for _ in range(15)]
    return _print(args, env, results, requests, cold, cold_requests, activation)


def _activation_cost(project: Path) -> tuple[float, bool]:
    done = subprocess.run(
        [sys.executable, "-c", ACTIVATE], cwd=project, capture_output=True, text=True, check=True, env=os.environ
    )
    elapsed, imported = done.stdout.split()
    return float(elapsed), imported == "True"


def _print(
    args: argparse.Namespace,
    env: str,
    results: dict[str, list[list[float]]],
    requests: dict[str, int],
    cold: list[float],
    cold_requests: int,
    activation: list[tuple[float, bool]],
) -> int:
    loads = args.kernels * args.repeats
    print(
        f"{args.kernels} kernels (26 variants each) x {args.repeats} processes per way, {env}, "
        f"Hub latency {args.latency * 1000:.0f} ms/request"
    )
    print(f"{'per load':34}{'median ms':>10}{'first ms':>10}{'requests':>10}{'vs floor':>10}")
    floor = statistics.median(t for run in results["floor"] for t in run[1:])
    rows = [
        ("activated + synced (kernlock)", results["activated"], requests["activated"] / loads),
        ("kernels online, warm cache", results["online"], requests["online"] / loads),
        ("kernels online, cold (1 process)", [cold], cold_requests / args.kernels),
        ("get_local_kernel (floor)", results["floor"], requests["floor"] / loads),
    ]
    for name, runs, per_load in rows:
        median = statistics.median(t for run in runs for t in run[1:])
        first = statistics.median(run[0] for run in runs)
        print(f"{name:34}{median * 1000:>10.2f}{first * 1000:>10.2f}{per_load:>10.1f}{median / floor:>9.2f}x")
    print("  (median over every load but a process's first; 'first' includes reading the lock and detecting")
    print("   the environment for kernlock, and the first Hub client for kernels)")
    ours = statistics.median(t for run in results["activated"] for t in run[1:])
    cost = statistics.median(t for t, _ in activation)
    heavy = any(imported for _, imported in activation)
    print(
        f"import kernlock.activate: median {cost * 1000:.2f} ms over {len(activation)} processes; "
        f"imports torch/transformers/kernels: {'yes' if heavy else 'no'}"
    )
    ok = requests["activated"] == 0 and ours <= 1.2 * floor and cost < 0.020 and not heavy
    print(
        f"goal: activated loads make 0 requests ({requests['activated']}), take <= 1.2x the floor "
        f"({ours / floor:.2f}x); activation < 20 ms ({cost * 1000:.1f} ms) without torch: {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
