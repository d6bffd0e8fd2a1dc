"""``kernels.check.toml``: the `kernlock check --record` results kept beside a lock, one ``[[check]]`` table per
locked build and machine (docs/check.md). Read and written here, below both the command that records them
(:mod:`kernlock.commands.check.report`) and run-time activation, which copies the entries of the builds a model was
computed with into the model's folder (:mod:`kernlock.runtime.provenance`).

A file that does not read as such tables is refused with its name; it is written atomically, sorted by its key.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from kernlock.errors import ProjectError
from kernlock.util.atomic import write_text_atomic

__all__ = ["FILE_NAME", "KEY", "dumps", "key_of", "read", "write"]

FILE_NAME = "kernels.check.toml"
HEADER = "# Written by `kernlock check --record`: numerical parity of locked builds, per machine. Do not edit."
#: What identifies an entry: a build (repo, commit, variant) on a machine (environment, device).
KEY = ("repo", "commit", "variant", "environment", "device")


def key_of(entry: dict[str, Any]) -> tuple[str, ...]:
    return tuple(entry[k] for k in KEY)


def read(path: Path) -> list[dict[str, Any]]:
    """The entries of ``path`` (none when it does not exist); a file of another shape is an error."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ProjectError(
            f"{path}: cannot read it ({err})", fix="delete it and run `kernlock check --record` again"
        ) from err
    entries = data.get("check", [])
    if set(data) - {"check"} or not isinstance(entries, list) or not all(_valid(e) for e in entries):
        raise ProjectError(
            f"{path} is not a `kernlock check --record` file", fix="delete it and run `kernlock check --record` again"
        )
    return entries


def _valid(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k), str) for k in (*KEY, "result"))
        and isinstance(entry.get("cases", []), list)
        and isinstance(entry.get("speed", []), list)
        and all(isinstance(s, dict) and isinstance(s.get("case"), str) for s in entry.get("speed", []))
    )


def dumps(entries: list[dict[str, Any]]) -> str:
    """The file's text for ``entries``: sorted by key, each ``cases`` and ``speed`` list one inline table per line."""
    import tomlkit

    document = tomlkit.document()
    document.add(tomlkit.comment(HEADER.removeprefix("# ")))
    tables = tomlkit.aot()
    for entry in sorted(entries, key=key_of):
        table = tomlkit.table()
        for name, item in entry.items():
            if name in ("cases", "speed"):
                array = tomlkit.array()
                array.multiline(True)
                for case in item:
                    inline = tomlkit.inline_table()
                    inline.update(case)
                    array.append(inline)
                table[name] = array
            else:
                table[name] = item
        tables.append(table)
    document["check"] = tables
    return tomlkit.dumps(document)


def write(path: Path, entries: list[dict[str, Any]]) -> Path:
    """Write ``entries`` to ``path`` atomically; returns ``path``."""
    write_text_atomic(path, dumps(entries))
    return path
