"""The one-line warning of ``add``, ``lock``, ``sync`` and ``show`` when the installed transformers/kernels pair
turns transformers' Hub kernel paths off (:func:`kernlock.environments.compat.transformers_gate`), remembered per
installation.

Reading the installed versions walks ``sys.path`` and reads metadata; the verdict is kept in kernlock's cache,
keyed by this interpreter and its ``sys.path``, next to the modification stamp of every ``sys.path`` folder (the
first entry, the script's or current folder, holds no installed distributions and is left out). An
install or uninstall adds or removes a ``.dist-info`` folder, which changes its folder's stamp: only the first command
after one pays for reading metadata; the others stat a few folders. Only a cache that is the user's alone keeps
the verdict (as every answer kernlock keeps there); elsewhere it is read anew each time.
"""

from __future__ import annotations

import json
import os
import sys

from kernlock.util import hfenv
from kernlock.util.digest import sha256_hex

__all__ = ["warning"]

_VERSION = 1


def warning() -> str | None:
    """The warning line for this installation, or None when its pair is fine (or transformers is absent)."""
    folder = hfenv.cache_root() / "gate"
    if not hfenv.private(folder, create=True):  # a cache others can write keeps no verdict (docs/security.md)
        return _verdict()
    stamps = _stamps()
    path = folder / f"{_key()}.json"
    try:
        kept = json.loads(path.read_text())
        if kept.get("version") == _VERSION and kept.get("stamps") == stamps:
            message = kept.get("warning")
            return message if isinstance(message, str) else None
    except (OSError, ValueError, AttributeError):
        pass
    message = _verdict()
    try:
        from kernlock.util.atomic import write_text_atomic

        write_text_atomic(path, json.dumps({"version": _VERSION, "stamps": stamps, "warning": message}))
    except OSError:
        pass  # a cache we cannot write: the verdict is read again next time
    return message


def _verdict() -> str | None:
    from kernlock.environments import compat

    gate = compat.transformers_gate()
    if gate is None or gate.ok:
        return None
    return f"warning: {gate.message()} `kernlock env` has the details."


def _key() -> str:
    return sha256_hex("\0".join([sys.executable, *sys.path[1:]]).encode())[:24]


def _stamps() -> list[list[int]]:
    """(inode, mtime in ns) of every sys.path folder, [0, 0] for one that is missing."""
    found = []
    for entry in sys.path[1:]:
        try:
            st = os.stat(entry or ".")
            found.append([st.st_ino, st.st_mtime_ns])
        except OSError:
            found.append([0, 0])
    return found
