"""How messages say a number of things: ``1 file``, ``3 files``; never ``file(s)``; sizes as ``17.6 KB``; the fixes
several errors share."""

from __future__ import annotations

__all__ = ["RETRY_SYNC", "count", "noun", "size", "unknown_keys"]

#: The fix of a file the Hub served with other bytes (or size) than kernels.lock records.
RETRY_SYNC = (
    "Retry `kernlock sync`; if it persists the endpoint serves other content than the lock was made from (check "
    "HF_ENDPOINT)"
)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 file"``, ``"2 files"`` (``plural`` for irregular nouns: ``count(2, "entry", "entries")``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def noun(n: int, singular: str, plural: str | None = None) -> str:
    """The noun alone, agreeing with ``n``: ``noun(2, "key")`` -> ``"keys"``."""
    return singular if n == 1 else plural or singular + "s"


def unknown_keys(unknown: set[str], allowed: tuple[str, ...], place: str = "") -> str:
    """``"unknown keys a, b in [table]; allowed: x, y"`` (``place``: where, if anywhere; ``allowed`` in its order)."""
    where = f" in {place}" if place else ""
    return f"unknown {noun(len(unknown), 'key')} {', '.join(sorted(unknown))}{where}; allowed: {', '.join(allowed)}"


def size(n: int) -> str:
    """``"512 B"``, ``"17.6 KB"``, ``"1.2 GB"`` (units of 1024)."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
