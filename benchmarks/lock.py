"""Benchmark: `kernlock lock` vs the kernels library's own `kernels lock` on the same local Hub, and lock I/O.

Catalog: 20 kernels x 4 versions x 26 build variants, 20 ms latency injected on every request. Both tools lock
version 4 of every kernel, cold (empty caches), each in a fresh process; the script prints requests and wall
time of each (medians of ``--repeat`` runs), their ratios, the cost of re-locking an unchanged project, and a
cold `kernlock lock` of the same kernels for 26 target environments. Then lock I/O on that 26-environment lock
(in this process, median of ``--io-repeat``): writing it (``lockfile.dumps``), reading it in full with every check
(``lockfile.read``: what the CLI does), and the run-time read (``lockindex.read``: this environment's entries,
what activation does). ``--max-concurrent N``: the Hub serves at most N requests of a client at once.
Bytecode is compiled first. Run: `python benchmarks/lock.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import compile_bytecode

from kernlock.testing import HubServer, build_benchmark_catalog, open_kernel_repo

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


def machines(root: Path, repo: str, branch: str) -> list[str]:
    """The environment strings among a repo's build variants (arch builds of a torch version)."""
    from kernlock.environments.environment import Environment
    from kernlock.errors import KernlockError

    found = []
    for name in open_kernel_repo(root, repo).variants(branch):
        try:
            if Environment.parse(name).name == name:
                found.append(name)
        except KernlockError:
            continue
    return sorted(found)


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kernels", type=int, default=20)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--variants", type=int, default=26)
    parser.add_argument("--latency", type=float, default=0.020, help="seconds added to every request")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--io-repeat", type=int, default=9)
    parser.add_argument("--max-concurrent", type=int, default=0, help="requests served at once per client (0: any)")
    args = parser.parse_args()
    compile_bytecode()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repos = build_benchmark_catalog(tmp / "hub", args.kernels, args.versions, args.variants)
        wide = machines(tmp / "hub", repos[0], f"v{args.versions}")
        version = args.versions
        ours, ours26, theirs = tmp / "kernlock-project", tmp / "kernlock-26", tmp / "kernels-project"
        for folder, envs in ((ours, ENVIRONMENTS), (ours26, wide)):
            folder.mkdir()
            (folder / "pyproject.toml").write_text(
                "[tool.kernlock]\nenvironments = [" + ", ".join(f'"{e}"' for e in envs) + "]\n\n"
                "[tool.kernlock.kernels]\n" + "".join(f'"{r}" = "v{version}"\n' for r in repos)
            )
        theirs.mkdir()
        (theirs / "pyproject.toml").write_text(
            "[tool.kernels.dependencies]\n" + "".join(f'"{r}" = {version}\n' for r in repos)
        )
        names = ("kernlock", "kernels", "kernlock-noop", "kernlock-26")
        rows: dict[str, list[tuple[float, int]]] = {name: [] for name in names}
        capped = {"max_concurrent": args.max_concurrent} if args.max_concurrent else {}
        with HubServer(tmp / "hub", **capped) as server:
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
                (ours26 / "kernels.lock").unlink(missing_ok=True)
                env26 = {**env, "KERNLOCK_CACHE": str(tmp / f"kl26-{i}")}
                rows["kernlock-26"].append(
                    run([str(bin_dir / "kernlock"), "lock", "--project", str(ours26)], env26, server)
                )
        io = lock_io(ours26 / "kernels.lock", wide[0], tmp / "io-cache", args.io_repeat)

    def median(name: str, index: int) -> float:
        return statistics.median(r[index] for r in rows[name])

    cap = f", at most {args.max_concurrent} requests at once per client" if args.max_concurrent else ""
    print(
        f"catalog: {args.kernels} kernels x {args.versions} versions x {args.variants} variants, "
        f"{args.latency * 1000:.0f} ms latency/request{cap}, median of {args.repeat} cold runs"
    )
    from importlib.metadata import version

    print(f"peer: kernels {version('kernels')} (`kernels lock`), huggingface_hub {version('huggingface_hub')}")
    print(f"{'command':<44}{'requests':>10}{'wall s':>10}")
    for label, name in (
        (f"kernels lock (kernels library), {len(ENVIRONMENTS)} envs", "kernels"),
        (f"kernlock lock (cold), {len(ENVIRONMENTS)} envs", "kernlock"),
        (f"kernlock lock (unchanged project), {len(ENVIRONMENTS)} envs", "kernlock-noop"),
        (f"kernlock lock (cold), {len(wide)} envs", "kernlock-26"),
    ):
        print(f"{label:<44}{median(name, 1):>10.0f}{median(name, 0):>10.2f}")
    print(
        f"requests ratio kernels/kernlock: {median('kernels', 1) / max(median('kernlock', 1), 1):.1f}x fewer "
        f"(goal >= 5x)"
    )
    print(f"time ratio kernels/kernlock:     {median('kernels', 0) / median('kernlock', 0):.1f}x faster (goal >= 3x)")
    print(f"unchanged re-lock: {median('kernlock-noop', 1) / args.kernels:.2f} requests per kernel (goal <= 1)")
    print()
    print(
        f"lock I/O, {args.kernels} kernels x {len(wide)} environments ({io['size'] / 1024:.0f} KiB), "
        f"median of {args.io_repeat}, in this process"
    )
    for label, key, goal in (
        ("write (lockfile.dumps)", "write", 0.030),
        ("read, every check (lockfile.read)", "read", None),
        ("read at run time (lockindex.read, warm)", "runtime", 0.010),
    ):
        value = io.get(key)
        shown = "n/a" if value is None else f"{value * 1000:.1f} ms"
        target = f"  (goal <= {goal * 1000:.0f} ms)" if goal else ""
        print(f"  {label:<42}{shown:>10}{target}")


def lock_io(path: Path, environment: str, cache: Path, repeat: int) -> dict[str, float | int | None]:
    """Write, full read and run-time read of the lock at ``path`` (None: not in this kernlock)."""
    from kernlock.lock import file as lockfile

    os.environ["KERNLOCK_CACHE"] = str(cache)
    lock = lockfile.read(path)
    result: dict[str, float | int | None] = {"size": path.stat().st_size}
    result["write"] = median_seconds(lambda: lockfile.dumps(lock), repeat)
    result["read"] = median_seconds(lambda: lockfile.read(path), repeat)
    try:
        from kernlock.lock import index as lockindex
    except ImportError:  # a kernlock before the lock index
        result["runtime"] = None
        return result
    lockindex.read(str(path), environment)  # the first process after the lock changed derives the index
    result["runtime"] = median_seconds(lambda: lockindex.read(str(path), environment), repeat)
    return result


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


# -- signatures: what verifying every bundle at lock time costs (issue #25; run with --signatures) -----------


def compile_sigstore() -> None:
    """Compile the bytecode of sigstore and everything it imports, as `pip install` does (uv and
    PYTHONDONTWRITEBYTECODE may have left none): otherwise each process compiles ~1,300 modules, about a second."""
    import importlib.util
    import py_compile

    before = set(sys.modules)
    import sigstore.models
    import sigstore.verify  # noqa: F401

    for name in sorted(set(sys.modules) - before):
        source = getattr(sys.modules[name], "__file__", None)
        if source and source.endswith(".py"):
            try:
                py_compile.compile(source, cfile=importlib.util.cache_from_source(source), doraise=True)
            except (OSError, py_compile.PyCompileError):
                continue


def signatures_main() -> None:
    """A cold `kernlock lock` of the benchmark catalog for 26 environments with signatures verified (the default,
    ``mode = "verify"``) against the same lock with ``mode = "off"``, at each ``--latencies`` value: requests, bundle
    requests and wall time (median of ``--repeat`` fresh processes). Then the same 26 environments against kernels
    whose one noarch build every environment shares: the bundle costs one request per build, not per environment."""
    parser = argparse.ArgumentParser(description=signatures_main.__doc__)
    parser.add_argument("--signatures", action="store_true", help="run this benchmark (instead of the lock one)")
    parser.add_argument("--kernels", type=int, default=20)
    parser.add_argument("--variants", type=int, default=26)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.0, 0.020], help="seconds per request")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from kernlock.testing import create_kernel_repo

    compile_bytecode()
    compile_sigstore()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repos = build_benchmark_catalog(tmp / "hub", args.kernels, 1, args.variants)
        shared = [f"kernels-bench/shared-{i:02d}" for i in range(args.kernels)]
        for repo in shared:
            create_kernel_repo(tmp / "hub", repo, {"v1": ["torch-universal"]}, kind="activation")
        wide = machines(tmp / "hub", repos[0], "v1")
        projects = {}
        for name, kernels, mode in (
            ("distinct, signatures", repos, "verify"),
            ("distinct, no signatures", repos, "off"),
            ("shared, signatures", shared, "verify"),
            ("shared, no signatures", shared, "off"),
        ):
            folder = tmp / name.replace(", ", "-").replace(" ", "-")
            folder.mkdir()
            (folder / "pyproject.toml").write_text(
                "[tool.kernlock]\nenvironments = [" + ", ".join(f'"{e}"' for e in wide) + "]\n\n"
                "[tool.kernlock.kernels]\n" + "".join(f'"{r}" = "v1"\n' for r in kernels) + "\n"
                f'[tool.kernlock.signatures]\nmode = "{mode}"\n'
            )
            projects[name] = folder
        results: dict[tuple[float, str], list[tuple[float, int, int]]] = {}
        kernlock_bin = str(Path(sys.executable).parent / "kernlock")
        with HubServer(tmp / "hub") as server:
            base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNEL"))}
            base.update(server.env())
            for latency in args.latencies:
                server.faults.clear()
                if latency:
                    server.faults.latency(latency)
                for i in range(args.repeat):
                    for name, folder in projects.items():
                        (folder / "kernels.lock").unlink(missing_ok=True)
                        cache = tmp / f"c-{latency}-{i}-{folder.name}"
                        env = {**base, "HF_HOME": str(cache / "home"), "KERNLOCK_CACHE": str(cache / "kl")}
                        wall, requests = run([kernlock_bin, "lock", "--project", str(folder)], env, server)
                        bundles = sum(r.path.endswith("/metadata.json.sigstore") for r in server.log.snapshot())
                        results.setdefault((latency, name), []).append((wall, requests, bundles))

    print(
        f"cold `kernlock lock`, {args.kernels} kernels x {len(wide)} environments, median of {args.repeat} runs "
        "(distinct: one build per environment; shared: one noarch build every environment loads)"
    )
    print(f"{'latency':>8}  {'project':<26}{'requests':>10}{'bundles':>9}{'wall s':>9}")
    for (latency, name), runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        requests = statistics.median(r[1] for r in runs)
        bundles = statistics.median(r[2] for r in runs)
        print(f"{latency * 1000:>6.0f}ms  {name:<26}{requests:>10.0f}{bundles:>9.0f}{wall:>9.2f}")


if __name__ == "__main__":
    if "--outdated" in sys.argv:
        outdated_main()
    elif "--signatures" in sys.argv:
        signatures_main()
    else:
        main()
