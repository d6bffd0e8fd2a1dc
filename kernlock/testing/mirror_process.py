"""Run ``kernlock serve`` in its own process (the real gunicorn server) for tests and benchmarks."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["MirrorProcess", "client_env", "free_port", "tree_rss"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class MirrorProcess:
    """``kernlock serve ARGS --port <free>`` until stopped; a context manager that waits for ``/health``."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, workers: int = 1, threads: int = 4) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "kernlock", "serve", *args, "--port", str(self.port)]
        argv += ["--workers", str(workers), "--threads", str(threads), "--access-log", str(log)]
        self.log = log
        self._out = open(log.with_suffix(".out"), "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(argv, env=env, stdout=self._out, stderr=subprocess.STDOUT)

    def __enter__(self) -> MirrorProcess:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kernlock serve exited {self.proc.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"kernlock serve did not answer /health:\n{self.output()}")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def output(self) -> str:
        """What the server printed (the banner, gunicorn's error log)."""
        if not self._out.closed:
            self._out.flush()
        return self.log.with_suffix(".out").read_text(errors="replace")

    def requests(self) -> list[str]:
        """The access log's lines."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def rss(self) -> int:
        """Resident memory of all the server's processes (the gunicorn arbiter and its workers), in bytes."""
        return tree_rss(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM (gunicorn stops gracefully), then wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def tree_rss(pid: int) -> int:
    """Summed resident memory of a process and its children, in bytes (0 once it is gone)."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    total = 0
    for one in pids:
        try:
            status = Path(f"/proc/{one}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


def client_env(base: dict[str, str], url: str, cache: Path) -> dict[str, str]:
    """A node's environment pointed at the mirror ``url`` with its own empty cache."""
    env = dict(base)
    env.update({"HF_ENDPOINT": url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache)})
    for key in ("KERNELS_CACHE", "HF_HUB_OFFLINE", "LOCAL_KERNELS"):
        env.pop(key, None)
    return env
