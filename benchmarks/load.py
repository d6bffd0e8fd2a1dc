"""Time and requests from "load this kernel" to "module ready", four ways, and what activation adds to a process.

    python benchmarks/load.py [--kernels 10] [--repeats 5] [--latency 0.02] [--environments 26]

Builds ``--kernels`` kernel repositories (versions v1, v2; 26 build variants each, this machine's among them),
serves them with kernlock's local Hub (``--latency`` seconds added to every request), locks v1 for this machine
and ``--environments`` - 1 more (a lock of that size), and syncs this machine. Bytecode is compiled first. Then,
in fresh processes (``import torch`` done before any clock starts, in every way), ``--repeats`` rounds of one
process per way, each round starting with the next way (so that no way always runs first or last):

- **activated + synced**: ``import kernlock.activate``, ``import kernels`` (kernlock's hooks install right
  after it), then ``kernels.get_kernel(repo, version=2)`` for every kernel (the lock pins v1 and wins);
- **kernels online**: ``get_kernel(repo, version=1)`` against the Hub with a warm cache (and one cold process);
- **kernels offline**: ``get_kernel(repo, version=1)`` with ``HF_HUB_OFFLINE=1`` in the synced cache: kernels' own
  offline load (from kernels 0.18 on it checks the build's digest, once, then trusts its receipt);
- **get_local_kernel**: ``kernels.get_local_kernel(<synced snapshot folder>)`` (kernels 0.18+ hash a local
  folder's files on every load).

kernels' ways run with sigstore hidden from kernels (``find_spec("sigstore")`` is None): with it, kernels 0.18+
check each signed build against sigstore's production root over the network, which dies offline (docs/security.md);
without it they do what kernels can do offline at best. The activated way keeps sigstore, as a kernlock user has it.

The **baseline** is the faster of kernels' two offline ways (per load, and for the first load of a process):
``get_local_kernel`` up to kernels 0.17, the receipt-backed ``get_kernel`` from 0.18 on. Printed: per load
(median over every load but a process's first), and the **first load** of a process, timed in-process: around
``import kernlock.activate``, around ``import kernels`` (hook installation included) and around the first load
(lock read: this environment's entries from the lock index; environment detection; verification). The activated
first-process row is shown twice: with the lock index warm (every process after ``kernlock sync``, which indexes
the lock, or after the first since the lock changed) and cold (the first process after a lock change that no sync
indexed, which parses the whole lock once).

Goals (issues 32, 41): activated loads make 0 requests and take <= 1.1x the baseline; the first load, everything
kernlock adds included, <= 1.1x the baseline's first load with the lock index warm and <= 1.2x with it cold. A last
line gives the spread of those ratios round by round (quartiles), which says how far one run's medians can move.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from _common import compile_bytecode, free_port, in_scratch_folder, machine_catalog, use_local_hub, write_project

CHILD = r"""
import json, sys, time
way, repos, paths = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
if way != "activated":  # kernels' own ways: sigstore hidden (kernels 0.18+ reach its production root otherwise)
    import importlib.util
    _find = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *rest: None if name == "sigstore" else _find(name, *rest)
import torch  # noqa: F401 - outside every timing, in every way
marks = [time.perf_counter()]
if way == "activated":
    import kernlock.activate  # noqa: F401
marks.append(time.perf_counter())
import kernels
marks.append(time.perf_counter())
times = []
for repo, path in zip(repos, paths):
    start = time.perf_counter()
    if way == "activated":
        module = kernels.get_kernel(repo, version=2)
    elif way in ("online", "offline"):
        module = kernels.get_kernel(repo, version=1)
    else:
        from pathlib import Path
        module = kernels.get_local_kernel(Path(path))
    times.append(time.perf_counter() - start)
    assert module.KERNEL_IDENTITY["version"] == 1, module.KERNEL_IDENTITY
print(json.dumps({"activate": marks[1] - marks[0], "import": marks[2] - marks[1], "loads": times}))
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kernels", type=int, default=10, help="kernels loaded per process (default 10)")
    parser.add_argument("--repeats", type=int, default=5, help="processes per way (default 5)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added to every Hub request")
    parser.add_argument("--environments", type=int, default=26, help="environments the lock covers (default 26)")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-load-", lambda work: _run(args, work))


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    use_local_hub(work, port, HF_HUB_CACHE=str(work / "kernlock-synced"))
    compile_bytecode()

    from kernlock import api
    from kernlock.environments.environment import detect
    from kernlock.sync import engine as syncing
    from kernlock.testing import HubServer

    root = work / "hub"
    env = str(detect())  # a GPU machine too: its own build is one of the 26
    repos, machines = machine_catalog(root, args.kernels, env)
    environments = machines[: max(1, args.environments)]
    project = work / "project"
    write_project(project, repos, environments)

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
        index = Path(os.environ["KERNLOCK_CACHE"]) / "lock-index"

        def child(way: str, extra: dict[str, str]) -> tuple[dict, int]:
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
        offline = {"HF_HUB_OFFLINE": "1"}
        child("offline", offline)  # kernels 0.18+ check each build's digest once and keep a receipt
        results: dict[str, list[dict]] = {way: [] for way in ("activated", "activated, index cold", *KERNELS_WAYS)}
        requests = {way: 0 for way in results}
        ways = (
            ("activated, index cold", "activated", {}),
            ("activated", "activated", {}),
            ("online", "online", theirs),
            ("offline", "offline", offline),
            ("floor", "floor", {}),
        )
        for repeat in range(args.repeats):
            # Each round starts with another way: a process's place in the round (what ran just before it) then
            # weighs on every way alike. The warm way finds the index the cold way of this or the last round made.
            for way, mode, extra in ways[repeat % len(ways) :] + ways[: repeat % len(ways)]:
                if way == "activated, index cold":
                    shutil.rmtree(index, ignore_errors=True)  # as after `kernlock lock` changed the lock
                run, count = child(mode, extra)
                results[way].append(run)
                requests[way] += count
    return _print(args, env, len(environments), lock_size(project), results, requests, cold, cold_requests)


#: kernels' own ways, and kernels' two offline ones (the baseline is the faster of those).
KERNELS_WAYS = ("online", "offline", "floor")
OFFLINE_WAYS = ("offline", "floor")


def lock_size(project: Path) -> int:
    return (project / "kernels.lock").stat().st_size


def _print(
    args: argparse.Namespace,
    env: str,
    environments: int,
    size: int,
    results: dict[str, list[dict]],
    requests: dict[str, int],
    cold: dict,
    cold_requests: int,
) -> int:
    loads = args.kernels * args.repeats
    print(
        f"{args.kernels} kernels (26 variants each), lock of {environments} environments ({size / 1024:.0f} KiB), "
        f"{args.repeats} processes per way, {env}, Hub latency {args.latency * 1000:.0f} ms/request, "
        f"bytecode compiled; kernels {_version('kernels')}, torch {_version('torch')}"
    )

    def median(runs: list[dict], pick) -> float:
        return statistics.median(pick(run) for run in runs)

    per_load = {way: median_load(results[way]) for way in results}
    base_way = min(OFFLINE_WAYS, key=per_load.__getitem__)
    floor = per_load[base_way]
    print(f"{'per load (not a first load)':36}{'median ms':>10}{'requests':>10}{'vs base':>10}")
    for name, way, count in (
        ("activated + synced (kernlock)", "activated", requests["activated"] / loads),
        ("kernels online, warm cache", "online", requests["online"] / loads),
        ("kernels online, cold (1 process)", None, cold_requests / args.kernels),
        ("kernels offline, get_kernel", "offline", requests["offline"] / loads),
        ("kernels offline, get_local_kernel", "floor", requests["floor"] / loads),
    ):
        value = median_load([cold]) if way is None else per_load[way]
        mark = "  <- baseline" if way == base_way else ""
        print(f"{name:36}{value * 1000:>10.2f}{count:>10.1f}{value / floor:>9.2f}x{mark}")

    print()
    print(
        f"{'first load of a process, ms':36}{'activate':>10}{'import':>10}{'1st load':>10}{'total':>10}{'vs base':>10}"
    )
    totals = {way: median(results[way], _first_load) for way in results}
    first_way = min(OFFLINE_WAYS, key=totals.__getitem__)
    base = totals[first_way]
    first: dict[str, float] = {}
    for name, way in (
        ("activated, lock index warm", "activated"),
        ("activated, lock index cold", "activated, index cold"),
        ("kernels offline, get_kernel", "offline"),
        ("kernels offline, get_local_kernel", "floor"),
    ):
        runs = results[way]
        parts = [median(runs, lambda r: r["activate"]), median(runs, lambda r: r["import"])]
        parts.append(median(runs, lambda r: r["loads"][0]))
        first[way] = totals[way] / base
        cells = "".join(f"{value * 1000:>10.2f}" for value in (*parts, totals[way]))
        mark = "  <- baseline" if way == first_way else ""
        print(f"{name:36}{cells}{first[way]:>9.2f}x{mark}")
    print("  (in-process clocks; `import torch` before all of them; 'import' = `import kernels`, with kernlock's")
    print("   hook installation when activated; 'activate' = `import kernlock.activate`; baseline: the faster of")
    print("   kernels' two offline loads)")
    ours = per_load["activated"]
    warm, cold_first = first["activated"], first["activated, index cold"]
    ok = requests["activated"] == 0 and ours <= 1.1 * floor and warm <= 1.1 and cold_first <= 1.2
    print(
        f"goal: activated loads make 0 requests ({requests['activated']}), take <= 1.1x the baseline "
        f"({ours / floor:.2f}x), first load <= 1.1x the baseline's with the index warm ({warm:.2f}x), <= 1.2x cold "
        f"({cold_first:.2f}x): {'PASS' if ok else 'FAIL'}"
    )
    loads_spread = _spread(results, "activated", base_way, _per_load)
    warm_spread, cold_spread = (
        _spread(results, way, first_way, _first_load) for way in ("activated", "activated, index cold")
    )
    print(
        f"spread: the same ratios round by round (the quartiles of {args.repeats} rounds, each way against the "
        f"baseline of its round): per load {loads_spread}, first load {warm_spread} warm, {cold_spread} cold"
    )
    return 0 if ok else 1


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def median_load(runs: list[dict]) -> float:
    """The median of every load but each process's first."""
    return statistics.median(t for run in runs for t in run["loads"][1:])


def _per_load(run: dict) -> float:
    return statistics.median(run["loads"][1:])


def _first_load(run: dict) -> float:
    return run["activate"] + run["import"] + run["loads"][0]


def _spread(results: dict[str, list[dict]], way: str, base: str, pick) -> str:
    """The lower and upper quartile of ``way``'s ratio to ``base``, round by round (a round runs one process of
    each way, so both sides of a ratio ran minutes apart at most): how far one run's median ratio can move."""
    ratios = [pick(ours) / pick(theirs) for ours, theirs in zip(results[way], results[base], strict=True)]
    low, _middle, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return f"{low:.2f}-{high:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
