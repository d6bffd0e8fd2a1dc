"""Installed distributions' versions, found as ``importlib.metadata.version`` finds them, without its imports.

``importlib.metadata`` pulls in ``email``, ``zipfile``, ``csv`` and more (~15 ms), which is most of what
``kernlock env`` would cost beyond click. The lookup it does for a version is small and specified (the
core metadata spec, and the ``.dist-info`` folder naming of the binary distribution format): walk ``sys.path`` in
order, take the first ``{name}-{version}.dist-info`` (or ``.egg-info``) folder whose normalized name matches, and
read the ``Version`` field of its ``METADATA`` (``PKG-INFO``). A differential test checks every installed
distribution against ``importlib.metadata``.
"""

from __future__ import annotations

import functools
import os
import re
import sys

__all__ = ["version"]

_SUFFIXES = (".dist-info", ".egg-info")


def version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (the first on ``sys.path``), or None."""
    wanted = _normalize(name)
    for entry in sys.path:
        folder = entry or "."
        for child in _metadata_folders(folder):
            if _normalize(child.split("-", 1)[0]) != wanted:
                continue
            found = _version_field(os.path.join(folder, child))
            if found is not None:
                return found
    return None


def _normalize(name: str) -> str:
    """The name as importlib.metadata compares it (PEP 503 normalization, ``-`` written ``_``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def _metadata_folders(folder: str) -> tuple[str, ...]:
    """The ``*.dist-info`` / ``*.egg-info`` entries of one ``sys.path`` folder, in listing order as importlib.metadata
    takes them (a zip or a missing path entry has none)."""
    try:
        children = os.listdir(folder)
    except OSError:
        return ()
    return tuple(child for child in children if child.endswith(_SUFFIXES))


def _version_field(path: str) -> str | None:
    """The ``Version`` header of a metadata folder's METADATA (or PKG-INFO), or of an ``.egg-info`` file."""
    candidates = [os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO"), path]
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if not line.strip():
                        break  # the headers end at the first empty line
                    key, sep, value = line.partition(":")
                    if sep and key.strip().lower() == "version":
                        return value.strip()
        except OSError:  # not there (or a folder): try the next form
            continue
    return None
