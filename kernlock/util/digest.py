"""SHA-256 of a few bytes (a lock's text, a cache path, pyproject's requirements) without importing hashlib.

``import hashlib`` loads OpenSSL (``_hashlib``: ~5 ms, a tenth of an everyday command's own time); the
interpreter's built-in SHA-256 module loads in a tenth of that and gives the same digest. Hashing files, where
OpenSSL's speed counts, stays with hashlib (:mod:`kernlock.util.hashing`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["sha256_hex"]


def _builtin() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (``_sha2`` from 3.12, ``_sha256`` before), else hashlib's."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # CPython >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # CPython < 3.12
        except ImportError:  # pragma: no cover - another interpreter
            from hashlib import sha256
    return sha256  # type: ignore[no-any-return,unused-ignore]


_SHA256 = _builtin()


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 digest of ``data`` (what ``hashlib.sha256(data).hexdigest()`` returns)."""
    return str(_SHA256(data).hexdigest())
