"""Cancellation shared by every worker thread: a SIGINT/SIGTERM (or an error in a sibling task) sets it, and
each download chunk and each retry wait checks it, so a command stops within a second instead of finishing
every queued download first."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "Cancelled",
    "Interrupted",
    "cancel",
    "cancelled",
    "check",
    "finish",
    "install_handlers",
    "reset",
    "sleep",
    "worker_pool",
]

_cancelled = threading.Event()


class Cancelled(Exception):
    """Raised inside a worker when the command is being stopped; never shown to the user."""


def cancel() -> None:
    """Ask every running download and retry wait to stop."""
    _cancelled.set()


def reset() -> None:
    """Start a new command (library use: a later call after an interrupted one)."""
    _cancelled.clear()


def cancelled() -> bool:
    return _cancelled.is_set()


def check() -> None:
    """Raise Cancelled when the command is being stopped."""
    if _cancelled.is_set():
        raise Cancelled()


def sleep(seconds: float) -> None:
    """Wait ``seconds`` unless the command is stopped first (then raise Cancelled)."""
    if _cancelled.wait(max(0.0, seconds)):
        raise Cancelled()


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the main thread; ``exit_code`` is 128 + the signal number (130, 143)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.exit_code = 128 + signum


def install_handlers() -> None:
    """Make SIGINT and SIGTERM raise Interrupted in the main thread and cancel every worker (CLI only)."""
    import signal

    def handler(signum: int, frame: object) -> None:
        cancel()
        raise Interrupted(signum)

    for name in ("SIGINT", "SIGTERM"):
        signal.signal(getattr(signal, name), handler)


def finish() -> None:
    """The command's work is done and its outcome is about to be printed: from here SIGINT and SIGTERM are
    ignored, so that a run that prints its success summary also exits 0 (CLI only; a no-op off the main thread)."""
    import signal

    if threading.current_thread() is threading.main_thread():
        for name in ("SIGINT", "SIGTERM"):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    """A thread pool that never keeps an interrupted command waiting: on an interrupt it cancels every queued and
    running task (they stop at their next check) without waiting; on another error it cancels what is queued and
    waits for what runs; a normal exit waits for all."""
    from concurrent.futures import ThreadPoolExecutor  # ~10 ms (logging): only commands that fan out pay it

    pool = ThreadPoolExecutor(workers)
    try:
        yield pool
    except KeyboardInterrupt:
        cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
