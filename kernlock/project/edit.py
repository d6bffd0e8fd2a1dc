"""Edits of pyproject.toml (`add`, `remove`, `import`): through tomlkit, so that comments, order and formatting of
everything else in the file are kept; an edit is written only once a re-read shows it holds exactly what was meant.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kernlock.errors import ProjectError
from kernlock.project.inputs import read_document
from kernlock.util.atomic import write_text_atomic

if TYPE_CHECKING:
    import tomlkit

    from kernlock.project.inputs import Project

__all__ = ["remove_kernels_dependencies", "remove_requirements", "set_requirements"]


def set_requirements(
    project: Project, revs: dict[str, tuple[str, bool]], scopes: dict[str, tuple[str, ...]] | None = None
) -> None:
    """Record each ``repo = rev`` (``{ rev, trust = true }`` when trusted by hand, ``environments = [...]`` for a
    repo of ``scopes``) in pyproject.toml, keeping everything else in the file as it is. Nothing to record writes
    nothing (not even an empty table).

    An entry of the same repo in another letter case is replaced (repo ids are not case-sensitive, and `load`
    refuses a table that names one repo twice)."""
    if not revs:
        return
    import tomlkit

    doc = read_document(project.pyproject) if project.pyproject.exists() else tomlkit.document()
    expected = doc.unwrap()
    kernels = _kernels_table(doc)
    wanted = expected.setdefault("tool", {}).setdefault("kernlock", {}).setdefault("kernels", {})
    for repo, (rev, trust) in revs.items():
        for twin in [key for key in kernels if key != repo and key.casefold() == repo.casefold()]:
            del kernels[twin]
            del wanted[twin]
        table: dict[str, Any] = {"rev": rev, **({"trust": True} if trust else {})}
        if scopes and repo in scopes:
            table["environments"] = list(scopes[repo])
        if len(table) > 1:
            entry = tomlkit.inline_table()
            entry.update(table)
            kernels[repo] = entry
        else:
            kernels[repo] = rev
        wanted[repo] = table if len(table) > 1 else rev
    _write_edit(project, doc, expected)


def remove_requirements(project: Project, repos: list[str]) -> None:
    """Drop ``repos`` from [tool.kernlock.kernels], keeping the rest of pyproject.toml as it is."""
    if not repos:
        return
    doc = read_document(project.pyproject)
    expected = doc.unwrap()
    kernels = _kernels_table(doc)
    for repo in dict.fromkeys(repos):  # `kernlock remove a/b a/b` names it twice
        del kernels[repo]
        del expected["tool"]["kernlock"]["kernels"][repo]
    _write_edit(project, doc, expected)


def _write_edit(project: Project, doc: tomlkit.TOMLDocument, expected: dict[str, Any]) -> None:
    """Write the edited ``doc`` once a re-read shows it holds ``expected``: in some layouts tomlkit puts a new
    table where it captures the lines after it (dotted `tool.x.y = ...` keys) or writes a key twice (a table split
    around another), which would move the user's other settings or break the file."""
    import tomlkit
    import tomlkit.exceptions

    text = tomlkit.dumps(doc)
    try:
        written = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.TOMLKitError:
        written = None
    if written is None or _comparable(written) != _comparable(expected):
        raise ProjectError(
            f"{project.pyproject}: kernlock cannot edit [tool.kernlock.kernels] in this file's layout without "
            "moving other settings",
            fix='make the change by hand (e.g. "org/name" = "v1" under a [tool.kernlock.kernels] section) and run '
            "the command again",
        )
    write_text_atomic(project.pyproject, text)


def _comparable(data: Any) -> str:
    return json.dumps(data, sort_keys=True, default=str)


def _kernels_table(doc: tomlkit.TOMLDocument) -> Any:
    """[tool.kernlock.kernels], made where missing (inline where its parent is inline: `tool = { kernlock = {} }`)."""
    import tomlkit
    from tomlkit.items import InlineTable

    if "tool" not in doc:
        doc["tool"] = tomlkit.table(is_super_table=True)
    tool = doc["tool"]
    if "kernlock" not in tool:
        inline = isinstance(tool, InlineTable)
        tool["kernlock"] = tomlkit.inline_table() if inline else tomlkit.table(is_super_table=True)
    kernlock = tool["kernlock"]
    if "kernels" not in kernlock:
        kernlock["kernels"] = tomlkit.inline_table() if isinstance(kernlock, InlineTable) else tomlkit.table()
    return kernlock["kernels"]


def remove_kernels_dependencies(project: Project) -> None:
    """Drop the kernels library's ``[tool.kernels.dependencies]`` (and ``[tool.kernels]`` when nothing else is left
    in it), keeping the rest of pyproject.toml as it is; `kernlock import` moved them to [tool.kernlock.kernels]."""
    doc = read_document(project.pyproject)
    expected = doc.unwrap()
    tool = doc.get("tool")
    if tool is None or "kernels" not in tool or "dependencies" not in tool["kernels"]:
        return
    del tool["kernels"]["dependencies"]
    del expected["tool"]["kernels"]["dependencies"]
    if not tool["kernels"]:
        del tool["kernels"]
        del expected["tool"]["kernels"]
    _write_edit(project, doc, expected)
