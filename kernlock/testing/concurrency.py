"""How many requests the test Hub serves at once, per client, and the cap of a rate-limited Hub.

:class:`HubServer` puts every request through :func:`gated`: with ``max_concurrent=N`` a client's requests
beyond N wait for a slot (as on a Hub that rate-limits each client), and either way ``hub.concurrency`` records
the most requests of one client served at once and how many had to wait, so a test can assert what a client
really asked for in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Concurrency", "gated"]

App = Callable[..., Iterable[bytes]]


class Concurrency:
    """Thread-safe count of the requests being served, per client (its address). With a ``limit``, a client's
    requests beyond it wait for one of its slots. A request counts from when it has its slot until its answer's body
    is sent. ``peak`` and ``queued`` cover the time since the server started, or since :meth:`clear`."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 or None, not {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._now: dict[str, int] = {}
        self._peak = 0
        self._queued = 0

    @property
    def peak(self) -> int:
        """The most requests of one client that were being served at the same time."""
        with self._lock:
            return self._peak

    @property
    def queued(self) -> int:
        """How many requests had to wait for a slot (always 0 without a limit)."""
        with self._lock:
            return self._queued

    @property
    def in_flight(self) -> int:
        """Requests being served now, over every client."""
        with self._lock:
            return sum(self._now.values())

    def clear(self) -> None:
        """Start counting ``peak`` (from what is being served now) and ``queued`` (from 0) again."""
        with self._lock:
            self._peak = max(self._now.values(), default=0)
            self._queued = 0

    def enter(self, client: str) -> Callable[[], None]:
        """Wait for one of ``client``'s slots (with a limit) and count the request in; returns the call that counts it
        out and frees its slot (once)."""
        slot = None
        if self.limit is not None:
            with self._lock:
                slot = self._slots.setdefault(client, threading.BoundedSemaphore(self.limit))
            if not slot.acquire(blocking=False):
                with self._lock:
                    self._queued += 1
                slot.acquire()
        with self._lock:
            now = self._now[client] = self._now.get(client, 0) + 1
            self._peak = max(self._peak, now)
        done = threading.Event()

        def leave() -> None:
            if done.is_set():
                return
            done.set()
            with self._lock:
                self._now[client] -= 1
            if slot is not None:  # counted out first: the next request in never sees one too many
                slot.release()

        return leave


def gated(app: App, concurrency: Concurrency) -> App:
    """The WSGI ``app`` with every request counted by ``concurrency`` (and held back by its limit) until the server
    closes the answer's body."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        leave = concurrency.enter(environ.get("REMOTE_ADDR", ""))
        try:
            body = app(environ, start_response)
        except BaseException:
            leave()
            raise
        return _Releasing(body, leave)

    return serve


class _Releasing:
    """An answer's body that calls ``release`` once when the server closes it."""

    def __init__(self, body: Iterable[bytes], release: Callable[[], None]) -> None:
        self.body = body
        self._release = release

    def __iter__(self) -> Any:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self._release()
