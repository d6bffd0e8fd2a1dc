"""Carry an in-process activation into the children multiprocessing starts fresh (docs/clusters.md).

A ``spawn`` or ``forkserver`` child (and so ``torch.multiprocessing.spawn``) is a new interpreter that imports the
parent's main module as ``__mp_main__``: what the parent did under ``if __name__ == "__main__":``, such as
``kernlock.activate()``, is not done again there. multiprocessing sends every child a dict of preparation data
before it imports anything of the parent's; kernlock adds one entry to it whose unpickling activates the child with
the parent's lock and mode, before the child's main module runs. ``fork`` children share the parent's memory and
need nothing.
"""

from __future__ import annotations

import os
import sys

from kernlock import activated

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

__all__ = ["KEY", "Carried", "install", "reactivate"]

#: The entry of multiprocessing's preparation data (``spawn.prepare`` ignores keys it does not know).
KEY = "kernlock_activation"


class Carried:
    """The parent's activation, pickled into a child's preparation data: unpickling it activates the child."""

    __slots__ = ("lockfile", "mode", "verify")

    def __init__(self, lockfile: str, mode: str, verify: str) -> None:
        self.lockfile, self.mode, self.verify = lockfile, mode, verify

    def __reduce__(self) -> tuple[Any, tuple[str, str, str]]:
        return reactivate, (self.lockfile, self.mode, self.verify)


def reactivate(lockfile: str, mode: str, verify: str) -> None:
    """In the child: activate as the parent was (one line and exit 1 if that is no longer possible)."""
    from kernlock import runtime
    from kernlock.errors import ActivationError

    if verify != "receipt":
        os.environ.setdefault("KERNLOCK_VERIFY", verify)
    try:
        runtime.activate(lockfile=lockfile, mode=mode)
    except ActivationError as err:
        sys.stderr.write(f"error: {err}\n")
        sys.stderr.flush()
        os._exit(1)


def install(module: ModuleType) -> None:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` so that every child it prepares carries the activation."""
    original = module.get_preparation_data
    if getattr(original, "__kernlock__", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        current = activated.settings()
        if current is not None:
            data[KEY] = Carried(current.lockfile, current.mode, current.verify)
        return data

    get_preparation_data.__kernlock__ = True  # type: ignore[attr-defined]  # marks the wrapper
    get_preparation_data.__wrapped__ = original  # type: ignore[attr-defined]
    module.get_preparation_data = get_preparation_data  # type: ignore[attr-defined]  # a ModuleType here
