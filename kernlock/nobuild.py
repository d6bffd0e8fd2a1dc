"""The words of a "no build" error: the builds a commit has, grouped one group per line; the pyproject entries
whose `when` did not apply; and a `when` pin to paste, filled from the environments that have no build."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kernlock.conditions import Condition

if TYPE_CHECKING:
    from kernlock.environment import Environment
    from kernlock.project import Requirement

__all__ = ["condition_for", "grouped_builds", "pasteable_pins", "unapplied_entries"]

#: An arch build's framework part (``torch212-cxx11``, ``torch-stable-abi210``, ``tvm-ffi01``) and the rest.
_FRAMEWORK = re.compile(r"(torch\d+(?:-cxx11|-cxx98)?|torch-stable-abi\d+|tvm-ffi\d+)-(.+)")
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
