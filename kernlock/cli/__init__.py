"""The command line: click commands that parse and print, their output, the installed console entry point."""

__all__: list[str] = []
