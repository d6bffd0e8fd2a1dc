"""``python -m kernlock`` = the ``kernlock`` command."""

from kernlock.cli.console import run

__all__: list[str] = []

run()
