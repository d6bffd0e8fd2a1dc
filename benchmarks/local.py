"""Whole-process latency of kernlock's local commands against the interpreter's floor.

    python benchmarks/local.py [--kernels 4] [--environments 2] [--runs 7] [--importtime 5] [--json F]

Builds ``--kernels`` kernel repositories, serves them with kernlock's local Hub, locks them for this machine (and
``--environments`` - 1 more), syncs this machine, stops the Hub, then runs each command as a fresh process (the
``kernlock`` console script, as a user types it; ``python -m kernlock`` where none is installed), all commands in
turn, ``--runs`` rounds; prints each command's median wall time (and CPU time: user + system, which a shared
machine's load stretches less) and its ratio to ``python -c "import click"`` (the floor of a click CLI) and to
``python -c pass``. Bytecode is compiled first (``python -m compileall``), as an installed package would be. No
command here needs the network: the Hub is stopped before the first timed run, so a command that made a request
would fail.

The everyday commands answer from memory while nothing they read has changed (kernlock.commands.unchanged): the
plain rows are every run but a command's first, as a user's second `sync` of the day; the "(derived)" rows forget
the remembered answer before each run, which is what the first command after any change (a new lock, an edited
pyproject, a file touched in the cache) costs.

``--json F`` also writes every row (median wall and CPU ms, ratios to ``import click``) and the goals as JSON to
``F``, what ``benchmarks/chart.py`` draws.

``--importtime N`` also prints the ``python -X importtime`` total (every top-level import's cumulative time,
median of N processes) of ``import click``, ``--help``, ``lock --check``, a no-op ``sync`` and ``env``.

Goals: ``--help`` / ``--version`` <= 1.3x ``import click`` (issue 12); a no-op ``sync``, ``sync --frozen``, ``show``
and ``lock --check`` <= 1.2x, ``verify`` (a signed lock) <= 1.5x (issue 41), ``env`` <= 2.5x (issue 32). A shared
machine's wall times drift by tens of percent, so the ratio within one run is the comparable figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

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
    ("kernlock lock --check (derived)", [*KERNLOCK, "lock", "--check"]),
    ("kernlock sync (no-op, derived)", [*KERNLOCK, "sync"]),
    ("kernlock show (derived)", [*KERNLOCK, "show"]),
]
#: Rows that run with their remembered answer forgotten first (kernlock.commands.unchanged): what the first such
#: command after any change to what it reads costs (a new lock, an edited pyproject, a file changed in the cache).
FORGET = {
    "kernlock lock --check (derived)": "lock-check-",
    "kernlock sync (no-op, derived)": "sync-checked-",
    "kernlock show (derived)": "show-",
}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kernels", type=int, default=4, help="locked kernels (default 4)")
    parser.add_argument("--environments", type=int, default=2, help="target environments, 1-3 (default 2)")
    parser.add_argument("--runs", type=int, default=7, help="processes per command, interleaved (default 7)")
    parser.add_argument("--importtime", type=int, default=0, metavar="N", help="-X importtime totals, N processes each")
    parser.add_argument("--json", type=Path, metavar="F", help="also write the rows and goals as JSON to F")
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
            for answer in (work / "kernlock-own" / "answers").glob(f"{FORGET[name]}*") if name in FORGET else ():
                answer.unlink()
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
    verdicts = [(goal, _ratio(medians, goal, click)) for goal in GOALS]
    for goal, ratio in verdicts:
        verdict = "PASS" if ratio <= goal.limit else "FAIL"
        print(f"goal: {goal.label} <= {goal.limit:.1f}x import click ({ratio:.2f}x): {verdict}")
    if args.json:
        rows = {
            name: {
                "median_ms": round(medians[name] * 1000, 1),
                "vs_click": round(medians[name] / click, 3),
                "cpu_ms": round(cpus[name] * 1000, 1),
                "cpu_vs_click": round(cpus[name] / cpu_click, 3),
            }
            for name, _ in COMMANDS
        }
        goals = [
            {"label": g.label, "commands": list(g.commands), "limit": g.limit, "ratio": round(r, 3)}
            for g, r in verdicts
        ]
        figures = {"runs": args.runs, "kernels": args.kernels, "environments": len(envs), "cores": os.cpu_count()}
        args.json.write_text(json.dumps({**figures, "rows": rows, "goals": goals}, indent=1))
    return 0 if all(ratio <= goal.limit for goal, ratio in verdicts) else 1


class Goal(NamedTuple):
    """A goal: the slowest of ``commands`` at most ``limit`` times ``import click``."""

    label: str
    commands: tuple[str, ...]
    limit: float


GOALS = (
    Goal("--help / --version", ("kernlock --help", "kernlock --version"), 1.3),
    Goal(
        "lock --check, no-op sync, sync --frozen, show",
        ("kernlock lock --check", "kernlock sync (no-op)", "kernlock sync --frozen (no-op)", "kernlock show"),
        1.2,
    ),
    Goal("verify", ("kernlock verify",), 1.5),
    Goal("env", ("kernlock env",), 2.5),
)


def _ratio(medians: dict[str, float], goal: Goal, click: float) -> float:
    return max(medians[name] for name in goal.commands) / click


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
