"""The test Hub's request log: every request the app answered (or faulted), in the order of their answers, for
tests to count and assert on."""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["Request", "RequestLog"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One answered (or faulted) request; ``status`` is 0 when the connection was dropped."""

    method: str
    path: str
    status: int
    started: float


class RequestLog:
    """Thread-safe record of every request the app answered, in arrival order of their answers."""

    def __init__(self) -> None:
        self._entries: list[Request] = []
        self._lock = threading.Lock()

    def add(self, entry: Request) -> None:
        """Append one entry."""
        with self._lock:
            self._entries.append(entry)

    @property
    def entries(self) -> list[Request]:
        """A copy of all entries."""
        return self.snapshot()

    def snapshot(self) -> list[Request]:
        """A copy of all entries."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        """Forget all entries."""
        with self._lock:
            self._entries.clear()

    def count(self, method: str | None = None, contains: str | None = None) -> int:
        """Entries with this method (any if None) whose raw path contains ``contains`` (any if None)."""
        return sum(
            1
            for entry in self.snapshot()
            if (method is None or entry.method == method.upper()) and (contains is None or contains in entry.path)
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
