"""`kernlock import` and `kernlock export`: parse arguments, call the library, print."""

from __future__ import annotations

from pathlib import Path

import click

from kernlock.cli.common import Command, examples, handle_errors, project_option, verbose_option
from kernlock.cli.common import file_option_value as _file
from kernlock.util.wording import count

__all__ = ["export", "import_"]


@click.command(
    "import",
    cls=Command,
    epilog=examples(
        ("kernlock import", "its commits kept"),
        ("kernlock import --trust", "also untrusted publishers"),
        page="migrating.md",
    ),
)
@click.option("--trust", is_flag=True, help="Accept publishers the Hub does not mark as trusted (recorded).")
@project_option
@verbose_option()
@handle_errors
def import_(trust: bool, project_dir: Path | None) -> None:
    """Migrate from the kernels library's lock, keeping its commits.

    Reads [tool.kernels.dependencies] and its JSON kernels.lock; writes [tool.kernlock.kernels] and kernels.lock.
    """
    from kernlock import api
    from kernlock.cli import output as cli_output

    cli_output.print_import(api.import_kernels(project_dir, trust=trust))


@click.command(
    cls=Command,
    epilog=examples(
        ("kernlock export --format kernels -o kernels.json", "for load_kernel"),
        ("kernlock export --format kernels -o cpu.json --environment torch213-cxx11-cpu-x86_64-linux", ""),
        page="migrating.md#exporting-for-load_kernel--get_locked_kernel",
    ),
)
@click.option(
    "--format", "fmt", type=click.Choice(["kernels"]), required=True, help="kernels: the kernels library's JSON lock."
)
@click.option("-o", "--output", metavar="FILE", callback=_file, required=True, help="File to write.")
@click.option("--environment", metavar="ENV", help="Only the entries of this locked environment.")
@project_option
@verbose_option()
@handle_errors
def export(fmt: str, output: Path, environment: str | None, project_dir: Path | None) -> None:
    """Write the locked commits in another tool's lock format.

    kernels: the kernels library's JSON lock, for its load_kernel / get_locked_kernel.
    """
    from kernlock import api

    pins = api.export(project_dir, fmt, output, environment)
    click.echo(f"wrote {output} ({count(len(pins), 'kernel')}, {fmt} format)")
