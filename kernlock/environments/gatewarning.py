"""The one-line warning of ``add``, ``lock``, ``sync`` and ``show`` when the installed transformers/kernels pair
turns transformers' Hub kernel paths off (:func:`kernlock.environments.compat.transformers_gate`), remembered per
installation.

Reading the installed versions walks ``sys.path`` and reads metadata; the verdict is remembered
(:mod:`kernlock.util.memo`) against every ``sys.path`` folder that holds distributions. An install or uninstall
adds or removes a ``.dist-info`` folder, which changes its folder: only the first command after one pays for
reading metadata; the others stat a few folders. Only a cache that is the user's alone keeps the verdict (as every
answer kernlock keeps there); elsewhere it is read anew each time.
"""

from __future__ import annotations

from kernlock.util import memo

__all__ = ["warning"]


def warning() -> str | None:
    """The warning line for this installation, or None when its pair is fine (or transformers is absent)."""
    kept = memo.recall("gate", ())
    if isinstance(kept, dict):
        message = kept.get("warning")
        return message if isinstance(message, str) else None
    folders = memo.identities(memo.installed())
    message = _verdict()
    memo.remember("gate", (), folders, {"warning": message})
    return message


def _verdict() -> str | None:
    from kernlock.environments import compat

    gate = compat.transformers_gate()
    if gate is None or gate.ok:
        return None
    return f"warning: {gate.message()} `kernlock env` has the details."
