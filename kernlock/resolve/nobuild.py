"""The words of a "no build" error: the builds a commit has, grouped one group per line; the pyproject entries
whose `when` did not apply; and a `when` pin to paste, filled from the environments that have no build."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kernlock.errors import KernlockError, ResolutionError
from kernlock.project.conditions import Condition
from kernlock.resolve import eligibility

if TYPE_CHECKING:
    from collections.abc import Callable

    from kernlock.environments.environment import Environment
    from kernlock.lock.model import LockedFile
    from kernlock.project.inputs import Requirement

    #: The versions (oldest first) of the repo with a build for every one of the environments given.
    Versions = Callable[[list[Environment]], list[str]]

__all__ = [
    "condition_for",
    "grouped_builds",
    "message",
    "pasteable_pins",
    "together",
    "unapplied_entries",
    "when_fix",
]


def together(errors: Sequence[ResolutionError]) -> ResolutionError:
    """One error for every kernel that cannot be locked, each message (and its fix) in turn; the error itself
    when there is one."""
    if len(errors) == 1:
        return errors[0]
    return ResolutionError(
        f"{len(errors)} kernels cannot be locked; each one, with its fix:\n" + "\n".join(str(err) for err in errors)
    )


def message(
    repo: str,
    rev: str,
    requirement: Requirement | None,
    commit: str,
    refused: dict[Environment, str],
    tree: dict[str, tuple[LockedFile, ...]],
    everywhere: list[Environment],
    versions: Versions,
) -> str:
    """Name the environments that cannot use the commit and why, the entries whose `when` did not apply there, the
    builds that exist (grouped), the versions that work there and a `when` pin to paste."""
    missing = ", ".join(str(env) for env in refused)
    if all(reason == eligibility.NO_BUILD for reason in refused.values()):
        lines = [f"{repo}@{rev} has no build for {missing}."]
    else:
        lines = [f"{repo}@{rev} ({commit[:12]}) cannot be loaded on {missing}:"]
        lines += [f"  {env}: {reason}" for env, reason in refused.items()]
    for env in refused:
        lines += unapplied_entries(requirement, env, rev)
    lines.append(f"  builds at {rev} ({len(tree)}):" if tree else f"  builds at {rev}: none")
    lines += grouped_builds(tree)
    try:
        with_build = versions(list(refused))
        lines.append(f"  versions with a build for {missing}: {', '.join(with_build) or 'none'}")
        if with_build:
            lines += when_fix(repo, rev, requirement, list(refused), everywhere, versions)
    except KernlockError:
        pass
    return "\n".join(lines)


def when_fix(
    repo: str,
    rev: str,
    requirement: Requirement | None,
    refused: list[Environment],
    everywhere: list[Environment],
    versions: Versions,
) -> list[str]:
    """The fix lines: entries to paste into [tool.kernlock.kernels], each with a `when` that holds only where
    ``rev`` has no build (one entry for them all when one condition can say it, else one each); a plain
    `kernlock add` for a kernel dependency or when no environment keeps ``rev``. Empty when no version helps."""
    found = versions(refused)
    if not found:
        return []
    newest = found[-1]
    generic = f"  fix: pin one, e.g. `kernlock add {repo}@{newest}`"
    others = [env for env in everywhere if env not in refused]
    if requirement is None or not others:
        return [generic + "."]
    together = condition_for(refused, others)
    extra: list[tuple[str, str]] = []
    if together is not None:
        extra.append((newest, together))
    else:
        for env in refused:
            when = condition_for([env], others)
            own = versions([env])
            if when is None or not own:
                return [generic + " for every environment."]
            extra.append((own[-1], when))
    where = "where" if len(extra) == 1 else "for the environments where"
    moves = newest in versions(list(everywhere))  # offered only where it builds for every environment
    return [
        f"  fix: pin a version with a build {where} {rev} has none, in [tool.kernlock.kernels] of pyproject.toml:",
        *pasteable_pins(requirement, rev, extra),
        *([f"  (or move every environment: `kernlock add {repo}@{newest}`)"] if moves else []),
    ]


#: An arch build's framework part (``torch212-cxx11``, ``torch-stable-abi210``, ``tvm-ffi01``; kernels 0.19's
#: ``torch-2.15-cxx11``, ``torch-stable-abi-2.11``, ``tvm-ffi-0.1``) and the rest.
_FRAMEWORK = re.compile(
    r"(torch\d+(?:-cxx11|-cxx98)?|torch-stable-abi\d+|tvm-ffi\d+"
    r"|torch-\d+\.\d+(?:-cxx11|-cxx98)?|torch-stable-abi-\d+\.\d+|tvm-ffi-\d+\.\d+)-(.+)"
)
_KEYS = ("cuda", "rocm", "torch", "os", "arch")


def grouped_builds(names: Iterable[str], indent: str = "    ") -> list[str]:
    """One line per framework (``torch212-cxx11: cu126-x86_64-linux, ...``), noarch builds on a line of their own."""
    groups: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        match = _FRAMEWORK.fullmatch(name)
        if match:
            groups.setdefault(match.group(1), []).append(match.group(2))
        else:
            groups.setdefault("noarch", []).append(name)
    order = sorted(groups, key=lambda key: (key == "noarch", key))
    return [f"{indent}{key}: {', '.join(groups[key])}" for key in order]


def unapplied_entries(requirement: Requirement | None, env: Environment, rev: str) -> list[str]:
    """The entries before the one that applied to ``env`` whose `when` did not hold there, in words."""
    if requirement is None:
        return []
    found = []
    for pin in requirement.pins:
        if pin.when is None or pin.when.matches(env):
            break
        facts = ", ".join(f"{k} {v}" for k, v in env.facts().items() if v is not None and k in _mentioned(pin.when))
        found.append(
            f'  the entry {{ rev = "{pin.rev}", when = "{pin.when.text}" }} does not apply to {env}'
            + (f" ({facts})" if facts else "")
            + f", so it got {rev}"
        )
    return found


def _mentioned(condition: Condition) -> set[str]:
    return {key for key, _, _ in condition.clauses}


def condition_for(group: Sequence[Environment], others: Iterable[Environment]) -> str | None:
    """The shortest `when` (clauses of ``cuda``, ``rocm``, ``torch``, ``os``, ``arch`` with ``==``) that holds on every
    environment of ``group`` and on none of ``others``; None when no such condition exists."""
    others = [env for env in others if env not in group]
    first = group[0].facts()
    clauses = [f"{key} == {first[key]}" for key in _KEYS if first[key] is not None]
    for size in range(1, len(clauses) + 1):
        for combo in itertools.combinations(clauses, size):
            condition = Condition.parse(" and ".join(combo))
            if all(condition.matches(env) for env in group) and not any(condition.matches(env) for env in others):
                return condition.text
    return None


def pasteable_pins(requirement: Requirement, rev: str, extra: Sequence[tuple[str, str]]) -> list[str]:
    """``"org/name" = [ ... ]`` for [tool.kernlock.kernels]: the requirement's entries with ``extra``
    ((rev, when) pairs) inserted before the first entry that asks for ``rev``."""
    entries: list[dict[str, str | bool]] = [dict(pin.as_data()) for pin in requirement.pins]
    at = next((i for i, pin in enumerate(requirement.pins) if pin.rev == rev), 0)
    entries[at:at] = [{"rev": r, "when": w} for r, w in extra]
    if requirement.trust:
        entries[0]["trust"] = True
    lines = [f"    {json.dumps(requirement.repo)} = ["]
    for entry in entries:
        body = ", ".join(f"{k} = {json.dumps(v)}" for k, v in entry.items())
        lines.append(f"      {{ {body} }},")
    return [*lines, "    ]"]
