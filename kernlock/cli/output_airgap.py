"""What `kernlock bundle` and `kernlock serve` print (kernlock.cli.airgap parses; these write the text users read)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from kernlock.util.wording import count, size

if TYPE_CHECKING:
    from kernlock.airgap.mirror import MirrorApp
    from kernlock.commands.airgap import BundleResult

__all__ = ["print_bundle", "print_serving"]


def print_bundle(result: BundleResult) -> None:
    """`bundle`: what the archive holds and where it is."""
    click.echo(
        f"bundled {count(result.variants, 'variant')}, {count(result.files, 'file')} ({size(result.size)}) for "
        f"{', '.join(result.environments)} into {result.path}"
    )


def print_serving(app: MirrorApp, host: str, port: int) -> None:
    """`serve`: what is not served (to stderr), and what is, where."""
    for line in app.catalog.skipped:
        click.secho(f"  not served: {line}", fg="yellow", err=True)
    click.echo(
        f"serving {count(len(app.catalog.repos), 'kernel')}, {count(app.catalog.file_count, 'file')} of "
        f"kernels.lock at http://{host}:{port} (set HF_ENDPOINT there; GET /health)",
    )
    sys.stdout.flush()
