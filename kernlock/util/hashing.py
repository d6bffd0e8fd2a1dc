"""Hashes as kernels.lock records them: ``sha256:<hex>`` of a file's content (LFS files), or ``git-sha1:<hex>``, the
git blob id (sha1 of ``blob <size>\\0`` and the content). One home for both, so that a file hashed while it is
downloaded, copied from a bundle, or read back from the cache gives the same value."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from kernlock.util.digest import builtin

if TYPE_CHECKING:  # queue is imported by the threaded hash alone (`verify` and the run-time check hash in turn)
    import queue

__all__ = ["SMALL", "StreamHash", "hasher"]

_CHUNK = 1024 * 1024
#: Files below this size are hashed by CPython's built-in SHA modules. OpenSSL's (hashlib) hash ~5x faster where the
#: CPU has SHA instructions, but loading it costs ~2.5 ms: more than that speed saves on less than about 1 MiB, so
#: a command that hashes only small files (`verify` of pure-Python builds) never loads it.
SMALL = 1 << 20
#: The hash behind each algorithm name kernlock reads (a lock's files; a signed digest's ``sha256``/``sha512``).
_HASHES = {"git-sha1": "sha1", "sha256": "sha256", "sha512": "sha512"}


def hasher(algorithm: str, size: int) -> Any:
    """A hash object primed for a file of ``size`` bytes hashed with ``algorithm``: ``git-sha1`` (the git blob id's
    sha1, primed with its header), ``sha256`` or ``sha512``. hashlib's (OpenSSL) from :data:`SMALL` bytes on, the
    interpreter's built-in one below (the same digest)."""
    name = _HASHES.get(algorithm)
    if name is None:
        raise ValueError(f"unknown hash algorithm {algorithm!r}")
    prefix = b"blob %d\0" % size if algorithm == "git-sha1" else b""
    if size < SMALL:
        return builtin(name)(prefix)
    import hashlib

    return hashlib.new(name, prefix)


class StreamHash:
    """The hash of a file as it is written, so that no second pass reads it back: fed the bytes a resumed file
    already holds (:meth:`restart`), then every chunk written (:meth:`update`).

    A large file (``threaded``) is hashed on a thread of its own while the next bytes arrive: hashlib releases the
    GIL, so receiving and hashing overlap instead of taking turns (chunks are handed over ~1 MiB at a time, and a
    bounded queue keeps at most ~16 MiB waiting). :meth:`value` waits for it; :meth:`close` ends it early."""

    def __init__(self, algorithm: str, size: int, *, threaded: bool = False) -> None:
        self.algorithm = algorithm
        self.size = size
        self.threaded = threaded
        self._hash = hasher(algorithm, size)
        self._queue: queue.Queue[list[bytes] | None] | None = None
        self._thread: threading.Thread | None = None
        self._batch: list[bytes] = []  # chunks handed over together, ~1 MiB at a time: few queue hand-offs
        self._batched = 0

    def restart(self, path: str | bytes | Any, have: int) -> None:
        """Start again from the first ``have`` bytes of the file at ``path`` (0: an empty file)."""
        self.close()
        self._hash = hasher(self.algorithm, self.size)
        if have:
            with open(path, "rb") as handle:
                left = have
                while left and (chunk := handle.read(min(_CHUNK, left))):
                    self._hash.update(chunk)
                    left -= len(chunk)

    def update(self, data: bytes) -> None:
        """Feed the next bytes written."""
        if not self.threaded:
            self._hash.update(data)
            return
        self._batch.append(data)
        self._batched += len(data)
        if self._batched >= _CHUNK:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._queue is None:
            import queue

            self._queue = queue.Queue(maxsize=16)
            self._thread = threading.Thread(target=self._consume, args=(self._queue, self._hash), daemon=True)
            self._thread.start()
        self._queue.put(self._batch)
        self._batch, self._batched = [], 0

    def value(self) -> str:
        """``algorithm:hex`` of everything fed."""
        self.close()
        return f"{self.algorithm}:{self._hash.hexdigest()}"

    def close(self) -> None:
        """Wait for the hashing thread (if any) to hash what it was given, and end it."""
        if self._batch:
            self._hand_over()
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        self._queue = self._thread = None

    @staticmethod
    def _consume(batches: queue.Queue[list[bytes] | None], digest: Any) -> None:
        while (batch := batches.get()) is not None:
            for chunk in batch:
                digest.update(chunk)
