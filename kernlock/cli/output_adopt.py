"""What `kernlock add --from` prints: the model's kernels, the `add` it made, and whether the new lock loads the
model's builds on the environment the model was computed on."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kernlock.cli.output import print_added
from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.commands.adopt import Adopted

__all__ = ["print_adopted"]


def print_adopted(adopted: Adopted) -> None:
    """The source, each pinned requirement and the lock (as `add` prints them), then one line per model kernel."""
    environments = sorted({env for k in adopted.carried.kernels for env in k.environments})
    click.echo(
        f"read {adopted.source}: {count(len(adopted.carried.kernels), 'kernel')} the model was computed with on "
        f"{', '.join(environments)}"
    )
    print_added(adopted.added)
    for outcome in adopted.outcomes:
        entry = outcome.entry
        model = f"{entry.repo} {entry.requested} {entry.commit[:8]} {', '.join(v.name for v in entry.variants)}"
        if outcome.same:
            click.echo(f"same build as the model: {model}")
        elif outcome.commit is None:
            click.echo(
                f"not locked for {outcome.environment}, where the model ran {model}: add that environment to "
                "`environments` in [tool.kernlock] to lock it there too"
            )
        else:
            why = (
                f" (a dependency of {', '.join(entry.required_by)}: resolved anew from the version it declares)"
                if entry.required_by
                else ""
            )
            click.secho(
                f"warning: the model ran {model} on {outcome.environment}; kernels.lock loads {outcome.commit[:8]} "
                f"{outcome.variant} there{why}",
                fg="yellow",
                err=True,
            )
