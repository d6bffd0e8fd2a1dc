"""`kernlock export --format kernels`: the locked commits in the kernels library's own JSON lock format, for a
package whose code calls ``kernels.load_kernel``/``get_locked_kernel`` with a lock file it ships.

The kernels library's lock holds one commit per kernel (and no variant, file or environment), so a kernel that
kernlock locks to different commits on different environments (``when`` pins) needs ``environment`` to choose.
"""

from __future__ import annotations

from pathlib import Path

from kernlock.errors import KernlockError, ProjectError
from kernlock.lock.interop import ForeignPin, looks_like_json_lock, render_json_lock
from kernlock.lock.model import Lock
from kernlock.util.atomic import write_text_atomic

__all__ = ["FORMATS", "export", "kernels_pins"]

FORMATS = ("kernels",)


def kernels_pins(lock: Lock, environment: str | None = None) -> list[ForeignPin]:
    """One pin per locked repo (of ``environment``'s entries when given), ordered by repo."""
    if environment is not None and environment not in lock.environments:
        raise KernlockError(
            f"--environment {environment}: kernels.lock covers {', '.join(lock.environments)}; pick one of them."
        )
    pins: dict[str, ForeignPin] = {}
    for entry in lock.kernels:
        if environment is not None and environment not in entry.environments:
            continue
        pin = ForeignPin(repo=entry.repo, rev=entry.requested, commit=entry.commit)
        other = pins.setdefault(entry.repo, pin)
        if other.commit != pin.commit:
            raise KernlockError(
                f"kernels.lock locks {entry.repo} to {other.commit[:12]} ({other.rev}) and {pin.commit[:12]} "
                f"({pin.rev}) on different environments; the kernels library's lock holds one commit per kernel: "
                "choose with `kernlock export --format kernels --environment ENV`."
            )
    return [pins[repo] for repo in sorted(pins)]


def export(lock: Lock, fmt: str, output: Path, environment: str | None = None) -> list[ForeignPin]:
    """Write ``lock`` in format ``fmt`` to ``output`` (atomically); returns what was written."""
    if fmt not in FORMATS:
        raise ProjectError(f"unknown export format {fmt!r}; supported: {', '.join(FORMATS)}.")
    text = _existing(output)
    if 'created-by = "kernlock"' in text:
        raise ProjectError(f"{output} is kernlock's own lock; export to another file, e.g. `-o kernels.lock.json`.")
    if text.strip() and not looks_like_json_lock(text):
        raise ProjectError(
            f"{output} exists and is not a kernels lock; kernlock does not overwrite it: export to another path, "
            "e.g. `-o kernels.lock.json`."
        )
    pins = kernels_pins(lock, environment)
    write_text_atomic(output, render_json_lock(pins))
    return pins


def _existing(path: Path) -> str:
    """The text of what ``output`` would replace ("" when there is nothing to read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
