"""`kernlock run --record`, in each process: every Hub kernel request is written down (docs/activation.md).

The hooks call :func:`note` for every request they see (:func:`kernlock.runtime.policy.locked_entry`), locked or
not, before the load is tried: a request is recorded even when its load then fails or ``kernelize`` quietly skips
it. Which load path asked is read from the call stack (the transformers and kernels functions it passes); the policy
calls :func:`note_loaded` for each locked build it hands the loader. Each process appends one JSON line per distinct
request or build to ``<node>-<pid>.jsonl`` in the folder ``$KERNLOCK_RECORD`` names, which `kernlock run --record`
made (this user's alone; a Ray job's workers are given it, docs/ray.md); :mod:`kernlock.runtime.records` gathers and
checks them. Nothing here may break a run: a record that cannot be written is dropped with one warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

__all__ = ["ENV", "PATHS", "asked_as_revision", "folder", "load_path", "node", "note", "note_loaded"]

logger = logging.getLogger("kernlock")

#: The variable that turns recording on: the folder `kernlock run --record` gathers records from.
ENV = "KERNLOCK_RECORD"
#: Every load path a record may name, in the order the table lists them.
PATHS = (
    "attn_implementation",
    "flash_attention fallback",
    "kernelize mapping",
    "lazy layer",
    "get_kernel",
    "kernel dependency",
)

#: The name records.make_folder gives a record folder.
_FOLDER = re.compile(r"[0-9]{1,10}-[0-9a-f]{16}")
_seen: set[tuple[str, str, str]] = set()
_lock = threading.Lock()
_broken = False


def folder() -> str | None:
    """The record folder of this process, or None when `kernlock run --record` did not start it."""
    value = os.environ.get(ENV)
    return value or None


def asked_as_revision(asked: str) -> str:
    """``version=N`` -> ``vN``; ``revision=R`` -> ``R`` (what pyproject records); anything else as it is."""
    if asked.startswith("version="):
        return "v" + asked.removeprefix("version=")
    return asked.removeprefix("revision=")


def note(repo: str, asked: str, locked: bool) -> None:
    """Record that this process asked for ``repo`` (``asked``: ``version=N`` / ``revision=R``). Never raises."""
    if folder() is None or _broken:
        return
    try:
        path, detail, layer_asked = load_path(sys._getframe(1))
        revision = layer_asked or asked_as_revision(asked)
        record = {"repo": repo, "asked": revision, "path": path, "detail": detail, "locked": locked}
    except Exception as err:  # never break the run for a record
        _give_up(err)
        return
    _write((repo, revision, path), record)


def note_loaded(repo: str, commit: str, variant: str) -> None:
    """Record that this process was handed the locked build of ``repo`` at ``commit`` (``variant``), and on which
    node (a Ray worker's node, else this host). Never raises."""
    if folder() is None or _broken:
        return
    _write(("loaded", repo, commit + variant), {"loaded": repo, "commit": commit, "variant": variant, "node": node()})


def node() -> str:
    """This process's node as a record names it: ``$KERNLOCK_NODE`` (a Ray worker's node), else the host name."""
    name = os.environ.get("KERNLOCK_NODE") or os.uname().nodename
    return "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name)[:64] or "node"


def _write(key: tuple[str, str, str], record: dict[str, object]) -> None:
    where = folder()
    try:
        with _lock:
            if key in _seen:
                return
            _seen.add(key)
            _append(str(where), json.dumps(record, sort_keys=True) + "\n")
    except Exception as err:  # never break the run for a record
        _give_up(err)


def _give_up(err: Exception) -> None:
    global _broken
    _broken = True
    logger.warning("kernlock: cannot write `kernlock run --record`'s record in %s: %s", folder(), err)


def _append(where: str, line: str) -> None:
    """Append to this process's file in ``where``: a record folder of `kernlock run --record` (``<pid>-<token>``
    in a ``record`` folder; this host's own under kernlock's cache, or the run's on a shared filesystem, as a Ray
    worker on another node is given it) that only this user can write."""
    from kernlock.util.hfenv import private

    real = os.path.realpath(where)
    parent = os.path.dirname(real)
    if os.path.basename(parent) != "record" or not _FOLDER.fullmatch(os.path.basename(real)) or not private(real):
        raise OSError(f"{where} is not a record folder of `kernlock run --record` of this user's alone")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(os.path.join(real, f"{node()}-{os.getpid()}.jsonl"), flags, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def load_path(frame: FrameType | None) -> tuple[str, str, str | None]:
    """(path, detail, revision a layer repository asked) of the request whose hook runs in ``frame``, read from
    the transformers and kernels functions on the stack (the innermost one that says wins)."""
    trees = 0
    layer: tuple[str, str | None] | None = None
    lazy = attention = fallback = entry = None
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        name = frame.f_code.co_name
        if module.startswith("kernels"):
            if name == "resolve_kernel_tree":
                trees += 1
            elif layer is None and name in ("load", "_resolve_revision"):
                layer = _layer_of(frame.f_locals.get("self"))
            elif name in _ENTRY_POINTS:  # the outermost says what the caller asked, before it became a commit
                entry = _asked_in(frame.f_locals) or entry
        elif module.startswith("transformers"):
            local = frame.f_locals
            if name == "lazy_load_kernel" and lazy is None:
                lazy = str(local.get("kernel_name", ""))
            elif name == "load_and_register_attn_kernel" and attention is None:
                attention = str(local.get("attn_implementation", ""))
            elif name == "_check_and_adjust_attn_implementation" and fallback is None:
                asked = local.get("attn_implementation")
                if isinstance(asked, str) and asked.startswith("flash_attention_"):
                    fallback = asked
        frame = frame.f_back
    if trees >= 2:
        return "kernel dependency", "", None
    if layer is not None:
        return "kernelize mapping", layer[0], layer[1] or entry
    if lazy is not None:
        return "lazy layer", lazy, entry
    if fallback is not None:
        return "flash_attention fallback", fallback, entry
    if attention is not None:
        return "attn_implementation", attention, entry
    return "get_kernel", "", entry


#: The kernels functions a program calls, whose ``version``/``revision`` is what was asked (kernels 0.15/0.16
#: resolve ``version=N`` to a commit inside ``get_kernel`` before the hooked seam sees the request).
_ENTRY_POINTS = frozenset({"get_kernel", "has_kernel", "install_kernel", "get_kernel_with_resolver"})


def _asked_in(local: dict[str, object]) -> str | None:
    version, revision = local.get("version"), local.get("revision")
    if isinstance(version, int) and not isinstance(version, bool):
        return f"v{version}"
    return revision if isinstance(revision, str) else None


def _layer_of(owner: object) -> tuple[str, str | None] | None:
    """(layer name, revision asked) of a kernels ``LayerRepository`` / ``FuncRepository``, else None."""
    if not isinstance(getattr(owner, "_repo_id", None), str):
        return None
    name = getattr(owner, "layer_name", None) or getattr(owner, "func_name", None) or type(owner).__name__
    version, revision = getattr(owner, "_version", None), getattr(owner, "_revision", None)
    if isinstance(version, int) and not isinstance(version, bool):
        return str(name), f"v{version}"
    return str(name), revision if isinstance(revision, str) else None
