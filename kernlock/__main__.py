"""``python -m kernlock`` = the ``kernlock`` command."""

from kernlock.cli import main

main()
