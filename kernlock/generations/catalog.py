"""The kernels loader generations: one id each (``kernels-0.15``, ``kernels-0.17``), the name that the probe,
`kernlock env`, a lock's ``variant-rule`` and tests/compat/matrix.toml all use.

A generation is a range of kernels releases whose loader kernlock hooks the same way: its adapter is the module
:func:`module_name` names under :mod:`kernlock.runtime.loaders`. Ranges and tested versions come from the matrix
(:mod:`kernlock.generations.supported`, generated); adding a generation is one adapter module and one matrix set.
Only the standard library and ``packaging``: the resolver and the lock may import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from kernlock.generations import supported

__all__ = ["GENERATIONS", "Generation", "for_kernels", "get", "module_name", "untested"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Generation:
    """One kernels loader generation: its id, the kernels releases it spans, those tested, and whether its
    loader knows kernel dependencies (``kernel-depends``)."""

    id: str
    minimum: str
    below: str
    tested: tuple[str, ...]
    kernel_dependencies: bool

    @property
    def kernels(self) -> str:
        """Its kernels range as a requirement specifier (``>=0.17.2,<0.18``)."""
        return f">={self.minimum},<{self.below}"

    def contains(self, kernels: str) -> bool:
        """Whether kernels release ``kernels`` falls in this generation's range."""
        return Version(self.minimum) <= Version(kernels) < Version(self.below)


#: Every generation kernlock has an adapter for, newest first.
GENERATIONS: tuple[Generation, ...] = tuple(
    Generation(id=gen, minimum=low, below=high, tested=tested, kernel_dependencies=deps)
    for gen, low, high, tested, deps in supported.GENERATIONS
)


def get(generation: str) -> Generation | None:
    """The generation named ``generation`` (``kernels-0.17``), or None."""
    return next((g for g in GENERATIONS if g.id == generation), None)


def for_kernels(kernels: str | None) -> Generation | None:
    """The generation claimed for kernels release ``kernels``: the one whose range, derived from the releases the
    compatibility matrix tests, holds it. None for a release outside every range (a future kernels, one older than
    any tested, an unreadable version): such a loader is never hooked by seam names alone."""
    try:
        return next((g for g in GENERATIONS if g.contains(kernels)), None) if kernels else None
    except InvalidVersion:
        return None


def untested(kernels: str | None) -> str:
    """Why kernels release ``kernels`` has no generation, as a clause (``it is newer than every release kernlock
    was tested with, 0.15.2 - 0.19.1``): the fallback's warning, `kernlock env`, the CLI's warning line."""
    newest, oldest = GENERATIONS[0], GENERATIONS[-1]
    tested = f"every release kernlock was tested with, {oldest.minimum} - {newest.tested[-1]}"
    ranges = ", ".join(f"{g.minimum} - <{g.below}" for g in reversed(GENERATIONS))
    try:
        release = Version(kernels or "")
    except InvalidVersion:
        return f"its version ({kernels or 'none'}) cannot be read; kernlock was tested with kernels {ranges}"
    if release >= Version(newest.below) or release < Version(oldest.minimum):
        return f"it is {'newer' if release >= Version(newest.below) else 'older'} than {tested}"
    return f"it is outside the ranges kernlock was tested with ({ranges})"


def module_name(generation: str) -> str:
    """The adapter module of ``generation`` under :mod:`kernlock.runtime.loaders` (``kernels-0.17`` ->
    ``kernels_0_17``)."""
    return generation.replace("-", "_").replace(".", "_")
