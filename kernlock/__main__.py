"""``python -m kernlock`` = the ``kernlock`` command."""

from kernlock.console import run

__all__: list[str] = []

run()
