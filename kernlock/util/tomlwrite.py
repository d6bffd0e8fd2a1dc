"""A small, fast TOML writer for generated files (kernels.lock), byte for byte the layout tomlkit gives them.

tomlkit keeps a document's formatting, which pyproject.toml needs; a generated lock has none to keep, and building
tomlkit items cost 376 ms for a 20-kernel x 26-environment lock. This writer renders plain values in a few ms:

* ``str``, ``int``, ``bool``: ``key = value`` (basic strings, escaped as tomlkit escapes them);
* ``list`` of those (or of inline values): ``key = ["a", "b"]``;
* ``dict``: a table, ``[parent.key]``; a non-empty ``list`` of ``dict``: an array of tables, ``[[parent.key]]``;
* :class:`InlineTables`: a multiline array of inline tables, ``key = [\\n    {a = 1},\\n]``.

Within a table, plain values come first, then tables and arrays of tables, each in insertion order (TOML puts a
table's own keys before its sub-tables; tomlkit writes them so too). The equivalence with tomlkit is a test
(tests/functional/test_lock_io.py) over generated documents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["InlineRows", "InlineTable", "InlineTables", "dumps", "inline_table", "key", "string", "value"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPE = re.compile(r'[\x00-\x1f\x7f"\\]')
_COMPACT = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


class InlineTables(list[Any]):
    """A list of tables written as one multiline array of inline tables instead of an array of tables."""


class InlineTable(dict[str, Any]):
    """A table written inline, ``key = {a = 1, b = "x"}``, among its parent's plain values."""


class InlineRows(list[str]):
    """Inline tables already written (:func:`inline_table`), laid out as :class:`InlineTables` are."""


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _COMPACT.get(char) or f"\\u{ord(char):04x}"


def string(value: str) -> str:
    """``value`` as a TOML basic string."""
    return f'"{_ESCAPE.sub(_escape, value)}"' if _ESCAPE.search(value) else f'"{value}"'


_KEY_TEXT: dict[str, str] = {}


def key(name: str) -> str:
    """A bare key when TOML allows one, else a quoted one."""
    text = _KEY_TEXT.get(name)
    if text is None:
        text = name if _BARE_KEY.fullmatch(name) else string(name)
        if len(_KEY_TEXT) < 4096:
            _KEY_TEXT[name] = text
    return text


def value(item: Any) -> str:
    """An inline TOML value."""
    kind = type(item)
    if kind is str:
        return f'"{_ESCAPE.sub(_escape, item)}"' if _ESCAPE.search(item) else f'"{item}"'
    if kind is dict:
        return inline_table(item.items())
    if kind is int:
        return str(item)
    if kind is list:
        return "[" + ", ".join([value(entry) for entry in item]) + "]"
    if kind is InlineRows:
        return "[\n" + "".join([f"    {row},\n" for row in item]) + "]" if item else "[]"
    if isinstance(item, InlineTables):
        return "[\n" + "".join([f"    {inline_table(entry.items())},\n" for entry in item]) + "]" if item else "[]"
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, str):
        return string(item)
    if isinstance(item, int):
        return str(int(item))
    if isinstance(item, dict):
        return value(dict(item))
    if isinstance(item, list):
        return value(list(item))
    raise TypeError(f"cannot write {type(item).__name__} to TOML")


def inline_table(pairs: Iterable[tuple[str, Any]]) -> str:
    """``{key = value, ...}`` (a lock has thousands: plain strings and integers are written right here)."""
    parts = []
    for name, entry in pairs:
        text = _KEY_TEXT.get(name) or key(name)
        entry_kind = type(entry)
        if entry_kind is str and not _ESCAPE.search(entry):
            parts.append(f'{text} = "{entry}"')
        elif entry_kind is int:
            parts.append(f"{text} = {entry}")
        else:
            parts.append(f"{text} = {value(entry)}")
    return "{" + ", ".join(parts) + "}"


def _is_table(item: Any) -> bool:
    return isinstance(item, dict) and type(item) is not InlineTable


def _is_table_array(item: Any) -> bool:
    return type(item) is list and bool(item) and all(isinstance(entry, dict) for entry in item)


def _is_super(table: dict[str, Any]) -> bool:
    """A table holding only tables is not written itself (``[a.b]`` without ``[a]``), as tomlkit does."""
    return bool(table) and all(_is_table(item) or _is_table_array(item) for item in table.values())


def dumps(document: dict[str, Any], header: str | None = None) -> str:
    """The TOML text of ``document``; ``header``: a comment on the first line."""
    out: list[str] = [f"# {header}\n"] if header else []
    _table(out, document, (), 0 if not out else -1)
    return "".join(out)


def _header(out: list[str], text: str, parent_end: int) -> int:
    """Write a table header: after a blank line unless nothing was written since the parent's own header (or
    since the start). Returns where this table's header ends."""
    out.append(f"{text}\n" if len(out) == parent_end else f"\n{text}\n")
    return len(out)


def _table(out: list[str], table: dict[str, Any], path: tuple[str, ...], header_end: int) -> None:
    """The keys of ``table``, then its tables; ``header_end``: where its header ended (-1: it has none)."""
    nested = []
    for name, item in table.items():
        if _is_table(item) or _is_table_array(item):
            nested.append((name, item))
        else:
            out.append(f"{key(name)} = {value(item)}\n")
    for name, item in nested:
        inner = (*path, key(name))
        if _is_table(item):
            if _is_super(item):  # no header of its own: its first table follows ours as a child would
                _table(out, item, inner, header_end if len(out) == header_end else -1)
            else:
                _table(out, item, inner, _header(out, f"[{'.'.join(inner)}]", header_end))
        else:
            after = header_end
            for entry in item:  # an element right after an empty one gets no blank line either (as in tomlkit)
                after = _header(out, f"[[{'.'.join(inner)}]]", after)
                _table(out, entry, inner, after)
