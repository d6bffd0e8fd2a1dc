"""Reliability: how `kernlock lock` / `kernlock sync` end when the Hub keeps failing, and how fast.

    python benchmarks/reliability.py [--kernels 2] [--so-mib 4] [--messages]

Builds kernel repositories under a temporary folder and serves them with kernlock's local Hub. For every
persistent fault (429 with Retry-After: 1, 500, 503, a dropped connection, a truncated body) on every request
type kernlock sends (org overview, refs, tree listing, commit listing, metadata.json, file download), and for a
dead endpoint (a closed port), it runs the command in a fresh process with cold caches and prints: the fault, the
command, its exit code, the requests the Hub saw (all, and those of the faulted type), the seconds until the clean
error, and the lines on stderr.

Goal (the budget of kernlock/hub/http.py): every row exits 1 with one line on stderr, within about 15 s, with at most
4 requests per request that failed for good (+ the command's 8 retries when requests run in parallel).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import free_port, in_scratch_folder

ORG = "bench-reliability"
FAULTS: dict[str, Callable[[Any, str], None]] = {
    "429 Retry-After: 1": lambda s, m: s.faults.status(429, times=None, match=m, retry_after=1),
    "500": lambda s, m: s.faults.status(500, times=None, match=m),
    "503": lambda s, m: s.faults.status(503, times=None, match=m),
    "dropped connection": lambda s, m: s.faults.drop(times=None, match=m),
    "truncated body": lambda s, m: s.faults.truncate(times=None, match=m),
}
REQUESTS = {  # request type -> (regex of its path, command)
    "org overview": ("/api/organizations/", "lock"),
    "refs": ("/api/kernels/.*/refs", "lock"),
    "tree listing": ("/tree/", "lock"),
    "commit listing": ("/commits/", "lock"),
    "metadata.json": ("/resolve/.*metadata.json$", "lock"),
    "file download": ("/resolve/", "sync"),
}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", type=int, default=2, help="kernels of one org in the project (default 2)")
    parser.add_argument("--so-mib", type=float, default=4, help="size of each variant's .so in MiB (default 4)")
    parser.add_argument("--messages", action="store_true", help="also print each command's error line")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-reliability-", lambda work: _run(args, work))


def _run(args: argparse.Namespace, work: Path) -> int:
    for key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK", "DISABLE_TELEMETRY", "LOCAL_KERNELS"):
        os.environ.pop(key, None)
    from kernlock.testing.fixtures import CPU_VARIANT, create_kernel_repo, set_org_trust
    from kernlock.testing.server import HubServer

    hub_root = work / "hub"
    set_org_trust(hub_root, ORG, True)
    repos = [f"{ORG}/kernel-{i:02d}" for i in range(args.kernels)]
    heads = []
    for repo in repos:
        kernel = create_kernel_repo(
            hub_root, repo, {"v1": [CPU_VARIANT, "torch213-cxx11-cu128-x86_64-linux"]}, so_size=int(args.so_mib * 2**20)
        )
        heads.append(kernel.head("v1"))

    rows: list[tuple[str, str, int, int, int, float, list[str]]] = []
    with HubServer(hub_root) as server:
        base = {
            **os.environ,
            **server.env(),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }

        def run(
            name: str,
            command: str,
            fault: Callable[[], None] | None = None,
            match: str = "$^",
            short: bool = False,
            endpoint: str = "",
        ) -> None:
            folder = work / f"run-{len(rows):03d}"
            project = folder / "project"
            project.mkdir(parents=True)
            revs = [head[:10] if short else "v1" for head in heads]
            (project / "pyproject.toml").write_text(
                f'[project]\nname = "bench"\nversion = "0"\n\n[tool.kernlock]\nenvironments = ["{CPU_VARIANT}"]\n\n'
                "[tool.kernlock.kernels]\n" + "".join(f'"{r}" = "{v}"\n' for r, v in zip(repos, revs, strict=True))
            )
            env = {
                **base,
                "HF_HOME": str(folder / "hf-home"),
                "HF_HUB_CACHE": str(folder / "hf-cache"),
                "KERNLOCK_CACHE": str(folder / "kernlock-cache"),
            }
            cli = [sys.executable, "-m", "kernlock", command, "--project", str(project)]
            server.faults.clear()
            if command == "sync":  # lock against the healthy Hub first, then sync through the fault
                locked = subprocess.run([*cli[:3], "lock", *cli[4:]], env=env, capture_output=True, text=True)
                if locked.returncode != 0:
                    raise SystemExit(f"lock failed:\n{locked.stderr}")
            if fault is not None:
                fault()
            if endpoint:
                env["HF_ENDPOINT"] = endpoint
            server.log.clear()
            start = time.perf_counter()
            done = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=300)
            wall = time.perf_counter() - start
            hit = sum(1 for r in server.log.snapshot() if re.search(match, r.path))
            lines = done.stderr.strip().splitlines()
            rows.append((name, command, done.returncode, len(server.log), hit, wall, lines))

        run("none (healthy Hub)", "lock")
        run("none (healthy Hub)", "sync")
        for fault, inject in FAULTS.items():
            for request, (match, command) in REQUESTS.items():
                run(
                    f"{fault} on {request}",
                    command,
                    lambda inject=inject, match=match: inject(server, match),
                    match=match,
                    short=request == "commit listing",
                )
        server.faults.clear()
        dead = f"http://127.0.0.1:{free_port()}"
        run("dead endpoint (connection refused)", "lock", endpoint=dead)
        run("dead endpoint (connection refused)", "sync", endpoint=dead)
        server.faults.clear()
        stops = _interrupts(server, work, repos, base)

    print(
        f"{len(repos)} kernels of one org, 1 environment ({CPU_VARIANT}), .so of {args.so_mib:g} MiB; every row is "
        "a fresh process with cold caches"
    )
    print(f"{'fault':40}{'command':>8}{'exit':>5}{'requests':>9}{'faulted':>8}{'seconds':>8}{'stderr lines':>13}")
    ok = True
    for name, command, code, requests, hit, wall, lines in rows:
        print(f"{name:40}{command:>8}{code:>5}{requests:>9}{hit:>8}{wall:>8.2f}{len(lines):>13}")
        if args.messages and lines:
            print(f"    {lines[-1][:300]}")
        if not name.startswith("none"):
            ok = ok and code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and wall < 20
    print(f"goal: every faulted row exits 1 with one `error:` line within 20 s: {'PASS' if ok else 'FAIL'}")
    print()
    print("interrupt to exit (the Hub answers every request after 2 s, so requests and downloads are in flight)")
    print(f"{'signal':10}{'command':>8}{'runs':>5}{'exit codes':>12}{'median s':>10}{'max s':>8}")
    for (signame, command), (codes, waits) in stops.items():
        print(
            f"{signame:10}{command:>8}{len(waits):>5}{','.join(sorted(set(map(str, codes)))):>12}"
            f"{statistics.median(waits):>10.3f}{max(waits):>8.3f}"
        )
        ok = ok and set(codes) == {128 + getattr(signal, signame)} and max(waits) < 1.0
    print(f"goal: SIGINT/SIGTERM end the command within 1 s with exit 130/143: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def _interrupts(
    server: Any, work: Path, repos: list[str], base: dict[str, str], runs: int = 5
) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
    """Send SIGINT/SIGTERM to `lock` and `sync` while requests are in flight; seconds from the signal to exit."""
    from kernlock.testing.fixtures import CPU_VARIANT

    results: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for signame in ("SIGINT", "SIGTERM"):
        for command in ("lock", "sync"):
            codes, waits = [], []
            for i in range(runs):
                folder = work / f"stop-{signame}-{command}-{i}"
                project = folder / "project"
                project.mkdir(parents=True)
                (project / "pyproject.toml").write_text(
                    f'[tool.kernlock]\nenvironments = ["{CPU_VARIANT}"]\n\n[tool.kernlock.kernels]\n'
                    + "".join(f'"{r}" = "v1"\n' for r in repos)
                )
                env = {
                    **base,
                    "HF_HOME": str(folder / "hf-home"),
                    "HF_HUB_CACHE": str(folder / "hf-cache"),
                    "KERNLOCK_CACHE": str(folder / "kernlock-cache"),
                }
                cli = [sys.executable, "-m", "kernlock", command, "--project", str(project)]
                server.faults.clear()
                if command == "sync":
                    subprocess.run([*cli[:3], "lock", *cli[4:]], env=env, capture_output=True, check=True)
                server.faults.latency(2.0)
                started = time.time()
                proc = subprocess.Popen(cli, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                while proc.poll() is None and not any(r.started >= started for r in server.log.snapshot()):
                    time.sleep(0.01)
                time.sleep(0.3)
                sent = time.perf_counter()
                proc.send_signal(getattr(signal, signame))
                codes.append(proc.wait(timeout=60))
                waits.append(time.perf_counter() - sent)
            results[(signame, command)] = (codes, waits)
    server.faults.clear()
    return results


if __name__ == "__main__":
    sys.exit(main())
