"""The kernels library's own lock: its JSON ``kernels.lock`` and the ``[tool.kernels.dependencies]`` table.

kernlock reads both (to recognise a project that uses them and to import it, :mod:`kernlock.resolve.interop`) and
writes the JSON format (:func:`export`, for a package whose code calls ``kernels.load_kernel``/``get_locked_kernel``
with a lock file it ships); it never overwrites a JSON lock (:func:`kernlock.commands.lock.refuse_json_lock`). The
format, as kernels 0.17 writes and reads it (unknown keys are refused there, so nothing can be added)::

    [{"dependency": {"repo-id": "org/name", "version": 1}, "lock": {"commit": "<40 hex>"}}, ...]

``"revision": "<branch, tag or sha>"`` stands for ``"version"`` when the dependency is not a version branch.
Older kernels (before kernel repositories) wrote ``[{"repo_id": ..., "sha": ..., "variants": {...}}]``: read too.
The kernels library's lock holds one commit per kernel (and no variant, file or environment), so a kernel that
kernlock locks to different commits on different environments (``when`` pins) needs an environment to export.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernlock.errors import ArgumentError, ExportError, JsonLockError, ProjectError
from kernlock.lock.model import Lock
from kernlock.util import names
from kernlock.util.atomic import write_text_atomic

__all__ = [
    "FORMATS",
    "MOVED_NAME",
    "JsonLockPin",
    "export",
    "json_lock_error",
    "kernels_dependencies",
    "kernels_pins",
    "looks_like_json_lock",
    "parse_json_lock",
    "render_json_lock",
]


#: Where `kernlock import` moves the kernels library's JSON lock (byte for byte).
MOVED_NAME = "kernels.lock.json"
#: The formats `kernlock export` writes.
FORMATS = ("kernels",)
_VERSION = re.compile(r"v(\d{1,4})")
_CONFLICT_MARKERS = ("<<<<<<< ", "=======", ">>>>>>> ", "||||||| ")


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonLockPin:
    """One entry of a kernels JSON lock: a repo, the revision it was asked at (``vN`` for a version) and its commit."""

    repo: str
    rev: str
    commit: str


def looks_like_json_lock(text: str) -> bool:
    """Whether lock text is JSON (the kernels library's lock) rather than TOML (kernlock's), also when it is cut
    off or holds git merge-conflict markers (``[{`` or ``[]`` never starts a TOML document)."""
    if "<<<<<<< " in text:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(_CONFLICT_MARKERS))
    start = text.lstrip()[:1]
    if start == "{" or (start == "[" and text.lstrip()[1:].lstrip()[:1] in ("{", "]")):
        return True
    if start != "[":
        return False
    try:
        return isinstance(json.loads(text), list)
    except (ValueError, RecursionError):
        return False


def json_lock_error(where: str) -> JsonLockError:
    """The error for a kernels JSON lock where kernlock expects its own: kept as it is, and the migration named."""
    return JsonLockError(
        f"{where} is the kernels library's JSON lock (`kernels lock`), not kernlock's; kernlock does not overwrite it",
        fix=f"Run `kernlock import` to migrate it (its commits are kept, the JSON lock is moved to {MOVED_NAME}), or "
        "remove it to start over",
    )


def parse_json_lock(text: str, where: str) -> list[JsonLockPin]:
    """The pins of a kernels JSON lock; ProjectError naming the entry that is not one."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ProjectError(f"{where} is not valid JSON ({err})", fix="restore it from version control") from None
    if not isinstance(data, list):
        raise ProjectError(f"{where}: expected a JSON list of locked kernels", fix="restore it from version control")
    pins = []
    for index, item in enumerate(data):
        try:
            pins.append(_pin(item))
        except (ValueError, TypeError, KeyError) as err:
            raise ProjectError(
                f"{where}: entry #{index + 1} is not a locked kernel ({err})", fix="restore it from version control"
            ) from None
    return pins


def _pin(item: object) -> JsonLockPin:
    if not isinstance(item, dict):
        raise ValueError("not an object")
    if "dependency" in item:
        dep, lock = item["dependency"], item["lock"]
        repo, commit = dep["repo-id"], lock["commit"]
        version, revision = dep.get("version"), dep.get("revision")
        if isinstance(version, int) and not isinstance(version, bool) and 0 <= version < 10_000:
            rev = f"v{version}"
        elif version is None and isinstance(revision, str):
            rev = revision
        else:
            raise ValueError("no integer `version` or string `revision`")
    else:  # the format of kernels before 0.13
        repo, commit, rev = item["repo_id"], item["sha"], item["sha"]
    names.check_repo(repo)
    names.check_commit(commit)
    names.check_ref(rev)
    return JsonLockPin(repo=repo, rev=rev, commit=commit)


def render_json_lock(pins: list[JsonLockPin]) -> str:
    """The kernels library's lock text for ``pins`` (its own bytes: two-space indent, one entry per pin)."""
    entries = []
    for pin in pins:
        match = _VERSION.fullmatch(pin.rev)
        dependency: dict[str, object] = {"repo-id": pin.repo}
        if match:
            dependency["version"] = int(match.group(1))
        else:
            dependency["revision"] = pin.rev
        entries.append({"dependency": dependency, "lock": {"commit": pin.commit}})
    return json.dumps(entries, indent=2)  # as kernels writes it: no newline at the end


def kernels_dependencies(data: dict[str, Any], pyproject: Path) -> dict[str, str]:
    """``[tool.kernels.dependencies]`` of the parsed ``pyproject`` (``data``) as repo -> ``vN`` (empty when there
    is none); :func:`kernlock.project.inputs.load` reads it with the rest of the file."""
    tool = data.get("tool")
    kernels = tool.get("kernels") if isinstance(tool, dict) else None
    table = kernels.get("dependencies") if isinstance(kernels, dict) else None
    if not isinstance(table, dict):
        return {}
    found: dict[str, str] = {}
    for repo, version in table.items():
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 10_000:
            raise ProjectError(
                f"{pyproject}: [tool.kernels.dependencies] {repo} = {version!r} is not a version number (kernels "
                'wants e.g. "org/name" = 1)',
                fix="fix it, then run `kernlock import`",
            )
        try:
            names.check_repo(repo)
        except ValueError as err:
            raise ProjectError(f"{pyproject}: [tool.kernels.dependencies] {repo!r}: {err}.") from None
        twin = next((other for other in found if other.casefold() == repo.casefold()), None)
        if twin is not None:
            raise ProjectError(
                f"{pyproject}: [tool.kernels.dependencies] names {twin} twice (as {repo!r} too; repo ids ignore "
                "letter case)",
                fix="keep one, then run `kernlock import`",
            )
        found[repo] = f"v{version}"
    return found


def kernels_pins(lock: Lock, environment: str | None = None) -> list[JsonLockPin]:
    """One pin per locked repo (of ``environment``'s entries when given), ordered by repo."""
    if environment is not None and environment not in lock.environments:
        raise ArgumentError(
            f"--environment {environment}",
            why=f"kernels.lock covers {', '.join(lock.environments)}",
            fix="pick one of them",
        )
    pins: dict[str, JsonLockPin] = {}
    for entry in lock.kernels:
        if environment is not None and environment not in entry.environments:
            continue
        pin = JsonLockPin(repo=entry.repo, rev=entry.requested, commit=entry.commit)
        other = pins.setdefault(entry.repo, pin)
        if other.commit != pin.commit:
            raise ExportError(
                f"kernels.lock locks {entry.repo} to {other.commit[:12]} ({other.rev}) and {pin.commit[:12]} "
                f"({pin.rev}) on different environments",
                why="the kernels library's lock holds one commit per kernel",
                fix="choose with `kernlock export --format kernels --environment ENV`",
            )
    return [pins[repo] for repo in sorted(pins)]


def export(lock: Lock, fmt: str, output: Path, environment: str | None = None) -> list[JsonLockPin]:
    """Write ``lock`` in format ``fmt`` to ``output`` (atomically); returns what was written."""
    if fmt not in FORMATS:
        raise ProjectError(f"unknown export format {fmt!r}", fix=f"pick a supported one: {', '.join(FORMATS)}")
    text = _existing(output)
    if 'created-by = "kernlock"' in text:
        raise ProjectError(
            f"{output} is kernlock's own lock", fix="export to another file, e.g. `-o kernels.lock.json`"
        )
    if text.strip() and not looks_like_json_lock(text):
        raise ProjectError(
            f"{output} exists and is not a kernels lock",
            why="kernlock does not overwrite it",
            fix="export to another path, e.g. `-o kernels.lock.json`",
        )
    pins = kernels_pins(lock, environment)
    write_text_atomic(output, render_json_lock(pins))
    return pins


def _existing(path: Path) -> str:
    """The text of what ``output`` would replace ("" when there is nothing to read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
