"""The ``kernlock`` command as installed: :func:`kernlock.cli.app.main`, then an exit without the interpreter's
teardown.

When a command is done, Python still frees every module and object it made, one by one: about 20 ms of a 140 ms
no-op ``kernlock sync`` on a 2-core machine, more than the command's own work. The console script (and ``python -m
kernlock``) instead runs the ``atexit`` handlers, flushes its output and ends the process at once. It does so only
when no other thread is alive; a command that leaves one (``kernlock serve``'s server) takes the ordinary exit, and
so does a run that asks to see warnings (``python -X dev``, ``-W``, ``PYTHONWARNINGS``): the teardown is where a
``ResourceWarning`` of an unclosed file or socket is raised. Tests that drive :func:`kernlock.cli.app.main` in-process
(click's CliRunner) never come here.
"""

from __future__ import annotations

import gc

#: A command imports some 40,000 objects that live as long as the process (click, the lock model, tomllib): with
#: the default threshold (700 allocations) the cyclic collector runs about 30 times over them while a no-op
#: command starts, ~7% of its CPU time. So no collection runs while the command line is imported (modules and
#: classes: nothing there is garbage); what it made is then frozen (never scanned again) and collections resume,
#: every 20,000 allocations: garbage cycles still go (a long `lock` or `serve` collects as before, a little less
#: often).
GC_THRESHOLD = 20_000
gc.disable()
gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])

import atexit  # noqa: E402  (after the threshold: these imports are what it is for)
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

from kernlock.util import interrupt  # noqa: E402

interrupt.install_handlers()  # first: a Ctrl-C while the command is still being imported is an interrupt too
try:
    from kernlock.cli.app import main
except interrupt.Interrupted as stop:
    sys.stderr.write("interrupted: stopped before the command started; nothing was changed.\n")
    os._exit(stop.exit_code)
finally:
    gc.freeze()
    gc.enable()

__all__ = ["run"]


def run() -> None:
    """``kernlock ...``: run the command line, then exit with its status."""
    code: str | int | None = 0
    try:
        main()
    except SystemExit as done:
        code = 0 if done.code is None else done.code
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if type(code) is not int or threading.active_count() > 1 or run_exit_handlers is None or _wants_teardown():
        sys.exit(code)  # a message as the status, another thread still running, warnings asked for: the ordinary exit
    run_exit_handlers()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # the reader went away (`kernlock env | head`): quietly, as click does
        os._exit(1)
    os._exit(code)


def _wants_teardown() -> bool:
    """Whether this run asks for warnings (``-X dev``, ``-W``, ``PYTHONWARNINGS``), which the teardown raises."""
    return sys.flags.dev_mode or bool(sys.warnoptions)
