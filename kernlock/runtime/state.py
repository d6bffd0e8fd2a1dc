"""What the current activation decided: its settings and a generation the hooks compare (docs/activation.md).

:func:`kernlock.runtime.activation.activate` sets them; the hooks (:mod:`kernlock.runtime.policy`) read them. They live
here, in a module that imports nothing, so that the hooks never import :mod:`kernlock.runtime.activation` (which
installs them): no import cycle, and activation stays cheap.
"""

from __future__ import annotations

__all__ = ["Settings", "generation", "set_settings", "settings"]


class Settings:
    """What ``activate`` decided: the lock file, the mode and the verification level."""

    __slots__ = ("lockfile", "mode", "verify")

    def __init__(self, lockfile: str, mode: str, verify: str) -> None:
        self.lockfile = lockfile
        self.mode = mode
        self.verify = verify

    def __repr__(self) -> str:
        return f"Settings(lockfile={self.lockfile!r}, mode={self.mode!r}, verify={self.verify!r})"


_settings: Settings | None = None
#: Bumped by every activation; the hooks drop what they derived from an older one.
generation = 0


def settings() -> Settings | None:
    """The current activation, or None when kernlock is not activated in this process."""
    return _settings


def set_settings(new: Settings) -> None:
    """Make ``new`` the current activation (a new generation)."""
    global _settings, generation
    _settings = new
    generation += 1
