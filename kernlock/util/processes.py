"""Which host this is, and whether a process of it still runs: the same process, not a later one with its pid.

Partial downloads (:mod:`kernlock.util.sharing`) and `kernlock run`'s binding of an environment
(:mod:`kernlock.runtime.runs`) are named after the process that made them, so that what a dead process left
behind is known for what it is.
"""

from __future__ import annotations

import os

__all__ = ["host", "started"]


def host() -> str:
    """This host's name, as letters, digits and ``-`` only (a part of a file name)."""
    import socket

    return "".join(c if c.isalnum() or c == "-" else "-" for c in socket.gethostname())[:64] or "host"


def started(pid: int) -> str | None:
    """When process ``pid`` of this host started (clock ticks since boot, from ``/proc``), so that a later process
    that reuses the pid is told apart; ``""`` where ``/proc`` cannot tell and the process exists; None where no
    such process runs (a zombie does not run)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except OSError:
        pass
    else:  # after the command's name: state (field 3) ... starttime (field 22)
        if len(fields) < 20:
            return ""
        return None if fields[0] in (b"Z", b"X", b"x") else fields[19].decode()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # alive, another user's
        return ""
    return ""
