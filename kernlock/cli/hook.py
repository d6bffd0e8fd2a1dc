"""`kernlock hook install|uninstall|status`: parse and print; the work is in :mod:`kernlock.commands.hook`.

:mod:`kernlock.cli.app` adds the group to ``kernlock`` and gives each command its error handling.
"""

from __future__ import annotations

import click

from kernlock.cli.common import Group, examples, verbose_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from kernlock.commands.hook import HookStatus

__all__ = ["hook", "install", "python_option", "status", "uninstall"]

_PAGE = "clusters.md#launchers-and-the-environment"


def python_option(what: str) -> Callable[[Any], Any]:
    """``--python PY``: the interpreter whose environment ``what`` (default: the one running kernlock)."""
    return click.option(
        "--python", metavar="PY", help=f"The interpreter whose environment {what} (default: the one running kernlock)."
    )


@click.group(
    cls=Group,
    epilog=examples(
        ("kernlock hook install --lockfile /shared/proj/kernels.lock", "srun --export=NONE"),
        ("kernlock hook status", ""),
        page=_PAGE,
    ),
)
def hook() -> None:
    """Bind a Python environment to a lock with a .pth startup hook.

    For launchers that pass no environment variable: every process of that environment honours the lock.
    """


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


@hook.command(
    epilog=examples(
        ("kernlock hook install --lockfile kernels.lock", "this Python's environment"),
        ("kernlock hook install --lockfile /shared/proj/kernels.lock --python /opt/venv/bin/python", ""),
        page=_PAGE,
    )
)
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
@python_option("gets the hook")
@verbose_option()
def install(lockfile: str | None, mode: str | None, python: str | None) -> None:
    """Write the hook into a Python environment.

    Every process of the environment that imports kernels or transformers then honours the lock.
    """
    from pathlib import Path

    from kernlock.commands import hook as hooks

    _print(hooks.install(Path(lockfile) if lockfile else None, mode, python))


@hook.command(
    epilog=examples(
        ("kernlock hook uninstall", ""), ("kernlock hook uninstall --python /opt/venv/bin/python", ""), page=_PAGE
    )
)
@python_option("loses the hook")
@verbose_option()
def uninstall(python: str | None) -> None:
    """Remove the hook from a Python environment."""
    from kernlock.commands import hook as hooks

    found = hooks.uninstall(python)
    click.echo(f"removed the kernlock hook from {found.site_packages}")


@hook.command(
    epilog=examples(
        ("kernlock hook status", ""), ("kernlock hook status --python /opt/venv/bin/python", ""), page=_PAGE
    )
)
@python_option("to look at")
@verbose_option()
def status(python: str | None) -> None:
    """Say whether a Python environment has the hook, and what it binds."""
    from kernlock.commands import hook as hooks

    _print(hooks.status(python))
