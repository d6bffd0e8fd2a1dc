"""`when` conditions of pyproject pins: clauses like ``cuda == 12.8`` over an environment's torch, cuda, rocm, os
and arch, joined by ``and`` (docs/pyproject.md)."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from kernlock.errors import SpecError

if TYPE_CHECKING:
    from kernlock.environments.environment import Environment

__all__ = ["Condition"]

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_CLAUSE = re.compile(r"\s*(torch|cuda|rocm|os|arch)\s*(==|!=|<=|>=|<|>)\s*([A-Za-z0-9_.\-]+)\s*")
_VERSIONED = {"torch", "cuda", "rocm"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """A `when` expression: clauses like ``cuda == 12.8`` joined by ``and``."""

    text: str
    clauses: tuple[tuple[str, str, Version | str], ...]

    @classmethod
    def parse(cls, text: str) -> Condition:
        """Parse a `when` string; raise SpecError that shows the accepted form."""
        clauses = []
        for part in re.split(r"\s+and\s+", text.strip()):
            match = _CLAUSE.fullmatch(part)
            if not match:
                raise SpecError(
                    f"invalid `when` condition '{text}'",
                    why="expected clauses like `cuda == 12.8` or `torch >= 2.10` over torch, cuda, rocm, os, arch, "
                    "joined by `and`",
                )
            key, op, raw = match.groups()
            value: Version | str = raw
            if key in _VERSIONED:
                try:
                    value = Version(raw)
                except ValueError as err:  # InvalidVersion, or a number past int()'s 4300-digit limit
                    raise SpecError(f"invalid version '{raw}' in `when` condition '{text}'.") from err
            elif op not in ("==", "!="):
                raise SpecError(f"`when` condition '{text}'", why=f"{key} can only be compared with == or !=")
            clauses.append((key, op, value))
        return cls(text=" and ".join(f"{k} {o} {v}" for k, o, v in clauses), clauses=tuple(clauses))

    def matches(self, env: Environment) -> bool:
        """True when every clause holds on ``env``; a fact the environment lacks (cuda on a CPU) only
        satisfies ``!=``."""
        facts = env.facts()
        for key, op, value in self.clauses:
            fact = facts[key]
            if fact is None:
                if op != "!=":
                    return False
                continue
            if not _OPS[op](fact, value):
                return False
        return True
