"""What every kernlock command shares: the ``--project`` and ``-v`` options, path options, the examples and docs
link that end each command's help, the aligned table several commands print, and the error handling that turns a
KernlockError into one clear message and exit 1 (used by :mod:`kernlock.cli.app`, :mod:`kernlock.cli.run` and
:mod:`kernlock.cli.hook`)."""

from __future__ import annotations

import functools
import os
import sys

import click

from kernlock.errors import KernlockError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import Any

__all__ = [
    "DOCS_URL",
    "Command",
    "Group",
    "docs",
    "examples",
    "file_option_value",
    "folder_option_value",
    "handle_errors",
    "mark_verbose",
    "print_table",
    "project_option",
    "verbose_option",
]

#: The docs of the installed version are not in its wheel: help texts link here (one place to change).
DOCS_URL = "https://github.com/kernlock/kernlock/blob/main/docs/"
#: ``ctx.meta`` key of the root context: ``-v`` was given (before or after the command's name).
_VERBOSE = "kernlock.verbose"
#: What makes a process that kernlock runs or activates show tracebacks (kernlock.runtime.excepthook.DEBUG).
_DEBUG = "KERNLOCK_DEBUG"


def _show_help(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


class _PlainHelp:
    """click's ``-h``/``--help`` option, made without click's gettext call: click translates its help text while
    each command parses its arguments, and gettext imports ``locale`` to look for translations (~1 ms of every
    command; kernlock's texts are English only). The same option, from click's public API."""

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        names = self.get_help_option_names(ctx)  # type: ignore[attr-defined]
        if not names or not self.add_help_option:  # type: ignore[attr-defined]
            return None
        option: click.Option | None = self.__dict__.get("_plain_help")
        if option is None:
            option = click.Option(
                [*names, "_plain_help"], is_flag=True, is_eager=True, expose_value=False, callback=_show_help,
                help="Show this message and exit.",
            )  # fmt: skip
            self.__dict__["_plain_help"] = option
        return option


class Command(_PlainHelp, click.Command):
    """Every kernlock command (``@click.command(cls=Command)``; a :class:`Group`'s commands are made so)."""


class Group(_PlainHelp, click.Group):
    """kernlock's command groups: their commands are :class:`Command`, their subgroups of this class."""

    command_class = Command
    group_class = type


def docs(page: str) -> str:
    """The address of a page of the docs (``activation.md``, ``activation.md#kernlock-run``)."""
    return DOCS_URL + page


def examples(*lines: tuple[str, str], page: str) -> str:
    """A command's epilog: where its docs are, then 1-3 examples, each ``(command, what it does)`` (``what`` may be
    empty). ``\\b`` keeps click from re-wrapping the lines."""
    width = max((len(command) for command, what in lines if what), default=0)
    shown = [f"  $ {command.ljust(width)}   # {what}" if what else f"  $ {command}" for command, what in lines]
    return "\n".join(["\b", f"Docs: {docs(page)}", "", "\b", "Examples:", *shown])


project_option = click.option(
    "--project",
    "project_dir",
    metavar="DIRECTORY",
    callback=lambda _ctx, param, value: _path(value, param, folder=True, must_exist=True),
    default=None,
    help="Project directory (holds pyproject.toml and kernels.lock); default: the nearest enclosing project.",
)


def _verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        mark_verbose(ctx)
    return value


def mark_verbose(ctx: click.Context) -> None:
    """``-v``: tracebacks with errors, in this command and, for `kernlock run`, in CMD's processes
    (``KERNLOCK_DEBUG=1``, which the environment of CMD inherits)."""
    ctx.find_root().meta[_VERBOSE] = True
    name = ctx.invoked_subcommand if ctx.parent is None else ctx.command.name
    if name == "run":
        os.environ[_DEBUG] = "1"


def verbose_option(help: str = "Show tracebacks with errors.") -> Callable[[Any], Any]:
    """``-v``/``--verbose`` on a command, as on ``kernlock`` itself (``kernlock sync -v`` = ``kernlock -v sync``)."""
    return click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_verbose, help=help)


def _path(value: str | None, param: click.Parameter, *, folder: bool, must_exist: bool = False) -> Path | None:
    """A file or folder option as a Path; an existing path of the other kind (or, with ``must_exist``, a missing
    one) is a usage error. Checked here rather than by click.Path, whose import-time translations and pathlib would
    cost ``--help`` and ``--version``: pathlib is imported only when the option is given."""
    if value is None:
        return None
    from pathlib import Path

    path = Path(value)
    kind = "Directory" if folder else "File"
    if must_exist and not path.exists():
        raise click.BadParameter(f"{kind} {value!r} does not exist.", param=param)
    if path.exists() and path.is_dir() != folder:
        raise click.BadParameter(f"{kind} {value!r} is {'a file' if folder else 'a directory'}.", param=param)
    return path


def file_option_value(_ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    return _path(value, param, folder=False)


def folder_option_value(_ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    return _path(value, param, folder=True)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a KernlockError as one clear message and exit 1; a traceback only with -v."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from kernlock.util import interrupt

        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()  # a reader that went away (`kernlock env | head`) is found here, not at exit
            return result
        except (interrupt.Interrupted, interrupt.Cancelled) as err:
            from kernlock.cli.output import interrupted

            interrupted(getattr(err, "exit_code", 130))
        except KernlockError as err:
            _fail(str(err))
        except BrokenPipeError:
            raise  # click ends the command quietly with exit 1, as a Unix tool whose reader is gone
        except OSError as err:  # the local disk: a read-only project, a full cache...
            where = f" ({err.filename})" if err.filename else ""
            _fail(f"{err.strerror or err}{where}; check the folder's permissions and free space.")

    return wrapper


def _fail(message: str) -> None:
    root = click.get_current_context().find_root()
    if root.params.get("verbose") or root.meta.get(_VERBOSE) or os.environ.get(_DEBUG, "").strip() not in ("", "0"):
        import traceback

        traceback.print_exc()
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Aligned columns, the header first."""
    table = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
