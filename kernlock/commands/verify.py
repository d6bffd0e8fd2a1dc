"""`kernlock verify`: re-hash this machine's locked files in the kernel cache against kernels.lock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.commands.lock import read_lock
from kernlock.environments.environment import detect
from kernlock.errors import KernlockError
from kernlock.project import inputs as projects

if TYPE_CHECKING:
    from kernlock.sync.verify import VerifyResult

__all__ = ["verify"]


def verify(root: Path | None = None, all_environments: bool = False, full: bool = False) -> VerifyResult:
    """Re-hash every locked file in the cache; this environment's variants (``all_environments``: every
    locked variant) must be present. Returns the problems; none (``.ok``) means intact. ``full``: verify every
    signature with sigstore again, even one verified before for the same bundle and trusted root."""
    from kernlock.sync import verify as verifying

    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    not_required = None
    if all_environments:
        required = list(lock.environments)
    else:
        try:
            machine = str(detect())
        except KernlockError as err:
            machine, not_required = None, f"this machine's environment is unknown ({err})"
        required = [env for env in [machine] if env in lock.environments]
        if machine is not None and not required:
            not_required = f"this machine ({machine}) is not an environment of kernels.lock"
    trusted_root = project.signatures.trusted_root_path(project.root)
    result = verifying.verify(lock, required, trusted_root=trusted_root, full=full)
    return replace(result, not_required=not_required)
