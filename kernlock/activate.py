"""``import kernlock.activate`` as the first line of a program: every Hub kernel load honours kernels.lock.

Importing this module makes ``kernlock.activate`` name the module instead of the function; the module is callable,
so ``kernlock.activate(lockfile=..., mode=...)`` keeps working after ``import kernlock.activate`` (and inside
``kernlock run``, which imports it in every process).
"""

import sys
import types

from kernlock import runtime


class _CallableModule(types.ModuleType):
    def __call__(self, lockfile=None, mode=None):
        """Same as :func:`kernlock.runtime.activate`."""
        return runtime.activate(lockfile=lockfile, mode=mode)


sys.modules[__name__].__class__ = _CallableModule
runtime.activate()
