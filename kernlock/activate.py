"""``import kernlock.activate`` as the first line of a program: every Hub kernel load honours kernels.lock.

Importing this module makes ``kernlock.activate`` name the module instead of the function; the module is callable,
so ``kernlock.activate(lockfile=..., mode=...)`` keeps working after ``import kernlock.activate`` (and inside
``kernlock run``, which imports it in every process).
"""

import os
import sys
import types

from kernlock.runtime import activation as runtime

__all__: list[str] = []  # importing it is the API; calling it is kernlock.runtime.activation.activate


class _CallableModule(types.ModuleType):
    def __call__(self, lockfile: str | os.PathLike[str] | None = None, mode: str | None = None) -> runtime.Settings:
        """Same as :func:`kernlock.runtime.activation.activate`."""
        return runtime.activate(lockfile=lockfile, mode=mode)


sys.modules[__name__].__class__ = _CallableModule
runtime.activate()
