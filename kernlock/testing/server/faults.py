"""Fault injection of the test Hub: the rules a test adds (latency, a status, a dropped connection, a truncated or
rewritten answer) and the one each request takes. :class:`kernlock.testing.server.app.HubApp` applies them."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ConnectionDropped", "Faults", "Headers", "Rule", "Transform"]


class ConnectionDropped(Exception):
    """Raised by the app to ask the HTTP server to close the connection without answering."""


Headers = list[tuple[str, str]]
#: ``transform(status, headers, body) -> (status, headers, body)`` of :meth:`Faults.rewrite`.
Transform = Callable[[int, Headers, bytes], tuple[int, Headers, bytes]]


@dataclass(slots=True, kw_only=True)
class Rule:
    kind: str
    times: int | None
    pattern: re.Pattern[str] | None
    code: int = 0
    retry_after: float | None = None
    seconds: float = 0.0
    transform: Transform | None = None

    def matches(self, path: str) -> bool:
        return self.pattern is None or self.pattern.search(path) is not None


class Faults:
    """Thread-safe fault injection. ``match`` is a regex searched in the raw path (with query);
    ``times=None`` means every matching request until :meth:`clear`."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []
        self._lock = threading.Lock()

    def _add(self, rule: Rule) -> None:
        if rule.times is not None and rule.times < 1:
            raise ValueError(f"times must be >= 1 or None, not {rule.times}")
        if rule.seconds < 0:
            raise ValueError(f"latency must be >= 0, not {rule.seconds}")
        with self._lock:
            self._rules.append(rule)

    @staticmethod
    def _compile(match: str | None) -> re.Pattern[str] | None:
        return re.compile(match) if match is not None else None

    def latency(self, seconds: float, match: str | None = None) -> None:
        """Add ``seconds`` of delay to every matching request (rules add up)."""
        self._add(Rule(kind="latency", times=None, pattern=self._compile(match), seconds=seconds))

    def status(
        self, code: int, times: int | None = 1, match: str | None = None, retry_after: float | None = None
    ) -> None:
        """Answer ``code`` (e.g. 429, 500, 503) instead of the real answer; ``Retry-After`` when given."""
        self._add(Rule(kind="status", times=times, pattern=self._compile(match), code=code, retry_after=retry_after))

    def drop(self, times: int | None = 1, match: str | None = None) -> None:
        """Close the connection without answering."""
        self._add(Rule(kind="drop", times=times, pattern=self._compile(match)))

    def truncate(self, times: int | None = 1, match: str | None = None) -> None:
        """Send the real headers (full Content-Length), then half the body, then close."""
        self._add(Rule(kind="truncate", times=times, pattern=self._compile(match)))

    def rewrite(self, transform: Transform, match: str | None = None, times: int | None = None) -> None:
        """Rewrite the real answer before it is sent: ``transform(status, headers, body)`` gets the status, the
        headers (without Content-Length) and the whole body (JSON bytes or file bytes; a HEAD gets the GET's body
        to rewrite, and sends only the headers) and returns ``(status, headers, body)``.

        Content-Length is set to the new body's length, unless the returned headers carry one of their own: then
        it is sent as given, so a test can announce one length and send another (the connection is closed after
        such an answer). ``times=None`` (the default here) rewrites every matching request until :meth:`clear`.
        """
        if not callable(transform):
            raise TypeError(f"transform must be callable, not {transform!r}")
        self._add(Rule(kind="rewrite", times=times, pattern=self._compile(match), transform=transform))

    def clear(self) -> None:
        """Remove all rules."""
        with self._lock:
            self._rules.clear()

    def delay_for(self, path: str) -> float:
        """Total latency of the rules matching ``path``."""
        with self._lock:
            return sum(r.seconds for r in self._rules if r.kind == "latency" and r.matches(path))

    def take(self, path: str) -> Rule | None:
        """The first status/drop/truncate/rewrite rule matching ``path``, consuming one of its ``times``."""
        with self._lock:
            for rule in self._rules:
                if rule.kind == "latency" or not rule.matches(path):
                    continue
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self._rules.remove(rule)
                return rule
        return None
