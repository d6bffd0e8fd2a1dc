"""What `kernlock add --implicit` prints (the kernels transformers loads by itself, what was recorded for which
environments, what was left), and the part of `kernlock env` that lists them for this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kernlock.cli.output import print_lock
from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.commands.implicit import Implicit
    from kernlock.environments.implicit import Mapping

__all__ = ["print_implicit", "print_implicit_env"]


def print_implicit(done: Implicit) -> None:
    """`add --implicit`: what transformers loads where, each requirement recorded (with its environments), what was
    kept or left undecided, then the lock."""
    mapping, plan = done.mapping, done.plan
    loading = sorted({env for envs in plan.wanted.values() for env in envs})
    none = [env for env in done.environments if env not in loading]
    where = (f" on {', '.join(loading)}" if loading else "") + (
        f", none on {', '.join(none)}" if loading and none else ""
    )
    click.echo(
        f"transformers {mapping.transformers}'s default kernel mapping ({done.when}) loads "
        f"{count(len(plan.wanted), 'Hub kernel')}{where or ' on ' + ', '.join(none)}"
    )
    result = done.added
    if result is not None and result.created:
        click.echo(f"created {result.created} (no enclosing project was found)")
    for repo, requirement in plan.requirements.items():
        scope = done.scopes.get(repo)
        on = f" for {', '.join(scope)}" if scope else ""
        verb = "widened" if result is not None and repo in result.replaced else "added"
        click.echo(f'{verb} {repo} = "{requirement.pins[0].rev}"{on}')
    for repo in plan.kept:
        click.echo(f"{repo}: already in [tool.kernlock.kernels] for every environment that loads it (kept)")
    for left in plan.undecided:
        low, high = left.kernel.capabilities or (0, 0)
        caps = f"{low // 10}.{low % 10}" if low == high else f"{low // 10}.{low % 10} - {high // 10}.{high % 10}"
        click.secho(
            f"not locked for {left.environment}: {left.kernel.repo}@{left.kernel.rev} ({left.kernel.layer}) loads "
            f"only on GPUs of compute capability {caps}, and that environment declares none (`cuda-capabilities` in "
            "[tool.kernlock] environments)",
            fg="yellow",
        )
    if result is None:
        click.echo(
            "nothing to add: every one is locked already"
            if plan.wanted
            else f"nothing to add: it loads none there (it maps {', '.join(_devices(mapping)) or 'no device'})"
        )
        return
    print_lock(result.lock)


def _devices(mapping: Mapping) -> list[str]:
    return sorted({kernel.device for kernel in mapping.kernels})


def print_implicit_env(found: dict[str, Any] | None) -> None:
    """`env`: each Hub kernel transformers loads by itself on this machine, and whether kernels.lock locks it here."""
    if not found:
        return
    if found["transformers"] is None or found["why"]:
        if found["transformers"] is not None:
            click.echo(f"kernels transformers loads by itself: none ({found['why']})")
        return
    rows = found["kernels"]
    head = f"transformers {found['transformers']} on {found['device']}"
    if not rows:
        click.echo(
            f"kernels transformers loads by itself: none ({head}; its mapping names {', '.join(found['devices'])})"
        )
        return
    click.echo(f"kernels transformers loads by itself ({head}, {found['when']}):")
    width = max(len(f"{row['repo']}@{row['rev']}") for row in rows)
    for row in rows:
        name = f"{row['repo']}@{row['rev']}"
        layers = ", ".join(row["layers"])
        if row["locked"]:
            click.echo(f"  {name:<{width}}  locked ({row['locked'][:12]}): {layers}")
            continue
        maybe = " (on GPUs of some compute capabilities)" if row["capability_unknown"] else ""
        click.secho(
            f"  {name:<{width}}  NOT locked{maybe}: {layers}; `kernlock add --implicit {row['repo']}`", fg="yellow"
        )
