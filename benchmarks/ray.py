"""What kernlock costs a Ray job: worker start, the first load, and a node without the builds (issue 44).

    python benchmarks/ray.py [--so-mib 400] [--workers 6] [--json F]

A real Ray cluster of two nodes on this machine (tests/ray_cluster.py: `ray start`, each node its own HOME and
kernel cache) and a local Hub serving ``kernels-community/flash-attn2`` v2 with one build for this machine whose
compiled library weighs ``--so-mib`` MiB (a real build carries hundreds). Each row is a job of its own:

* **worker start**: ``--workers`` actors started one after another, each to its first answer, in a job with
  kernlock's runtime_env (the lock shipped, ``kernlock.ray.setup_worker`` run at start), in a plain job, and in a
  plain job whose runtime_env is one variable (the control: what any runtime_env costs in Ray); the median per
  worker and the differences. Also the setup hook alone, in an interpreter that imported Ray (median of 15).
* **first load, a node with the build**: the first ``get_kernel`` in a new worker whose node has the build
  (kernlock: the locked build, checked against its receipt; plain kernels: its cache, after asking the Hub which
  commit the branch is at).
* **first load, a node without it**: the first ``get_kernel`` on a node whose cache is empty (kernlock fetches the
  locked files, verified; plain kernels downloads the branch's files), and the requests each made to the Hub.

Printed: the figures and the ratios kernlock / plain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

from _common import compile_bytecode, free_port, in_scratch_folder, use_local_hub

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from ray_cluster import QUIET, RayCluster  # noqa: E402

REPO = "kernels-community/flash-attn2"

#: One job: argv kernlock|plain, the cluster's address, the node resource to run on, the number of workers.
JOB = textwrap.dedent(
    """
    import json, sys, time
    mode, address, node, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import ray

    runtime_env = None
    if mode == "kernlock":
        import kernlock.ray
        runtime_env = kernlock.ray.runtime_env()
    elif mode == "env_vars":  # the control: a job with a runtime_env of one variable and nothing of kernlock
        runtime_env = {"env_vars": {"BENCH": "1"}}


    @ray.remote(num_cpus=0, resources={node: 1})
    class Worker:
        def __init__(self):
            self.born = time.time()

        def ping(self):
            return True

        def load(self, repo):
            start = time.perf_counter()
            import kernels
            imported = time.perf_counter()
            kernels.get_kernel(repo, version=2)
            return imported - start, time.perf_counter() - imported


    ray.init(address=address, runtime_env=runtime_env)
    starts = []
    for _ in range(workers):
        t = time.perf_counter()
        worker = Worker.remote()
        ray.get(worker.ping.remote())
        starts.append(time.perf_counter() - t)
        ray.kill(worker)
    first = Worker.remote()
    imports_s, load_s = ray.get(first.load.remote(sys.argv[5]))
    print(json.dumps({"starts": starts, "imports_s": imports_s, "load_s": load_s}))
    """
)
#: kernlock's worker setup hook alone, in a fresh interpreter that has imported Ray, as a worker has when Ray runs
#: the hook: seconds.
SETUP = textwrap.dedent(
    """
    import sys, time
    import ray
    start = time.perf_counter()
    from kernlock import ray
    ray.setup_worker()
    print(time.perf_counter() - start)
    """
)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--so-mib", type=int, default=400, help="the build's compiled library in MiB (default 400)")
    parser.add_argument("--workers", type=int, default=6, help="actors started per job (default 6)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-ray-", lambda work: _run(args, work))


def _node(work: Path, name: str) -> dict[str, str]:
    home = work / name
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "HF_HOME": str(home / "hf"), "HF_HUB_CACHE": str(home / "hf-cache")}
    env["KERNLOCK_CACHE"] = str(home / "kernlock")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _job(project: Path, mode: str, cluster: RayCluster, node: str, workers: int) -> dict[str, object]:
    env = {**os.environ, **QUIET, "PYTHONPATH": os.pathsep.join([str(ROOT), str(project)])}
    argv = [sys.executable, "-c", JOB, mode, cluster.address, node, str(workers), REPO]
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} job failed:\n{done.stderr[-4000:]}\n{cluster.logs()}")
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    use_local_hub(work, port)
    compile_bytecode()
    from kernlock import api
    from kernlock.environments.environment import detect
    from kernlock.testing import HubServer, create_kernel_repo

    variant = str(detect())
    create_kernel_repo(
        work / "hub", REPO, {"v2": [variant]}, kind="attention", so_size=args.so_mib << 20, python_builds=[variant]
    )
    project = work / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "ray-bench"\nversion = "0"\n\n[tool.kernlock]\nenvironments = ["{variant}"]\n\n'
        f'[tool.kernlock.kernels]\n"{REPO}" = "v2"\n'
    )
    figures: dict[str, dict[str, object]] = {}
    with HubServer(work / "hub", port=port) as server:
        api.lock(project)
        for mode in ("kernlock", "plain", "env_vars"):
            # Two fresh nodes, each its own cache: "warm" gets the build from a first job, "cold" has none.
            with RayCluster(lean=False) as cluster:  # Ray's defaults: idle workers started ahead
                cluster.start(_node(work, f"{mode}-warm"), cpus=1, resources={"warm": 100})
                cluster.add_node(_node(work, f"{mode}-cold"), cpus=1, resources={"cold": 100})
                _job(project, mode, cluster, "warm", 1)  # fills the warm node's cache
                server.log.clear()
                cold = _job(project, mode, cluster, "cold", 1)
                requests = len(server.log)
                warm = _job(project, mode, cluster, "warm", args.workers)
            figures[mode] = {"warm": warm, "cold": cold, "cold_requests": requests}
    figures["setup hook"] = {"seconds": _setup_cost(project)}
    _report(figures, args)
    return 0


def _setup_cost(project: Path, runs: int = 15) -> list[float]:
    """``kernlock.ray.setup_worker()`` in a fresh interpreter, as a worker runs it: the shipped package on the
    path, its name in the environment."""
    from kernlock.runtime import ray_jobs

    runtime = ray_jobs.runtime_env(None, lockfile=project / "kernels.lock")
    package = Path(runtime["py_modules"][-1])
    env = {**os.environ, **runtime["env_vars"], "PYTHONPATH": os.pathsep.join([str(ROOT), str(package.parent)])}
    found = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", SETUP], env=env, capture_output=True, text=True, check=True)
        found.append(float(done.stdout))
    return found


def _report(figures: dict[str, dict[str, object]], args: argparse.Namespace) -> None:
    def median(mode: str, key: str, row: str = "warm") -> float:
        value = figures[mode][row][key]  # type: ignore[index]
        return statistics.median(value) if isinstance(value, list) else float(value)

    print(f"{REPO} v2, the sample attention build + {args.so_mib} MiB; a two-node Ray cluster on this machine")
    print(f"{'':34}{'kernlock':>12}{'plain':>12}{'ratio':>9}")
    rows = [
        ("worker start, median s", median("kernlock", "starts"), median("plain", "starts")),
        ("first load, build on the node, s", median("kernlock", "load_s"), median("plain", "load_s")),
        ("first load, node without it, s", median("kernlock", "load_s", "cold"), median("plain", "load_s", "cold")),
    ]
    for name, ours, theirs in rows:
        print(f"{name:34}{ours:>12.3f}{theirs:>12.3f}{ours / theirs:>8.2f}x")
    print(
        f"{'Hub requests, node without it':34}{figures['kernlock']['cold_requests']:>12}"
        f"{figures['plain']['cold_requests']:>12}"
    )
    print(f"worker start, kernlock - plain: {1000 * (rows[0][1] - rows[0][2]):+.1f} ms per worker")
    control = median("env_vars", "starts")
    print(
        f"worker start of a plain job whose runtime_env is one variable: {control:.3f} s; kernlock - that: "
        f"{1000 * (rows[0][1] - control):+.1f} ms per worker (Ray starts a fresh worker for any job with a "
        "runtime_env instead of taking one it started ahead)"
    )
    setup = statistics.median(figures["setup hook"]["seconds"])  # type: ignore[arg-type]
    print(
        f"kernlock.ray.setup_worker() alone, in an interpreter that imported Ray: {1000 * setup:.1f} ms  (median of 15)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
