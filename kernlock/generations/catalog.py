"""The kernels loader generations: one id each (``kernels-0.15``, ``kernels-0.17``), the name that the probe,
`kernlock env`, a lock's ``variant-rule`` and tests/compat/matrix.toml all use.

A generation is a range of kernels releases whose loader kernlock hooks the same way: its adapter is the module
:func:`module_name` names under :mod:`kernlock.runtime.loaders`. Ranges and tested versions come from the matrix
(:mod:`kernlock.generations.supported`, generated); adding a generation is one adapter module and one matrix set.
Only the standard library and ``packaging``: the resolver and the lock may import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from kernlock.generations import supported

__all__ = ["GENERATIONS", "Generation", "get", "module_name"]


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


def module_name(generation: str) -> str:
    """The adapter module of ``generation`` under :mod:`kernlock.runtime.loaders` (``kernels-0.17`` ->
    ``kernels_0_17``)."""
    return generation.replace("-", "_").replace(".", "_")
