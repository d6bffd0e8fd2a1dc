"""Pins read back from a kernels.lock that fails its checks, as far as it can be read (:mod:`kernlock.resolve.repair`
keeps them): the whole text with tomllib if it parses, else each ``[[kernel]]`` block, else the lines of a block one
by one; a text with git merge-conflict markers is split into its two sides first. Only each entry's repo, requested
revision and commit are read (its ref follows from them; its variants and files are read again from the Hub)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any, Protocol

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from dataclasses import dataclass

from kernlock.util import names

__all__ = ["Pin", "Pinned", "Pins", "read_pins", "sides"]

_KERNEL = "[[kernel]]"
_HEX = re.compile(r"[0-9a-f]{4,40}")
_LINE = re.compile(r"\s*(repo|requested|commit)\s*=")


class Pinned(Protocol):
    """A pin the resolver keeps: a lock entry, or a :class:`Pin` read back from a damaged lock."""

    @property
    def requested(self) -> str: ...
    @property
    def ref(self) -> str: ...
    @property
    def commit(self) -> str: ...


class Pins(Protocol):
    """The pins of a previous lock the resolver keeps, per repo: a Lock, or a :class:`Salvage`."""

    def entries(self, repo: str) -> Sequence[Pinned]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Pin:
    """One entry's pin as read back from a damaged lock (its variants and files are read again from the Hub)."""

    repo: str
    requested: str
    ref: str
    commit: str
    origin: str = ""  # where it was read: "line 9 ([[kernel]] #2)", "ours (HEAD) [[kernel]] #2"
    side: str = ""  # the side of a merge conflict it was read from ("ours (HEAD)"), "" outside one


def sides(text: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The two sides of a text with git merge-conflict markers, each as (label, text), or None when it has none.
    Lines outside a conflict belong to both; a diff3 base section (``|||||||``) to neither."""
    ours: list[str] = []
    theirs: list[str] = []
    labels = ["ours", "theirs"]
    state = ""
    found = False
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if bare.startswith("<<<<<<<") and state == "":
            state, found = "ours", True
            labels[0] = _label("ours", bare[7:])
        elif bare.startswith("|||||||") and state == "ours":
            state = "base"
        elif bare == "=======" and state in ("ours", "base"):
            state = "theirs"
        elif bare.startswith(">>>>>>>") and state == "theirs":
            state = ""
            labels[1] = _label("theirs", bare[7:])
        else:
            if state in ("", "ours"):
                ours.append(line)
            if state in ("", "theirs"):
                theirs.append(line)
    if not found:
        return None
    return (labels[0], "".join(ours)), (labels[1], "".join(theirs))


def _label(side: str, marker: str) -> str:
    name = "".join(c for c in marker.strip() if c.isprintable())[:60]  # a label from the file: no escapes
    return f"{side} ({name})" if name else side


def read_pins(text: str, side: str = "") -> tuple[list[Pin], list[str]]:
    """Every pin ``text`` still holds, and a line per entry it could not read: the whole text with tomllib if it
    parses, else each ``[[kernel]]`` block, else the lines of a block one by one."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == _KERNEL]
    try:
        data: Any = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("kernel"), list) and len(data["kernel"]) == len(starts):
        found = [_pin(table, _where(side, starts[i] + 1, i), side) for i, table in enumerate(data["kernel"])]
        return _split(found)
    found = []
    for i, start in enumerate(starts):
        block = lines[start : starts[i + 1] if i + 1 < len(starts) else len(lines)]
        try:
            tables = tomllib.loads("\n".join(block)).get("kernel")
        except (tomllib.TOMLDecodeError, RecursionError):
            tables = None
        if isinstance(tables, list) and len(tables) == 1:
            found.append(_pin(tables[0], _where(side, start + 1, i), side))
        else:
            found += _scan(block, start, side, i)
    return _split(found)


def _where(side: str, line: int, index: int) -> str:
    """Where an entry was read: its line in the file, or (on a side of a conflict, whose lines are not the file's)
    its place on that side."""
    return f"{side} [[kernel]] #{index + 1}" if side else f"line {line} ([[kernel]] #{index + 1})"


def _split(found: list[Pin | str]) -> tuple[list[Pin], list[str]]:
    return [p for p in found if isinstance(p, Pin)], [p for p in found if isinstance(p, str)]


def _scan(block: list[str], start: int, side: str, index: int) -> list[Pin | str]:
    """The pins of a block that is not TOML, line by line: each ``key = value`` line that still parses (a block
    whose own ``[[kernel]]`` line was damaged is read with the block above it, so each ``repo`` line starts a pin)."""
    found: list[Pin | str] = []
    table: dict[str, Any] = {}
    first = start + 1
    for offset, line in enumerate(block):
        stripped = line.strip()
        match = _LINE.match(line)
        if match is None:
            continue
        key = match.group(1)
        try:
            item = tomllib.loads(stripped)[key]
        except (tomllib.TOMLDecodeError, RecursionError, KeyError):
            continue
        if key == "repo":
            if table:
                found.append(_pin(table, _where(side, first, index), side))
            table, first = {}, start + offset + 1
        table.setdefault(key, item)
    if table or not found:
        found.append(_pin(table, _where(side, first, index), side))
    return found


def _pin(table: Any, where: str, side: str) -> Pin | str:
    """The pin of one entry's table (read at ``where``, on ``side`` of a conflict), or why it cannot be read."""
    if not isinstance(table, dict):
        return f"{where}: not a table"
    try:
        repo = names.check_repo(table.get("repo"))
        requested = names.check_ref(table.get("requested"))
        commit = names.check_commit(table.get("commit"))
    except ValueError as err:
        named = table.get("repo")
        return f"{where}{f' ({named})' if _is_repo(named) else ''}: {str(err)[:200]}"
    if len(requested) == 40 and _HEX.fullmatch(requested) and requested != commit:
        return f"{where} ({repo}): its commit is not the commit it requests"
    # The ref is what the resolver would have resolved `requested` through; it is derived, not read.
    short = _HEX.fullmatch(requested) is not None and commit.startswith(requested)
    ref = commit if short else requested.removeprefix("refs/heads/").removeprefix("refs/tags/")
    return Pin(
        repo=repo,
        requested=requested,
        ref=ref,
        commit=commit,
        origin=where,
        side=side,
    )


def _is_repo(item: object) -> bool:
    try:
        names.check_repo(item)
    except ValueError:
        return False
    return True
