"""`kernlock hook install|uninstall|status`: parse and print; the work is in :mod:`kernlock.commands.hook`.

:mod:`kernlock.cli.app` adds the group to ``kernlock`` and gives each command its error handling.
"""

from __future__ import annotations

import click

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kernlock.commands.hook import HookStatus

__all__ = ["hook", "install", "status", "uninstall"]

python_option = click.option(
    "--python", metavar="PY", help="The interpreter whose environment to change (default: the one running kernlock)."
)


@click.group()
def hook() -> None:
    """Bind a Python environment to a lock with a .pth startup hook (launchers that pass no variable)."""


def _print(found: HookStatus) -> None:
    if not found.installed:
        click.echo(f"no kernlock hook in {found.site_packages}")
        return
    lock = found.lockfile or "KERNLOCK_LOCKFILE, else the nearest kernels.lock"
    missing = (
        " (missing on this machine: its ranks stop at their first kernel import)" if found.lock_present is False else ""
    )
    mode = found.mode or "KERNLOCK_MODE, else strict"
    click.echo(f"kernlock hook in {found.site_packages}: lock {lock}{missing}, mode {mode}, cache {found.cache}")


@hook.command()
@click.option(
    "--lockfile",
    metavar="PATH",
    help="The lock every process honours (default: KERNLOCK_LOCKFILE, else the nearest kernels.lock).",
)
@click.option(
    "--mode",
    type=click.Choice(["strict", "warn"]),
    help="The mode every process uses (default: KERNLOCK_MODE, else strict).",
)
@python_option
def install(lockfile: str | None, mode: str | None, python: str | None) -> None:
    """Write the hook: every process of the environment that imports kernels or transformers honours the lock."""
    from pathlib import Path

    from kernlock.commands import hook as hooks

    _print(hooks.install(Path(lockfile) if lockfile else None, mode, python))


@hook.command()
@python_option
def uninstall(python: str | None) -> None:
    """Remove the hook from the environment."""
    from kernlock.commands import hook as hooks

    found = hooks.uninstall(python)
    click.echo(f"removed the kernlock hook from {found.site_packages}")


@hook.command()
@python_option
def status(python: str | None) -> None:
    """Say whether the environment has the hook and what it binds."""
    from kernlock.commands import hook as hooks

    _print(hooks.status(python))
