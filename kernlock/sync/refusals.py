"""A variant whose files fail its recorded signature is refused for good: withdrawn from the kernel cache (no loader
can see it), its receipt removed, and the reason kept in kernlock's own cache, so that every later load names the
same reason instead of "not synced". Only a sync that verifies the variant again lifts it."""

from __future__ import annotations

import contextlib
from pathlib import Path

from kernlock.errors import SignatureError, SignedDigestError
from kernlock.lock.model import LockedKernel, LockedVariant
from kernlock.sync.cache import receipt_path, refusal_path, variant_path
from kernlock.sync.publish import withdraw
from kernlock.util.atomic import write_bytes_atomic
from kernlock.util.hfenv import read_private

__all__ = ["clear", "refusal", "refuse", "refuse_all"]

_MAX = 64 * 1024


def refuse(entry: LockedKernel, variant: LockedVariant, cache: Path, reason: str) -> None:
    """Withdraw the variant from ``cache``, drop its receipt and keep ``reason`` for later loads."""
    withdraw(entry, variant, variant_path(entry, variant, cache), cache)
    receipt = receipt_path(entry, variant, cache)
    if receipt is not None:
        receipt.unlink(missing_ok=True)
    record = refusal_path(entry, variant, cache, create=True)
    if record is not None:
        with contextlib.suppress(OSError):  # only the wording of a later load depends on it
            write_bytes_atomic(record, reason.encode(), private=True)


def refuse_all(failures: list[tuple[LockedKernel, LockedVariant, SignatureError]], cache: Path) -> None:
    """Refuse every variant whose files disagree with its signed digest (:func:`refuse`; a signature the trusted
    root does not accept is configuration: its files stay); then SignatureError naming every failure."""
    for entry, variant, error in failures:
        if isinstance(error, SignedDigestError):
            refuse(entry, variant, cache, str(error))
    if len(failures) == 1:
        only = failures[0][2]
        raise SignatureError(only.what, why=only.why, fix=only.fix)
    if failures:
        raise SignatureError("; ".join(str(error) for _e, _v, error in failures))


def refusal(entry: LockedKernel, variant: LockedVariant, cache: Path) -> str | None:
    """Why the variant was refused in ``cache``, or None."""
    record = refusal_path(entry, variant, cache)
    if record is None:
        return None
    text = read_private(record, _MAX)
    return None if text is None else text.decode(errors="replace").strip() or None


def clear(entry: LockedKernel, variant: LockedVariant, cache: Path) -> None:
    """Forget a refusal (the variant just verified)."""
    record = refusal_path(entry, variant, cache)
    if record is not None:
        with contextlib.suppress(OSError):
            record.unlink(missing_ok=True)
