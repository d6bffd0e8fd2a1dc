"""The warning of ``add``, ``lock``, ``sync`` and ``show`` about the installed libraries, remembered per installation:
a line when the installed kernels is a release no loader generation covers (activation then only pins through
``LOCAL_KERNELS``: :func:`kernlock.generations.catalog.for_kernels`), and one when the transformers/kernels pair turns
transformers' Hub kernel paths off (:func:`kernlock.environments.compat.transformers_gate`).

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
    """The warning lines for this installation, or None when its libraries are fine (or transformers is absent)."""
    kept = memo.recall("libraries", ())
    if isinstance(kept, dict):
        message = kept.get("warning")
        return message if isinstance(message, str) else None
    folders = memo.identities(memo.installed())
    message = _verdict()
    memo.remember("libraries", (), folders, {"warning": message})
    return message


def _verdict() -> str | None:
    from kernlock.environments import compat
    from kernlock.generations import catalog

    lines = []
    kernels = compat.installed("kernels")
    if kernels is not None and catalog.for_kernels(kernels) is None:
        lines.append(
            f"warning: kernels {kernels} is a loader kernlock does not know ({catalog.untested(kernels)}): "
            "activation pins locked kernels through LOCAL_KERNELS only and leaves some load paths unpinned "
            f"(`kernlock env` lists them). Install a tested pair: {compat.INSTALL_KERNELS}."
        )
    gate = compat.transformers_gate()
    if gate is not None and not gate.ok:
        lines.append(f"warning: {gate.message()} `kernlock env` has the details.")
    return "\n".join(lines) or None
