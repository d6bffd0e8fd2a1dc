"""The process side of `kernlock run`'s binding of a Python environment (docs/clusters.md).

While `kernlock run` lasts, a ``kernlock-run-<host>-<pid>.pth`` in its environment's site-packages makes every
interpreter start of that environment import ``_kernlock_run`` (one finder on ``sys.meta_path``, nothing else), and
holds, as a comment that site.py skips, the run's owner: who runs it (host, pid, when it started, uid) and the
settings `kernlock run` passes CMD (the lock, the mode, the kernel cache...). At its first kernel import, a process
that got none of them — its launcher cleared the environment: ``env -i``, ``srun --export=NONE``, pdsh, ssh — reads
the owners beside the module and activates with the run's settings (:func:`activate`). An owner whose run is gone
(the same host: that pid no longer runs, or runs another process; another host: its file has not been touched by
the run's heartbeat for :data:`STALE_AFTER` seconds) binds nothing, so a killed run does not bind later processes.
"""

from __future__ import annotations

import os

from kernlock.runtime import state as activated

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from kernlock.runtime.state import Settings

__all__ = [
    "HEARTBEAT",
    "OWNER_PREFIX",
    "PTH_PREFIX",
    "STALE_AFTER",
    "activate",
    "alive",
    "applies",
    "describe",
    "owners",
    "read_owner",
    "this_process",
]

PTH_PREFIX = "kernlock-run-"  # sorts after kernlock-hook.pth: the run's finder goes first on sys.meta_path
OWNER_PREFIX = "# kernlock run: "  # the line of a binding's .pth that holds its owner

#: Seconds between two touches of a binding's file by its run, and the age after which another host takes a
#: binding whose file was not touched as left by a run that is gone (an NFS client may see an mtime a minute late).
HEARTBEAT = 60.0
STALE_AFTER = 300.0


def this_process() -> dict[str, Any]:
    """Who this process is, as a run's owner line names it."""
    from kernlock.util.processes import host, started

    return {"host": host(), "pid": os.getpid(), "start": started(os.getpid()), "uid": _uid()}


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


def alive(run: dict[str, Any]) -> bool:
    """Whether the run that wrote ``run`` still runs (see the module)."""
    import time

    from kernlock.util.processes import host, started

    try:
        if run["host"] == host():
            return bool(started(int(run["pid"])) == run["start"])
        return time.time() - os.stat(run["pth"]).st_mtime < STALE_AFTER
    except (KeyError, TypeError, ValueError, OSError):
        return False


def applies(run: dict[str, Any]) -> bool:
    """Whether ``run`` binds this process: a run of this user that still runs, with settings to carry."""
    return run.get("uid") == _uid() and isinstance(run.get("settings"), dict) and alive(run)


def describe(run: dict[str, Any]) -> str:
    """``/p/kernels.lock (strict mode) of `kernlock run` pid 123 on host`` for messages."""
    settings = run["settings"]
    mode = settings.get("KERNLOCK_MODE", "strict")
    return f"{settings.get('KERNLOCK_LOCKFILE')} ({mode} mode) of `kernlock run` pid {run['pid']} on {run['host']}"


def read_owner(pth: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The owner in a ``kernlock-run-*.pth`` (its ``pth`` is where it was read), or None where it holds none."""
    import ast

    try:
        with open(pth, encoding="utf-8") as lines:
            for line in lines:
                if line.startswith(OWNER_PREFIX):
                    owner = ast.literal_eval(line[len(OWNER_PREFIX) :].strip())
                    return {**owner, "pth": os.fspath(pth)} if isinstance(owner, dict) else None
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError):
        pass
    return None


def owners(site: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The owners of every binding in ``site`` (runs in progress or gone)."""
    import glob

    found = (
        read_owner(pth) for pth in sorted(glob.glob(os.path.join(glob.escape(os.fspath(site)), PTH_PREFIX + "*.pth")))
    )
    return [owner for owner in found if owner is not None]


def activate(site: str) -> Settings | None:
    """At the first kernel import of a process of a bound environment (``site``: its site-packages): activate it
    with the settings of the run in progress, unless it is activated already (it got its environment: `kernlock
    run`'s sitecustomize, or the program's own ``kernlock.activate()``). Settings the process has itself win, as
    under `kernlock run`. None where no run binds it. Raises ActivationError where two runs with different settings
    bind it, and it cannot tell which one it belongs to."""
    if activated.settings() is not None:
        return None
    live = [run for run in owners(site) if applies(run)]
    own = os.environ.get("KERNLOCK_LOCKFILE")
    if own:  # a child of a bound process (it carries the run's lock on) tells its run apart
        live = [run for run in live if run["settings"].get("KERNLOCK_LOCKFILE") == os.path.abspath(own)] or live
    if not live:
        return None
    if len({tuple(sorted(run["settings"].items())) for run in live}) > 1:
        from kernlock.errors import ActivationError

        raise ActivationError(
            f"{len(live)} `kernlock run`s in progress bind {site} to different settings",
            why=f"{'; '.join(describe(run) for run in live)}. This process got no KERNLOCK_LOCKFILE to tell them apart",
            fix="run them one at a time, or from Python environments of their own",
        )
    for key, value in live[0]["settings"].items():
        os.environ.setdefault(key, value)
    from kernlock.runtime import activation

    return activation.activate()
