"""``python -m kernlock`` = the ``kernlock`` command."""

from kernlock.cli import main

__all__: list[str] = []

main()
