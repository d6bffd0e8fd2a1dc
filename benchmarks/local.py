"""Whole-process latency of kernlock's local commands against the interpreter's floor.

    python benchmarks/local.py [--kernels 4] [--environments 2] [--runs 7] [--importtime 5]

Builds ``--kernels`` kernel repositories, serves them with kernlock's local Hub, locks them for this machine (and
``--environments`` - 1 more), syncs this machine, stops the Hub, then runs each command as a fresh process (the
``kernlock`` console script, as a user types it; ``python -m kernlock`` where none is installed), all commands in
turn, ``--runs`` rounds; prints each command's median wall time (and CPU time: user + system, which a shared
machine's load stretches less) and its ratio to ``python -c "import click"`` (the floor of a click CLI) and to
``python -c pass``. Bytecode is compiled first (``python -m compileall``), as an installed package would be. No
command here needs the network: the Hub is stopped before the first timed run, so a command that made a request
would fail.

``--importtime N`` also prints the ``python -X importtime`` total (every top-level import's cumulative time,
median of N processes) of ``import click``, ``--help``, ``lock --check``, a no-op ``sync`` and ``env``.

Goals (issue 12): ``--help`` / ``--version`` <= 1.3x ``import click``; the others <= 100 ms on the issue's
machine, where ``import click`` took 54 ms: 1.85x ``import click`` on another (this shared machine's wall times drift
by tens of percent, so the ratio is the comparable figure; both are printed).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import compile_bytecode, free_port, in_scratch_folder, machine_catalog, use_local_hub, write_project


def _kernlock() -> list[str]:
    """How a user runs kernlock: the console script that pip installed beside this interpreter (what typing
    ``kernlock ...`` runs: it imports ``kernlock.cli.app`` directly), else ``python -m kernlock`` (a checkout on
    PYTHONPATH, as on the GPU machine; runpy adds a few milliseconds)."""
    script = Path(sys.executable).with_name("kernlock")
    return [str(script)] if script.is_file() else ["-m", "kernlock"]


KERNLOCK = _kernlock()
COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ('python -c "import click"', ["-c", "import click"]),
    ("kernlock --help", [*KERNLOCK, "--help"]),
    ("kernlock --version", [*KERNLOCK, "--version"]),
    ("kernlock lock --check", [*KERNLOCK, "lock", "--check"]),
    ("kernlock sync (no-op)", [*KERNLOCK, "sync"]),
    ("kernlock sync --frozen (no-op)", [*KERNLOCK, "sync", "--frozen"]),
    ("kernlock show", [*KERNLOCK, "show"]),
    ("kernlock verify", [*KERNLOCK, "verify"]),
    ("kernlock env", [*KERNLOCK, "env"]),
]


#: The issue's goal for local commands, and `import click` on the machine it was measured on (ms).
REFERENCE_MS, REFERENCE_CLICK_MS = 100.0, 54.0


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kernels", type=int, default=4, help="locked kernels (default 4)")
    parser.add_argument("--environments", type=int, default=2, help="target environments, 1-3 (default 2)")
    parser.add_argument("--runs", type=int, default=7, help="processes per command, interleaved (default 7)")
    parser.add_argument("--importtime", type=int, default=0, metavar="N", help="-X importtime totals, N processes each")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-local-", lambda work: _run(args, work))


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    use_local_hub(work, port)
    compile_bytecode()

    from kernlock import api
    from kernlock.environments.environment import detect
    from kernlock.testing import HubServer

    root = work / "hub"
    env = str(detect())
    repos, machines = machine_catalog(root, args.kernels, env, versions=1)
    envs = machines[: max(1, min(3, args.environments))]
    project = work / "project"
    write_project(project, repos, envs)
    with HubServer(root, port=port):
        api.lock(project)
        api.sync(project, progress=False)

    times: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}
    cpu: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}  # user + system time of the process
    for _ in range(args.runs):
        for name, argv in COMMANDS:
            used = _children_cpu()
            start = time.perf_counter()
            done = subprocess.run([sys.executable, *argv], cwd=project, capture_output=True, check=False)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(_children_cpu() - used)
            if done.returncode != 0:
                raise SystemExit(f"{name} failed:\n{done.stderr.decode()[-2000:]}")
    medians = {name: statistics.median(values) for name, values in times.items()}
    if args.importtime:
        _print_importtime(project, args.importtime)
    floor, click = medians["python -c pass"], medians['python -c "import click"']
    how = "`python -m kernlock`" if KERNLOCK[0] == "-m" else "its console script"
    print(
        f"{args.kernels} kernels x {len(envs)} environments, whole processes, median of {args.runs} interleaved "
        f"runs, bytecode compiled; kernlock run as {how}"
    )
    cpus = {name: statistics.median(values) for name, values in cpu.items()}
    cpu_click = cpus['python -c "import click"']
    print(f"{'command':34}{'median ms':>10}{'vs click':>10}{'vs pass':>10}{'cpu ms':>10}{'vs click':>10}")
    for name, _ in COMMANDS:
        print(
            f"{name:34}{medians[name] * 1000:>10.1f}{medians[name] / click:>9.2f}x{medians[name] / floor:>9.2f}x"
            f"{cpus[name] * 1000:>10.1f}{cpus[name] / cpu_click:>9.2f}x"
        )
    front = max(medians["kernlock --help"], medians["kernlock --version"]) / click
    slowest = max(medians[name] for name, _ in COMMANDS[4:])
    # 100 ms is the goal on the machine the issue measured, where `import click` took 54 ms: on a slower or busier
    # machine the same goal is 100/54 = 1.85x `import click` (both figures are printed; either meets it).
    scaled = slowest / click
    ok = front <= 1.3 and (slowest <= 0.100 or scaled <= REFERENCE_MS / REFERENCE_CLICK_MS)
    print(
        f"goal: --help/--version <= 1.3x import click ({front:.2f}x); other commands <= 100 ms, i.e. <= "
        f"{REFERENCE_MS / REFERENCE_CLICK_MS:.2f}x import click (slowest {slowest * 1000:.0f} ms, {scaled:.2f}x): "
        f"{'PASS' if ok else 'FAIL'}"
    )
    others = max(medians[name] for name, _ in COMMANDS[4:] if name != "kernlock env") / click
    env_ratio = medians["kernlock env"] / click
    print(
        f"issue 23: local commands <= 2.0x import click ({others:.2f}x), env <= 2.5x ({env_ratio:.2f}x): "
        f"{'PASS' if others <= 2.0 and env_ratio <= 2.5 else 'FAIL'}"
    )
    return 0 if ok else 1


def _children_cpu() -> float:
    """User + system seconds of this process's finished children (a busy machine stretches wall time far more)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


#: The commands whose ``-X importtime`` totals ``--importtime`` prints.
IMPORTTIME = (
    'python -c "import click"',
    "kernlock --help",
    "kernlock lock --check",
    "kernlock sync (no-op)",
    "kernlock env",
)


def _import_total(stderr: str) -> float:
    """The sum of the top-level imports' cumulative times in a ``-X importtime`` report, in ms."""
    total = 0
    for line in stderr.splitlines():
        parts = line.split("|")
        top = len(parts) == 3 and not parts[2][1:].startswith(" ")  # nested imports are indented below their importer
        if line.startswith("import time:") and top and parts[1].strip().isdigit():
            total += int(parts[1])
    return total / 1000


def _print_importtime(project: Path, runs: int) -> None:
    argvs = dict(COMMANDS)
    totals: dict[str, list[float]] = {name: [] for name in IMPORTTIME}
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    for _ in range(runs):
        for name in IMPORTTIME:
            done = subprocess.run([sys.executable, *argvs[name]], cwd=project, env=env, capture_output=True, text=True)
            totals[name].append(_import_total(done.stderr))
    print(f"python -X importtime totals, median of {runs} processes (ms):")
    for name in IMPORTTIME:
        print(f"  {name:32}{statistics.median(totals[name]):>8.1f}")


if __name__ == "__main__":
    sys.exit(main())
