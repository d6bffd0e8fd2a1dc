"""`kernlock import` and `kernlock export`: the kernels library's own pins and lock, to and from kernlock's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.commands.lock import read_lock, stale_reason, target_environments
from kernlock.errors import LockError
from kernlock.project import inputs as projects

if TYPE_CHECKING:
    from kernlock.hub.client import Hub
    from kernlock.lock.interop import JsonLockPin
    from kernlock.resolve.interop import ImportResult

__all__ = ["export", "import_kernels"]


def import_kernels(root: Path | None = None, trust: bool = False, hub: Hub | None = None) -> ImportResult:
    """`kernlock import`: the kernels library's [tool.kernels.dependencies] and JSON lock -> kernlock's."""
    from kernlock.resolve import interop as importing

    return importing.import_project(root, trust=trust, hub=hub)


def export(root: Path | None, fmt: str, output: Path, environment: str | None = None) -> list[JsonLockPin]:
    """`kernlock export`: the locked commits in another tool's lock format, written to ``output``."""
    from kernlock.lock import interop

    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    reason = stale_reason(project, lock, target_environments(project))
    if reason is not None:  # the export would lack (or misstate) what pyproject.toml asks for
        raise LockError("kernels.lock is stale", why=reason, fix="run `kernlock lock`, then export again")
    return interop.export(lock, fmt, output, environment)
