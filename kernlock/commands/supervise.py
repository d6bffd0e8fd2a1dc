"""`kernlock run` as CMD's parent: it outlives CMD to remove the run's binding of the environment
(:mod:`kernlock.commands.runbind`), and behaves as if it were CMD meanwhile.

- Signals sent to kernlock (``kill``, ``scancel``, a job's time limit: SIGTERM, SIGHUP, SIGUSR1...) are passed on
  to CMD; SIGINT and SIGQUIT from the terminal are not, as the terminal sends them to CMD itself.
- If kernlock is killed (SIGKILL: nothing can be passed on, nothing cleaned up), CMD gets SIGKILL too (Linux:
  ``PR_SET_PDEATHSIG``), as it would have if kernlock had become CMD, so no process of the run starts unbound later.
- While CMD runs, the binding's file is touched every :data:`~kernlock.runtime.runs.HEARTBEAT` seconds: other hosts
  that share the environment see the run is alive.
- kernlock ends as CMD ended: the same exit status, or killed by the same signal.
"""

from __future__ import annotations

import os
import signal
import sys

from kernlock.errors import LaunchError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from kernlock.commands.runbind import Binding

__all__ = ["FORWARDED", "exit_as", "supervise"]

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)


def supervise(argv: list[str], env: dict[str, str], binding: Binding | None) -> int:
    """Run ``argv`` to its end (see the module) and return its status as subprocess does (``-N``: killed by signal
    N); the binding is removed first. Raises LaunchError where ``argv`` cannot be started."""
    import subprocess

    from kernlock.runtime.runs import HEARTBEAT

    try:
        waited: set[int] = {*FORWARDED, signal.SIGCHLD}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
        try:
            child = subprocess.Popen(argv, env=env, preexec_fn=_in_child(previous))
        except OSError as err:
            raise LaunchError(
                f"cannot run {argv[0]!r}", why=f"{err.strerror or err}", fix="check the command and PATH"
            ) from err
        try:
            while child.poll() is None:
                got = signal.sigtimedwait(waited, HEARTBEAT)
                if got is None:
                    if binding is not None:
                        binding.touch()
                elif got.si_signo != signal.SIGCHLD and (got.si_code <= 0 or got.si_signo not in _FROM_TERMINAL):
                    child.send_signal(got.si_signo)  # si_code <= 0: sent by a process (kill, sigqueue), not a tty
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    finally:
        if binding is not None:
            binding.remove()
    return child.returncode


def exit_as(code: int) -> NoReturn:
    """End this process as CMD ended: its exit status, or (``-N``) killed by signal N."""
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        sys.exit(128 - code)  # a signal that does not end a process by default
    sys.exit(code)


def _in_child(mask: set[int]) -> Callable[[], None]:
    """What CMD's process does between fork and exec: kernlock's signal mask undone, and (Linux) SIGKILL when
    kernlock dies."""
    parent = os.getpid()
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # kernlock died before that
                os._exit(1)

    return setup
