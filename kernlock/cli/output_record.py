"""What `kernlock run --record` and `kernlock check` print (kernlock.cli.app parses; these write the text users
read)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.commands.check import CheckReport
    from kernlock.commands.record import RecordResult
    from kernlock.runtime.records import Gathered

__all__ = ["print_check", "print_record_changes", "print_record_table", "print_table"]


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Aligned columns, the header first."""
    table = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


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


def print_check(report: CheckReport) -> None:
    """`check`: one line per case, then the verdict."""
    rows = [
        (
            row.kernel,
            row.commit[:12] if row.commit else "-",
            row.variant or "-",
            row.case,
            "-" if row.error is None else f"{row.error:.2e}",
            "-" if row.tolerance is None else f"{row.tolerance:.1e}",
            row.verdict,
        )
        for row in report.rows
    ]
    click.echo(f"kernlock check on {report.device} ({report.environment})")
    print_table(("kernel", "commit", "variant", "case", "max abs error", "tolerance", "result"), rows)
    failed = [row for row in report.rows if row.verdict == "FAIL"]
    for row in failed:
        if row.note:
            click.secho(f"  {row.kernel} {row.case}: {row.note}", fg="red")
    unchecked = sorted({row.kernel for row in report.rows if row.verdict == "not checked"})
    passed = sum(row.verdict == "pass" for row in report.rows)
    summary = f"{count(passed, 'case')} passed, {count(len(failed), 'case')} failed"
    if unchecked:
        summary += f"; not checked: {', '.join(unchecked)}"
    click.echo(summary)
