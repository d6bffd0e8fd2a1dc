"""`kernlock environments`: parse arguments, call the library, print the environment strings kernels have builds
for and what each means."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kernlock.cli.common import Command, examples, handle_errors, project_option, verbose_option
from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.resolve.available import Available

__all__ = ["environments", "print_environments"]


@click.command(
    cls=Command,
    epilog=examples(
        ("kernlock environments", "the project's kernels"),
        ("kernlock environments kernels-community/flash-attn2@v4", ""),
        page="pyproject.md#environments",
    ),
)
@click.argument("specs", nargs=-1, metavar="[SPEC]...")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@verbose_option()
@handle_errors
def environments(specs: tuple[str, ...], as_json: bool, project_dir: Path | None) -> None:
    """Which environments kernels have builds for, in words.

    For the kernels SPEC (org/name[@rev]; default: the project's requirements): each environment string with a
    build of every one of them, then those only some have. What to declare in `environments` on a machine
    without torch, which has no environment of its own.
    """
    from kernlock import api

    found = api.environments(list(specs), root=project_dir)
    if as_json:
        import json

        click.echo(json.dumps(found.as_dict(), indent=2))
        return
    print_environments(found)


def print_environments(found: Available) -> None:
    """Each kernel asked about, then the environments all of them load, then those only some load."""
    from kernlock.resolve.available import meaning

    for kernel in found.kernels:
        noarch = f", noarch: {', '.join(kernel.noarch)}" if kernel.noarch else ""
        click.echo(
            f"{kernel.repo} {kernel.rev} ({kernel.commit[:12]}): "
            f"{count(len(kernel.environments), 'environment')} with a build{noarch}"
        )
    everywhere = found.everywhere
    width = max((len(env) for env in found.serving), default=0) + 2
    what = "every one of these kernels has" if len(found.kernels) > 1 else "it has"
    click.echo(f"\nenvironments {what} a build for (declare yours in [tool.kernlock] environments):")
    for env in everywhere:
        click.echo(f"  {env:<{width}}{meaning(env)}")
    if not everywhere:
        click.echo("  none: declare fewer kernels together, or pin per environment (docs/pyproject.md)")
    partly = [env for env in found.serving if env not in everywhere]
    if partly:
        click.echo("only some of them:")
        for env in partly:
            click.echo(f"  {env:<{width}}{meaning(env)}: {', '.join(found.serving[env])}")
    click.echo(
        "(a machine's own string: `kernlock env` there, with torch installed; torch.__version__ and "
        "torch.version.cuda there name its torch and CUDA)"
    )
