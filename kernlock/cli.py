"""The kernlock command line: parse arguments, call kernlock.api, print. No logic of its own."""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kernlock import __version__, api
from kernlock.errors import KernlockError
from kernlock.resolver import Upgrade

project_option = click.option(
    "--project",
    "project_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Project directory (holds pyproject.toml and kernels.lock).",
)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a KernlockError as one clear message and exit 1; a traceback only with -v."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KernlockError as err:
            if click.get_current_context().find_root().params.get("verbose"):
                traceback.print_exc()
            click.secho(f"error: {err}", fg="red", err=True)
            sys.exit(err.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kernlock")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks with errors.")
def main(verbose: bool) -> None:
    """Lock Hugging Face Hub kernels to exact commits and build variants for every environment."""


@main.command()
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option("--trust", is_flag=True, help="Accept a publisher the Hub does not mark as trusted (recorded).")
@click.option("--no-sync", is_flag=True, help="Only record and lock; do not download.")
@project_option
@handle_errors
def add(specs: tuple[str, ...], trust: bool, no_sync: bool, project_dir: Path) -> None:
    """Add kernels (SPEC = org/name[@rev]) to pyproject.toml, re-lock and sync."""
    result = api.add(project_dir, list(specs), trust=trust)
    for repo, rev in result.added.items():
        click.echo(f'added {repo} = "{rev}"')
    _print_lock(result.lock)
    if not no_sync:
        _print_sync(api.sync(project_dir))


@main.command()
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@project_option
@handle_errors
def remove(names: tuple[str, ...], project_dir: Path) -> None:
    """Remove kernels from pyproject.toml and re-lock."""
    result = api.remove(project_dir, list(names))
    click.echo(f"removed {', '.join(names)}")
    _print_lock(result)


@main.command()
@click.option("--upgrade", is_flag=True, help="Move every kernel to the newest commit of its revision.")
@click.option("--upgrade-kernel", "upgrade_kernels", multiple=True, metavar="NAME", help="Move one kernel.")
@click.option("--check", is_flag=True, help="Exit 1 without writing if kernels.lock is stale.")
@project_option
@handle_errors
def lock(upgrade: bool, upgrade_kernels: tuple[str, ...], check: bool, project_dir: Path) -> None:
    """Resolve all requirements for all target environments into kernels.lock."""
    if check and (upgrade or upgrade_kernels):
        raise click.UsageError("--check cannot be combined with --upgrade / --upgrade-kernel.")
    result = api.lock(project_dir, Upgrade(upgrade, frozenset(upgrade_kernels)), check=check)
    if check:
        click.echo("kernels.lock is up to date")
        return
    _print_lock(result)


def _print_lock(result: api.LockResult) -> None:
    if not result.written:
        click.echo(f"kernels.lock is up to date ({len(result.lock.kernels)} entries)")
        return
    click.echo(f"wrote kernels.lock ({result.reason})")
    for kernel in result.lock.kernels:
        via = f" (dependency of {', '.join(kernel.required_by)})" if kernel.required_by else ""
        click.echo(f"  {kernel.repo} {kernel.requested} -> {kernel.commit[:12]}{via}")
        for variant in kernel.variants:
            click.echo(f"    {variant.name}: {', '.join(variant.environments)}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@handle_errors
def env(as_json: bool, project_dir: Path) -> None:
    """This machine's environment string and the variant each locked kernel would load here."""
    report = api.env_report(project_dir)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"environment: {report['environment']}")
    for name, version in report["versions"].items():
        click.echo(f"{name}: {version or 'not installed'}")
    gate = report.get("transformers_gate")
    if gate:
        click.secho(
            ("ok: " if gate["ok"] else "WARNING: ") + gate["message"], fg=None if gate["ok"] else "yellow"
        )
    for row in report["kernels"]:
        click.echo(f"  {row['repo']}: {row['variant'] or 'NOT LOCKED for this environment'}")
    if report.get("lock_error"):
        click.echo(f"  ({report['lock_error']})")
