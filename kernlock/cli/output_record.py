"""What `kernlock run --record` prints (kernlock.cli.run parses; these write the text users read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kernlock.cli.common import print_table
from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.commands.record import RecordResult
    from kernlock.runtime.records import Gathered

__all__ = ["print_record_changes", "print_record_table"]


def print_record_table(code: int, gathered: Gathered) -> None:
    """`run --record`: CMD's status, then every Hub kernel request its processes made."""
    click.echo(
        f"CMD exited with status {code}; {count(len(gathered.requests), 'Hub kernel request')} recorded by "
        f"{count(gathered.processes, 'process', 'processes')}"
    )
    if gathered.requests:
        rows = [
            (
                r.repo,
                r.asked,
                r.path + (f" ({r.detail})" if r.detail else ""),
                "yes" if r.locked else "no",
                str(r.processes),
            )
            for r in gathered.requests
        ]
        print_table(("kernel", "asked", "load path", "locked", "processes"), rows)
    if gathered.builds:
        click.echo("Locked builds loaded:")
        rows = [
            (b.repo, b.commit[:12], b.variant, str(b.processes), f"{len(b.nodes)} ({', '.join(b.nodes)})")
            for b in gathered.builds
        ]
        print_table(("kernel", "commit", "variant", "processes", "nodes"), rows)
    if gathered.dropped:
        click.secho(
            f"warning: {count(gathered.dropped, 'record line')} failed their checks and were dropped", fg="yellow"
        )


def print_record_changes(result: RecordResult, *, dry_run: bool, no_lock: bool) -> None:
    """`run --record`: what was (would be) added to pyproject.toml, then the lock and the sync."""
    from kernlock.cli import output as cli_output

    for repo, revisions in result.conflicts.items():
        click.secho(
            f"warning: {repo} was asked for with several revisions ({', '.join(revisions)}); not added: choose one "
            f"with `kernlock add {repo}@{revisions[0]}`",
            fg="yellow",
        )
    if not result.added:
        click.echo("nothing to add: every kernel CMD asked for is in [tool.kernlock.kernels]")
        return
    verb = "would add" if dry_run else "added"
    for repo, rev in result.added.items():
        click.echo(f'{verb} "{repo}" = "{rev}" to [tool.kernlock.kernels]')
    if dry_run:
        click.echo("(dry run: pyproject.toml and kernels.lock are unchanged)")
        return
    if no_lock or result.locked is None:
        click.echo("kernels.lock not re-locked (--no-lock): run `kernlock lock`")
        return
    cli_output.print_lock(result.locked.lock)
    if result.synced is not None:
        cli_output.print_sync_after_add(result.synced)
