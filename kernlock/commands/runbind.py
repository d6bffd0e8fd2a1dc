"""`kernlock run` binds its Python environment to the run's lock for as long as the run lasts (docs/clusters.md).

A launcher that passes no environment (``env -i``, ``srun --export=NONE``, pdsh, ssh) starts its processes without
`kernlock run`'s ``PYTHONPATH`` and ``KERNLOCK_*``, so its sitecustomize never runs there. What every interpreter of
the environment does run is each ``.pth`` file of its site-packages (site.py; `kernlock hook install` binds an
environment so for good): `kernlock run` writes ``kernlock-run-<host>-<pid>.pth``, a line that imports
``_kernlock_run`` (written beside it, with its bytecode; it stays, inert, once no run needs it) and, as a comment, the
run's owner: who runs it and the settings CMD gets (:mod:`kernlock.runtime.runs` reads it at a process's first
kernel import, so that a process that imports no kernel pays only for that import). The file goes when CMD ends;
what a killed run leaves binds nothing (its pid no longer runs) and the next `kernlock run` removes it.

Where the binding cannot be written (site-packages read-only) or would meet another run's with other settings, a CMD
that may clear the environment (:mod:`kernlock.commands.launchers`) is refused before it starts; others run as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from kernlock.commands import launchers
from kernlock.commands.hook import finder_source
from kernlock.errors import BindingError
from kernlock.runtime import runs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PTH_PREFIX", "RUN_MODULE", "RUN_SOURCE", "SUPPORTED", "Binding", "bind", "read_owner"]

PTH_PREFIX = runs.PTH_PREFIX
read_owner = runs.read_owner
RUN_MODULE = "_kernlock_run"
#: Where a run can bind its environment: kernlock then stays CMD's parent, waiting with sigtimedwait (not on Windows
#: nor macOS; there `kernlock run` binds nothing, as before).
SUPPORTED = os.name != "nt" and hasattr(signal, "sigtimedwait")
RECORD = "KERNLOCK_RECORD"  # `kernlock run --record`'s folder, carried too

RUN_SOURCE = '''"""Written by `kernlock run`: each kernlock-run-*.pth beside it is a `kernlock run` in progress that
binds this environment until it ends (docs/clusters.md); without such a file nothing imports this module.

The first import of kernels or transformers' model code in a process that got none of the run's environment (env -i,
srun --export=NONE, pdsh, ssh) activates kernlock with the run's settings, which each .pth holds as a comment; a run
that is gone binds nothing.
"""
import os
import sys

''' + finder_source(
    "KernlockRun",
    "kernlock run",
    "\n            from kernlock.runtime import runs; runs.activate(os.path.dirname(os.path.abspath(__file__)))",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """One run's binding: its ``.pth`` file in ``site``."""

    site: Path
    pth: Path

    def touch(self) -> None:
        """The heartbeat that tells other hosts the run still runs."""
        with contextlib.suppress(OSError):
            os.utime(self.pth)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.pth.unlink(missing_ok=True)


def bind(env: dict[str, str], command: tuple[str, ...], site: Path | None = None) -> Binding | None:
    """Bind ``site`` (default: this interpreter's site-packages) to the settings in ``env`` for this run of
    ``command``; None where no binding was made and none is needed (not :data:`SUPPORTED`; site-packages not
    writable, and ``command`` is not known to clear the environment). Raises BindingError, before anything
    starts, where a process of ``command`` that gets no environment would load unlocked or mix two runs' locks."""
    from kernlock.runtime.activation import CARRIED

    if not SUPPORTED:
        return None
    if site is None:
        import sysconfig

        site = Path(sysconfig.get_paths()["purelib"])
    settings = {key: env[key] for key in (*CARRIED, RECORD) if env.get(key)}
    if RECORD in settings:  # a record is written only below the writer's own kernlock cache: the run's
        from kernlock.util.hfenv import cache_root

        settings["KERNLOCK_CACHE"] = os.path.abspath(cache_root())
    clears = launchers.clears_environment(command, env)
    me = runs.this_process()
    pth = site / f"{PTH_PREFIX}{me['host']}-{me['pid']}.pth"
    owner = {**me, "clears": clears, "settings": settings}
    try:
        _write_module(site)
        from kernlock.util.atomic import write_text_atomic

        write_text_atomic(pth, f"import {RUN_MODULE}\n{runs.OWNER_PREFIX}{owner!r}\n")
    except OSError as err:
        if clears is None or _hook_binds(site, settings.get("KERNLOCK_LOCKFILE")):
            return None
        raise BindingError(
            f"cannot bind {site} to the lock for this run",
            why=f"{err.strerror or err}, and `{clears}` starts processes without `kernlock run`'s environment: they "
            "would load unlocked",
            fix=f"Run `kernlock hook install --lockfile {settings.get('KERNLOCK_LOCKFILE')}` as the environment's "
            "owner, or launch so that the environment is passed on",
        ) from err
    binding = Binding(site=site, pth=pth)
    for other in _others(site, pth):
        if other["settings"] != settings and (clears or other.get("clears")):
            binding.remove()
            who = f"`{clears}` starts this run's" if clears else f"`{other['clears']}` starts that run's"
            raise BindingError(
                f"another `kernlock run` binds {site} to {runs.describe(other)} until it ends, and {who} processes "
                "without their environment: they could not tell the two locks apart",
                fix="Wait for it to end, or run from a Python environment of its own",
            )
    return binding


def _others(site: Path, mine: Path) -> list[dict[str, Any]]:
    """The owners of the other runs that bind ``site`` for this user; the files of runs that are gone are
    removed."""
    found = []
    for owner in runs.owners(site):
        if owner["pth"] == str(mine):
            continue
        if not runs.alive(owner):
            with contextlib.suppress(OSError):
                os.unlink(owner["pth"])
        elif runs.applies(owner):
            found.append(owner)
    return found


def _write_module(site: Path) -> None:
    """``_kernlock_run.py`` (rewritten only when its text changed) and its bytecode, by this interpreter."""
    import py_compile

    from kernlock.util.atomic import write_text_atomic

    module = site / f"{RUN_MODULE}.py"
    try:
        current = module.read_text()
    except (OSError, UnicodeDecodeError):
        current = None
    if current != RUN_SOURCE:
        write_text_atomic(module, RUN_SOURCE)
        with contextlib.suppress(OSError, py_compile.PyCompileError):  # without bytecode it still works
            py_compile.compile(str(module), doraise=True)


def _hook_binds(site: Path, lockfile: str | None) -> bool:
    """Whether `kernlock hook install` bound ``site`` to ``lockfile`` already (then no run binding is needed)."""
    from kernlock.commands import hook

    found = hook.status(None, site)
    return found.installed and lockfile is not None and found.lockfile == lockfile
