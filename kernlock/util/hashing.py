"""Hashes as kernels.lock records them: ``sha256:<hex>`` of a file's content (LFS files), or ``git-sha1:<hex>``, the
git blob id (sha1 of ``blob <size>\\0`` and the content). One home for both, so that a file hashed while it is
downloaded, copied from a bundle, or read back from the cache gives the same value."""

from __future__ import annotations

import hashlib
import queue
import threading
from typing import Any

__all__ = ["StreamHash", "hasher"]

_CHUNK = 1024 * 1024


def hasher(algorithm: str, size: int) -> Any:
    """A hashlib object primed for a file of ``size`` bytes hashed with ``algorithm`` (``sha256`` or ``git-sha1``)."""
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "git-sha1":
        return hashlib.sha1(b"blob %d\0" % size)
    raise ValueError(f"unknown hash algorithm {algorithm!r}")


class StreamHash:
    """The hash of a file as it is written, so that no second pass reads it back: fed the bytes a resumed file
    already holds (:meth:`restart`), then every chunk written (:meth:`update`).

    A large file (``threaded``) is hashed on a thread of its own while the next bytes arrive: hashlib releases the
    GIL, so receiving and hashing overlap instead of taking turns (a bounded queue keeps at most ~16 chunks in
    memory). :meth:`value` waits for it; :meth:`close` ends it early (a failed download)."""

    def __init__(self, algorithm: str, size: int, *, threaded: bool = False) -> None:
        self.algorithm = algorithm
        self.size = size
        self.threaded = threaded
        self._hash = hasher(algorithm, size)
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None

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
        if self._queue is None:
            self._queue = queue.Queue(maxsize=16)
            self._thread = threading.Thread(target=self._consume, args=(self._queue, self._hash), daemon=True)
            self._thread.start()
        self._queue.put(data)

    def value(self) -> str:
        """``algorithm:hex`` of everything fed."""
        self.close()
        return f"{self.algorithm}:{self._hash.hexdigest()}"

    def close(self) -> None:
        """Wait for the hashing thread (if any) to hash what it was given, and end it."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        self._queue = self._thread = None

    @staticmethod
    def _consume(chunks: queue.Queue[bytes | None], digest: Any) -> None:
        while (chunk := chunks.get()) is not None:
            digest.update(chunk)
