"""How messages say a number of things: ``1 file``, ``3 files``; never ``file(s)``."""

from __future__ import annotations

__all__ = ["count", "noun"]


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 file"``, ``"2 files"`` (``plural`` for irregular nouns: ``count(2, "entry", "entries")``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def noun(n: int, singular: str, plural: str | None = None) -> str:
    """The noun alone, agreeing with ``n``: ``noun(2, "key")`` -> ``"keys"``."""
    return singular if n == 1 else plural or singular + "s"
