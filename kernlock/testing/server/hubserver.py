"""The test Hub as a running server: :class:`HubServer` serves :func:`~kernlock.testing.server.app.make_app` over
HTTP/1.1 in a background thread, with its request log, faults and concurrency record."""

from __future__ import annotations

import threading
from pathlib import Path

from kernlock.testing.concurrency import Concurrency, gated
from kernlock.testing.server.app import make_app
from kernlock.testing.server.faults import Faults
from kernlock.testing.server.httpd import Server
from kernlock.testing.server.log import RequestLog

__all__ = ["HubServer"]


class HubServer:
    """Threaded HTTP/1.1 server for :func:`make_app` on ``host:port`` (0: a free port); a context manager."""

    def __init__(
        self,
        root: Path | str,
        host: str = "127.0.0.1",
        port: int = 0,
        page_size: int = 1000,
        max_concurrent: int | None = None,
    ) -> None:
        """``max_concurrent``: serve at most that many requests of one client at once (a rate-limited Hub); the
        others wait for a slot. ``concurrency`` records how many were served at once, capped or not."""
        self.root = Path(root)
        self.host = host
        self.port = port
        self.log = RequestLog()
        self.faults = Faults()
        self.app = make_app(self.root, log=self.log, faults=self.faults, page_size=page_size)
        self.max_concurrent = max_concurrent
        self.concurrency = Concurrency(max_concurrent or None)
        self._serve = gated(self.app, self.concurrency)
        self._httpd: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        if self._httpd is None:
            raise RuntimeError("HubServer is not started")
        host, port = self._httpd.server_address[:2]
        if isinstance(host, bytes):  # typeshed allows it (AF_UNIX); a TCP server binds a str host
            host = host.decode()
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"

    def start(self) -> HubServer:
        """Bind and serve in a background thread (idempotent)."""
        if self._httpd is None:
            self._httpd = Server((self.host, self.port), self._serve)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="kernlock-hub", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket and open connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def env(self) -> dict[str, str]:
        """Environment variables that point a fresh client process at this server (and at the trusted root of the
        test sigstore instance that signs its builds, when the Hub has one)."""
        env = {"HF_ENDPOINT": self.url, "HF_HUB_DISABLE_XET": "1"}
        trusted_root = self.root / "sigstore" / "trusted_root.json"
        if trusted_root.exists():
            env["KERNLOCK_SIGSTORE_TRUSTED_ROOT"] = str(trusted_root.resolve())
        return env

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
