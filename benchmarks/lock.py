"""Benchmark: `kernlock lock` vs the kernels library's own `kernels lock` on the same local Hub.

Catalog: 20 kernels x 4 versions x 26 build variants, 20 ms latency injected on every request. Both tools lock
version 4 of every kernel, cold (empty caches), each in a fresh process; the script prints requests and wall
time of each, their ratios, and the cost of re-locking an unchanged project. Run: `python benchmarks/lock.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernlock.testing import HubServer, build_benchmark_catalog

ENVIRONMENTS = ["torch213-cxx11-cpu-x86_64-linux", "torch213-cxx11-cu128-x86_64-linux"]


def run(cmd: list[str], env: dict[str, str], server: HubServer) -> tuple[float, int]:
    """Wall seconds and Hub requests of one command."""
    server.log.clear()
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return wall, len(server.log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kernels", type=int, default=20)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--variants", type=int, default=26)
    parser.add_argument("--latency", type=float, default=0.020, help="seconds added to every request")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repos = build_benchmark_catalog(tmp / "hub", args.kernels, args.versions, args.variants)
        version = args.versions
        ours, theirs = tmp / "kernlock-project", tmp / "kernels-project"
        ours.mkdir()
        theirs.mkdir()
        (ours / "pyproject.toml").write_text(
            "[tool.kernlock]\nenvironments = [" + ", ".join(f'"{e}"' for e in ENVIRONMENTS) + "]\n\n"
            "[tool.kernlock.kernels]\n" + "".join(f'"{r}" = "v{version}"\n' for r in repos)
        )
        (theirs / "pyproject.toml").write_text(
            "[tool.kernels.dependencies]\n" + "".join(f'"{r}" = {version}\n' for r in repos)
        )
        rows: dict[str, list[tuple[float, int]]] = {"kernlock": [], "kernels": [], "kernlock-noop": []}
        with HubServer(tmp / "hub") as server:
            server.faults.latency(args.latency)
            base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNEL"))}
            base.update(server.env())
            bin_dir = Path(sys.executable).parent
            for i in range(args.repeat):
                env = {
                    **base,
                    "HF_HOME": str(tmp / f"home{i}"),
                    "HF_HUB_CACHE": str(tmp / f"hf{i}"),
                    "KERNLOCK_CACHE": str(tmp / f"kl{i}"),
                }
                (ours / "kernels.lock").unlink(missing_ok=True)
                rows["kernlock"].append(run([str(bin_dir / "kernlock"), "lock", "--project", str(ours)], env, server))
                rows["kernlock-noop"].append(
                    run([str(bin_dir / "kernlock"), "lock", "--project", str(ours)], env, server)
                )
                rows["kernels"].append(run([str(bin_dir / "kernels"), "lock", str(theirs)], env, server))

    def median(name: str, index: int) -> float:
        return statistics.median(r[index] for r in rows[name])

    print(
        f"catalog: {args.kernels} kernels x {args.versions} versions x {args.variants} variants, "
        f"{args.latency * 1000:.0f} ms latency/request, {len(ENVIRONMENTS)} target environments, "
        f"median of {args.repeat} cold runs"
    )
    print(f"{'command':<34}{'requests':>10}{'wall s':>10}")
    print(f"{'kernels lock (kernels library)':<34}{median('kernels', 1):>10.0f}{median('kernels', 0):>10.2f}")
    print(f"{'kernlock lock (cold)':<34}{median('kernlock', 1):>10.0f}{median('kernlock', 0):>10.2f}")
    print(
        f"{'kernlock lock (unchanged project)':<34}{median('kernlock-noop', 1):>10.0f}"
        f"{median('kernlock-noop', 0):>10.2f}"
    )
    print(
        f"requests ratio kernels/kernlock: {median('kernels', 1) / max(median('kernlock', 1), 1):.1f}x fewer "
        f"(goal >= 5x)"
    )
    print(f"time ratio kernels/kernlock:     {median('kernels', 0) / median('kernlock', 0):.1f}x faster (goal >= 3x)")
    print(f"unchanged re-lock: {median('kernlock-noop', 1) / args.kernels:.2f} requests per kernel (goal <= 1)")


# -- `kernlock outdated`: requests per kernel (issue #14; self-contained, run with --outdated) -----------------


def outdated_main() -> None:
    """Requests and wall time of `kernlock outdated --json` on the benchmark catalog locked at its newest version:
    nothing moved (with the cache the lock left, and cold, as on another machine), one branch moved, and a new
    version branch. kernlock's bytecode is compiled first (`compileall`), as PYTHONDONTWRITEBYTECODE may be set."""
    parser = argparse.ArgumentParser(description=outdated_main.__doc__)
    parser.add_argument("--outdated", action="store_true", help="run this benchmark (instead of the lock one)")
    parser.add_argument("--kernels", type=int, default=20)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--variants", type=int, default=26)
    parser.add_argument("--latency", type=float, default=0.020, help="seconds added to every request")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import kernlock
    from kernlock.testing import open_kernel_repo

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(kernlock.__file__).parent)], check=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repos = build_benchmark_catalog(tmp / "hub", args.kernels, args.versions, args.variants)
        project = tmp / "project"
        project.mkdir()
        (project / "pyproject.toml").write_text(
            "[tool.kernlock]\nenvironments = [" + ", ".join(f'"{e}"' for e in ENVIRONMENTS) + "]\n\n"
            "[tool.kernlock.kernels]\n" + "".join(f'"{r}" = "v{args.versions}"\n' for r in repos)
        )
        kernlock_bin = str(Path(sys.executable).parent / "kernlock")
        outdated = [kernlock_bin, "outdated", "--json", "--project", str(project)]
        rows: list[tuple[str, list[tuple[float, int]]]] = []
        with HubServer(tmp / "hub") as server:
            server.faults.latency(args.latency)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNEL"))}
            env.update(server.env())
            env.update(HF_HOME=str(tmp / "home"), HF_HUB_CACHE=str(tmp / "hf"), KERNLOCK_CACHE=str(tmp / "kl"))
            run([kernlock_bin, "lock", "--project", str(project)], env, server)

            def measure(label: str, cold: bool = False) -> None:
                runs = []
                for i in range(args.repeat):
                    cache = {"KERNLOCK_CACHE": str(tmp / f"cold-{len(rows)}-{i}")} if cold else {}
                    runs.append(run(outdated, {**env, **cache}, server))
                rows.append((label, runs))

            measure("nothing moved (the lock's cache)")
            measure("nothing moved, cold cache", cold=True)
            open_kernel_repo(tmp / "hub", repos[0]).move_branch(f"v{args.versions}")
            measure("one branch moved")
            newest = open_kernel_repo(tmp / "hub", repos[1])
            newest.add_branch(f"v{args.versions + 1}", newest.variants(f"v{args.versions}"))
            measure("+ a new version branch")

    print(
        f"`kernlock outdated --json` on {args.kernels} kernels x {args.versions} versions x {args.variants} variants "
        f"locked at v{args.versions}, {args.latency * 1000:.0f} ms latency/request, median of {args.repeat} runs"
    )
    print(f"{'case':<36}{'requests':>10}{'per kernel':>12}{'wall s':>10}   requests of each run")
    for label, runs in rows:
        requests = statistics.median(r[1] for r in runs)
        wall = statistics.median(r[0] for r in runs)
        each = ", ".join(str(r[1]) for r in runs)
        print(f"{label:<36}{requests:>10.0f}{requests / args.kernels:>12.2f}{wall:>10.2f}   {each}")
    print("goal: nothing moved <= 1 request per kernel")


if __name__ == "__main__":
    outdated_main() if "--outdated" in sys.argv else main()
