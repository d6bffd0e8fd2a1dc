"""`kernlock check`: parse arguments, call the library, print (kernlock.cli.output_check)."""

from __future__ import annotations

import sys

import click

from kernlock.cli.common import Command, examples, file_option_value, handle_errors, project_option, verbose_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["check"]


@click.command(
    cls=Command,
    epilog=examples(
        ("kernlock check", "each locked kernel this machine loads"),
        ("kernlock check --record", "write kernels.check.toml"),
        ("kernlock check --speed --plot speed.svg", "speed, and a picture of the training step"),
        page="check.md",
    ),
)
@click.option("--kernel", "kernels", multiple=True, metavar="NAME", help="Check only this locked kernel (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--record", is_flag=True, help="Write the results to kernels.check.toml beside the lock.")
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    type=click.Choice(["float32", "bfloat16", "float16"]),
    help="Check in this dtype (repeatable); default: float32, and bfloat16 on CUDA.",
)
@click.option("--speed", is_flag=True, help="Also time each kernel against the path it replaces, and a training step.")
@click.option(
    "--seqlen",
    "seqlens",
    multiple=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="With --speed: a sequence length of the attention cases (repeatable; default 1024 and 4096 on CUDA, 256 on "
    "CPU); the training step uses the first.",
)
@click.option(
    "--model",
    metavar="CONFIG",
    help="With --speed: the model of the training step, a preset (tiny, small, qwen3-8b-8layers) or a folder holding "
    "a config.json (random weights, nothing downloaded); default: small on CUDA, tiny on CPU.",
)
@click.option(
    "--batch", type=int, metavar="N", help="With --speed: the training step's batch (default: 8 on CUDA, 2 on CPU)."
)
@click.option(
    "--plot",
    metavar="FILE",
    callback=file_option_value,
    help="With --speed: draw the training step (time and peak memory per attention implementation) into FILE, .svg "
    "or .png; needs matplotlib (pip install 'kernlock[plot]').",
)
@click.option(
    "--upgrade",
    is_flag=True,
    help="Check the builds `kernlock lock --upgrade` (with --kernel: --upgrade-kernel) would move to, beside the "
    "locked ones; kernels.lock is not changed.",
)
@click.option("--to", metavar="REV", help="With --upgrade and one --kernel: check that kernel at REV instead.")
@project_option
@verbose_option()
@handle_errors
def check(
    kernels: tuple[str, ...],
    as_json: bool,
    record: bool,
    dtypes: tuple[str, ...],
    speed: bool,
    seqlens: tuple[int, ...],
    model: str | None,
    batch: int | None,
    plot: Path | None,
    upgrade: bool,
    to: str | None,
    project_dir: Path | None,
) -> None:
    """Compare each locked kernel with the torch path it replaces.

    Numerical parity, forward and backward, on this machine's device, of each locked kernel this environment loads,
    and with --speed its speed; with --upgrade, the builds `lock --upgrade` would move to, side by side; exit 1 on a
    failure.
    """
    from kernlock.cli import output_check

    if seqlens and not speed:
        raise click.UsageError("--seqlen goes with --speed.")
    if (model is not None or batch is not None or plot is not None) and not speed:
        raise click.UsageError("--model, --batch and --plot go with --speed.")
    if to is not None and not upgrade:
        raise click.UsageError("--to goes with --upgrade (and one --kernel).")
    chosen, lengths = list(dtypes) or None, list(seqlens) or None
    if upgrade:
        from kernlock.commands.check.upgrade import check_upgrade

        if model is not None or batch is not None or plot is not None:
            raise click.UsageError("--model, --batch and --plot go with `check --speed`, not with --upgrade.")
        result = check_upgrade(
            project_dir, list(kernels) or None, to, chosen, speed=speed, seqlens=lengths, record=record
        )
        if as_json:
            import json

            click.echo(json.dumps(result.as_dict(), indent=2))
        else:
            output_check.print_upgrade(result)
            if result.recorded is not None:
                click.echo(f"wrote {result.recorded}")
        if not result.ok:
            sys.exit(1)
        return
    from kernlock.commands.check import command as checking

    report = checking.check(
        project_dir,
        list(kernels) or None,
        chosen,
        record,
        speed=speed,
        seqlens=lengths,
        model=model,
        batch=batch,
        plot=plot,
    )
    if as_json:
        import json

        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        output_check.print_check(report)
        output_check.print_speed(report)
        for written in (report.recorded, report.plotted):
            if written is not None:
                click.echo(f"wrote {written}")
    if not report.ok:
        sys.exit(1)
