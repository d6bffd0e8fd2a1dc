"""The command line: click commands that parse and print, their output, the installed console entry point.

``kernlock.cli.main`` (the click group of :mod:`kernlock.cli.app`) stays importable from here, imported on first use,
so that importing a sibling (``kernlock.cli.output``) never pays for every command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernlock.cli.app import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    """``kernlock.cli.main``: the click group, from :mod:`kernlock.cli.app` (PEP 562)."""
    if name != "main":
        raise AttributeError(f"module 'kernlock.cli' has no attribute {name!r}")
    from kernlock.cli.app import main

    return main
