"""A real Ray cluster of several nodes on 127.0.0.1, for the Ray tests and benchmarks/ray.py: each node a raylet
started by the real `ray start` with an environment of its own (HOME, caches, the offline switch), as a node of a
cluster started outside kernlock would be; stopped with every process it made (none is left behind: checked)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).parent / "ray")
#: Ray without telemetry or log deduplication; one thread per worker. (Every node is started with
#: --node-ip-address=127.0.0.1, which Ray 2.60 replaces with this host's own address for a cluster of several nodes:
#: only a single-node cluster may keep the loopback one. Either way nothing leaves this machine.)
QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    "OMP_NUM_THREADS": "1",
}


#: For tests on 2 cores: no idle workers started ahead on each node (a job with a runtime_env never takes one; the
#: others start theirs when they ask). benchmarks/ray.py keeps Ray's defaults.
LEAN = {"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RayCluster:
    """``ray start --head`` and the nodes that join it, each with its own environment; a context manager."""

    def __init__(self, *, lean: bool = True) -> None:
        self.lean = lean
        # Short: Ray's socket paths live below it (a Unix socket path holds at most 107 bytes).
        self.temp = Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))
        self.port = free_port()
        self.dashboard_port = free_port()
        self._groups: list[int] = []

    @property
    def address(self) -> str:
        """What a driver gives ``ray.init(address=...)``."""
        return f"127.0.0.1:{self.port}"

    @property
    def jobs(self) -> str:
        """What ``ray job submit --address`` takes (the minimal dashboard's job server)."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(
        self, env: dict[str, str], cpus: int = 1, resources: dict[str, float] | None = None, *, jobs: bool = False
    ) -> None:
        """The head node, with ``env`` (its HOME and caches) and ``cpus`` CPUs. ``jobs``: with Ray's job server
        for `ray job submit`, which lives in the dashboard process (Ray loads it only with the dashboard), on
        127.0.0.1; without, no dashboard."""
        dashboard = [f"--include-dashboard={str(jobs).lower()}", "--dashboard-host=127.0.0.1"]
        head = ["--head", f"--port={self.port}", f"--dashboard-port={self.dashboard_port}"]
        self._start(env, cpus, resources, *head, *dashboard)

    def add_node(self, env: dict[str, str], cpus: int = 1, resources: dict[str, float] | None = None) -> None:
        """Another node joining the head, with an environment of its own."""
        self._start(env, cpus, resources, f"--address={self.address}")

    def _start(self, env: dict[str, str], cpus: int, resources: dict[str, float] | None, *args: str) -> None:
        # Each node its own folder (sessions, runtime_env builds), as each machine of a cluster has.
        temp = self.temp / f"n{len(self._groups)}"
        argv = [RAY, "start", *args, f"--temp-dir={temp}", "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}"]
        argv.append("--disable-usage-stats")
        argv += [f"--dashboard-agent-listen-port={free_port()}", f"--resources={json.dumps(resources or {})}"]
        child = subprocess.Popen(
            argv,
            env={**env, **QUIET, **(LEAN if self.lean else {})},
            start_new_session=True,  # every process it starts stays in this group: stop() ends them all
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._groups.append(child.pid)
        out, _ = child.communicate(timeout=120)
        if child.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed ({child.returncode}):\n{out[-4000:]}")

    def logs(self, limit: int = 6000) -> str:
        """The tail of every worker's stderr (what a failed test shows)."""
        found = sorted(self.temp.glob("n*/session_*/logs/worker-*.err"))
        text = "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in found if p.stat().st_size)
        return text[-limit:]

    def left(self) -> list[psutil.Process]:
        """Processes of this cluster still running: in its process groups, or naming its folder."""
        mine = str(self.temp)
        left = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            try:
                if process.status() == psutil.STATUS_ZOMBIE:  # ended; only its parent's wait is missing
                    continue
                if os.getpgid(process.pid) in self._groups or mine in " ".join(process.info["cmdline"] or []):
                    left.append(process)
            except (ProcessLookupError, psutil.Error):
                continue
        return left

    def stop(self) -> None:
        """Stop every process of the cluster (SIGTERM, then SIGKILL after 3 s: a test cluster keeps nothing worth
        a clean shutdown); raise if any is left."""
        for how, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            for group in self._groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, how)
            for process in self.left():
                with contextlib.suppress(psutil.Error):
                    process.send_signal(how)
            deadline = time.monotonic() + wait
            while self.left() and time.monotonic() < deadline:
                time.sleep(0.2)
            if not self.left():
                break
        left = self.left()
        if left:
            raise RuntimeError(f"Ray processes left behind: {[p.info['cmdline'] for p in left]}")
        subprocess.run(["rm", "-rf", str(self.temp)], check=False)

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
