"""Installed distributions' versions, found as ``importlib.metadata.version`` finds them, without its imports.

``importlib.metadata`` pulls in ``email``, ``zipfile``, ``csv`` and more (~15 ms), which is most of what
``kernlock env`` would cost beyond click. The lookup it does for a version is small and specified (the
core metadata spec, and the ``.dist-info`` folder naming of the binary distribution format), and this module does
the same steps: walk ``sys.path`` in order; in each folder take the ``{name}[-{version}].dist-info`` /
``.egg-info`` entries whose normalized name matches, in listing order, then (in a ``*.egg`` folder) its
``EGG-INFO``; the first one found is the distribution, and its version is the ``Version`` header of its
``METADATA`` (else ``PKG-INFO``, else the ``.egg-info`` file itself), None when it has none. Where the standard
library would look somewhere this module does not (a zip file on ``sys.path``, another finder on
``sys.meta_path``), it asks ``importlib.metadata`` itself. One difference on purpose: metadata that is not UTF-8 is
read with replacement characters instead of raising. A differential test checks every installed distribution, and
each of these forms, against ``importlib.metadata``.
"""

from __future__ import annotations

import functools
import os
import re
import sys

__all__ = ["version"]

_SUFFIXES = (".dist-info", ".egg-info")
#: A header line, a continuation line or a mailbox ``From `` line (email.feedparser's headerRE): anything else
#: ends the headers, as it does for the email parser importlib.metadata uses.
_HEADER = re.compile(r"^(From |[\041-\071\073-\176]*:|[\t ])")
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")  # lines as the email parser splits text read with universal newlines


class _Elsewhere(Exception):
    """The standard library would look where this module does not: ask importlib.metadata."""


def version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (the first on ``sys.path``), or None."""
    try:
        found = _find(name)
    except _Elsewhere:
        import importlib.metadata

        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    return None if found is None else _version_field(found)


def _find(name: str) -> str | None:
    """The metadata folder (or ``.egg-info`` file) of the first distribution ``name`` on ``sys.path``."""
    import importlib.machinery

    if any(
        finder is not importlib.machinery.PathFinder and hasattr(finder, "find_distributions")
        for finder in sys.meta_path
    ):
        raise _Elsewhere()
    wanted, legacy = _normalize(name), name.lower().replace("-", "_")
    for entry in sys.path:
        children = _metadata_entries(entry)
        child = children.by_name.get(wanted)
        if child is not None:
            return os.path.join(entry, child)
        if children.egg_info is not None and _egg_name(entry) == legacy:
            return os.path.join(entry, children.egg_info)
    return None


def _normalize(name: str) -> str:
    """The name as importlib.metadata compares it (PEP 503 normalization, ``-`` written ``_``)."""
    name = name.lower().replace("-", "_").replace(".", "_")  # re.sub(r"[-_.]+", "_", name) by str methods: this
    while "__" in name:  # runs once per metadata folder on sys.path
        name = name.replace("__", "_")
    return name


def _egg_name(entry: str) -> str:
    """The legacy-normalized distribution name of a ``name-version-....egg`` folder."""
    return os.path.basename(entry).lower().rpartition(".")[0].partition("-")[0].replace("-", "_")


class _Entries:
    """One ``sys.path`` entry's metadata entries: ``*.dist-info`` / ``*.egg-info`` by normalized distribution name
    (the first in listing order wins, as importlib.metadata takes the first), and the ``EGG-INFO`` folder of an
    ``*.egg`` folder."""

    def __init__(self, infos: tuple[str, ...], egg_info: str | None) -> None:
        self.by_name: dict[str, str] = {}
        for child in infos:
            self.by_name.setdefault(_normalize(child.lower().rpartition(".")[0].partition("-")[0]), child)
        self.egg_info = egg_info


@functools.cache
def _metadata_entries(entry: str) -> _Entries:
    try:
        children = os.listdir(entry or ".")
    except OSError:
        if os.path.isfile(entry):  # a zip file: importlib.metadata reads its listing through zipfile
            raise _Elsewhere() from None
        return _Entries((), None)
    infos = tuple(child for child in children if child.lower().endswith(_SUFFIXES))
    is_egg = os.path.basename(entry).lower().endswith(".egg")
    egg_info = next((child for child in children if child.lower() == "egg-info"), None) if is_egg else None
    return _Entries(infos, egg_info)


def _version_field(path: str) -> str | None:
    """The ``Version`` header of a metadata folder's METADATA, else PKG-INFO (the first that is not empty), or of an
    ``.egg-info`` file, as the email parser reads it."""
    for candidate in (os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO"), path):
        try:
            with open(candidate, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:  # not there (or a folder): try the next form
            continue
        if text:
            return _header(text, "version")
    return None


def _header(text: str, wanted: str) -> str | None:
    """The first ``wanted`` header's value (continuation lines included), as email's compat32 policy parses it and
    importlib.metadata's message adapter gives it."""
    value: list[str] | None = None
    for match in _LINE.finditer(text):  # the headers only: a long description after them is never split
        line = match.group()
        if not line.strip("\r\n") or not _HEADER.match(line):
            break  # the headers end at an empty line, or at a line that is no header
        if line[0] in " \t":
            if value is not None:
                value.append(line)
            continue
        if value is not None:
            break
        key, sep, rest = line.partition(":")
        if sep and key.lower() == wanted and not line.startswith("From "):
            value = [rest.lstrip(" \t")]
    if value is None:
        return None
    found = "".join(value).rstrip("\r\n")
    if "\n" in found:  # a folded value: importlib.metadata dedents it ("RFC822 indentation")
        import textwrap

        found = textwrap.dedent(" " * 8 + found)
    return found
