"""SHA-256 of a few bytes (a lock's text, a cache path, pyproject's requirements) without importing hashlib.

``import hashlib`` loads OpenSSL (``_hashlib``: ~5 ms, a tenth of an everyday command's own time); the
interpreter's built-in SHA-256 module loads in a tenth of that and gives the same digest. Hashing files, where
OpenSSL's speed counts, stays with hashlib (:mod:`kernlock.util.hashing`), but for small files (built-in too).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["builtin", "sha256_hex"]

#: CPython's own hash modules, by hashlib's names: ``_sha2`` from 3.12, one module per hash before.
_MODULES = {"sha1": ("_sha1",), "sha256": ("_sha2", "_sha256"), "sha512": ("_sha2", "_sha512")}


@functools.cache
def builtin(name: str) -> Callable[..., Any]:
    """The constructor of CPython's built-in ``name`` hash (``sha1``, ``sha256`` or ``sha512``), else hashlib's."""
    for module in _MODULES[name]:
        try:
            return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    import hashlib  # pragma: no cover - another interpreter

    return getattr(hashlib, name)  # type: ignore[no-any-return]  # pragma: no cover


_SHA256 = builtin("sha256")


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 digest of ``data`` (what ``hashlib.sha256(data).hexdigest()`` returns)."""
    return str(_SHA256(data).hexdigest())
