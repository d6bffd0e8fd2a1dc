"""kernlock: lockfiles for Hugging Face Hub kernels."""

from __future__ import annotations

__all__ = ["__version__", "activate"]

from kernlock._version import __version__


def activate(lockfile: str | None = None, mode: str | None = None) -> None:
    """Make every Hub kernel load in this process honour ``kernels.lock`` (see docs/activation.md)."""
    from kernlock.runtime import activation as runtime

    runtime.activate(lockfile=lockfile, mode=mode)
