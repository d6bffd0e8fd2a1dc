"""`kernlock run` (with `--record`): parse arguments, call the library, print."""

from __future__ import annotations

import os
import sys

import click

from kernlock.cli.common import Command, examples, handle_errors, project_option, verbose_option
from kernlock.errors import KernlockError, LaunchError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["run"]


@click.command(
    cls=Command,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog=examples(
        ("kernlock run -- python train.py", "its kernel loads come from kernels.lock"),
        ("kernlock run -- torchrun --nproc-per-node 8 train.py", "every rank too"),
        ("kernlock run --record -- python train.py", "lock what it asks for"),
        page="activation.md#kernlock-run",
    ),
)
@click.option("--mode", type=click.Choice(["strict", "warn"]), help="Sets KERNLOCK_MODE for CMD (default: strict).")
@click.option(
    "--record",
    is_flag=True,
    help="Record every Hub kernel request of CMD (unlocked ones load as in warn mode); then add the unlocked ones "
    "to pyproject.toml with the revision asked and re-lock.",
)
@click.option("--dry-run", is_flag=True, help="With --record: print what was asked and would be added; change nothing.")
@click.option("--no-lock", is_flag=True, help="With --record: add to pyproject.toml only; do not re-lock.")
@click.option("-q", "--quiet", is_flag=True, help="Print no line saying the lock is active.")
@project_option
@verbose_option("Show tracebacks with errors, here and in CMD's processes (KERNLOCK_DEBUG=1).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
@handle_errors
def run(
    mode: str | None,
    record: bool,
    dry_run: bool,
    no_lock: bool,
    quiet: bool,
    project_dir: Path | None,
    command: tuple[str, ...],
) -> None:
    """Run CMD with every kernel load honouring kernels.lock.

    No change to CMD's code; exits with CMD's status. A kernel load the lock does not allow stops the process
    with one line (kernlock: error: ...); -v shows the traceback.
    """
    from kernlock.cli import output as cli_output
    from kernlock.commands import runbind
    from kernlock.runtime import activation as runtime

    if not record and (dry_run or no_lock):
        raise click.UsageError("--dry-run and --no-lock go with --record.")
    if record:
        _run_recorded(mode, dry_run, no_lock, project_dir, command)
        return
    env, active = runtime.run_environment(project_dir / runtime.LOCK_NAME if project_dir is not None else None, mode)
    binding = runbind.bind(env, command)  # a refusal comes before anything starts
    cli_output.print_active(active, command, quiet)
    sys.stdout.flush()
    sys.stderr.flush()
    if binding is not None:  # kernlock outlives CMD to remove it
        from kernlock.commands import supervise

        supervise.exit_as(supervise.supervise(list(command), env, binding))
    if os.name == "nt":  # no exec on Windows: wait and pass the exit status on
        import subprocess

        sys.exit(subprocess.call(list(command), env=env))
    try:
        os.execvpe(command[0], list(command), env)
    except OSError as err:
        raise _cannot_run(command, err) from err


def _run_recorded(
    mode: str | None, dry_run: bool, no_lock: bool, project_dir: Path | None, command: tuple[str, ...]
) -> None:
    """`run --record`: CMD runs to its end (whatever its status), then the table, pyproject and the lock."""
    from kernlock.cli import output_record as cli_output
    from kernlock.commands import record as recordrun

    if mode is not None:
        raise click.UsageError("--record runs CMD in its own mode (unlocked kernels load, recorded): drop --mode.")
    if dry_run and no_lock:
        raise click.UsageError("--dry-run already changes nothing: drop --no-lock.")
    prepared = recordrun.prepare(project_dir)
    if prepared.created_lock:
        click.echo(f"wrote {prepared.root / 'kernels.lock'} (no kernels yet): activation needs a lock to record")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        code = _call(command, prepared.env)
    except KernlockError:
        from kernlock.runtime import records

        records.remove_folder(prepared.folder)
        raise
    gathered = recordrun.collect(prepared)
    cli_output.print_record_table(code, gathered)
    result = recordrun.finish(prepared, gathered, dry_run=dry_run, no_lock=no_lock)
    cli_output.print_record_changes(result, dry_run=dry_run, no_lock=no_lock)
    sys.exit(code)


def _call(command: tuple[str, ...], env: dict[str, str]) -> int:
    """`run --record`: CMD to its end, its status (-N: killed by signal N); the environment is bound meanwhile."""
    from kernlock.commands import runbind

    if runbind.SUPPORTED:
        from kernlock.commands import supervise

        return supervise.supervise(list(command), env, runbind.bind(env, command))
    import signal
    import subprocess

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is CMD's to handle; its records still count
    try:
        reset = None if os.name == "nt" else _default_sigint
        return subprocess.call(list(command), env=env, preexec_fn=reset)
    except OSError as err:
        raise _cannot_run(command, err) from err
    finally:
        signal.signal(signal.SIGINT, previous)


def _default_sigint() -> None:
    """In CMD (after fork): Ctrl-C does what it does by default, whatever kernlock set for itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cannot_run(command: tuple[str, ...] | list[str], err: OSError) -> LaunchError:
    return LaunchError(f"cannot run {command[0]!r}", why=err.strerror or str(err), fix="check the command and PATH")
