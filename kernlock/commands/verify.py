"""`kernlock verify`: re-hash this machine's locked files in the kernel cache against kernels.lock.

Every run hashes every locked file present in the cache again. What it hashes them against (each locked entry, the
environments whose variants must be there, the trusted root) is a function of pyproject.toml, kernels.lock and the
installed torch alone, so it is remembered as the everyday commands remember their answers
(:mod:`kernlock.commands.unchanged`): while none of those files has changed, `verify` builds the entries from that
answer (each entry's shape checked again, :func:`kernlock.lock.validate.entry_from_index`) instead of parsing the lock,
its variant grammar and the machine again. The hashes checked are the lock's, whichever way they were read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernlock.commands import unchanged

if TYPE_CHECKING:
    from kernlock.lock.model import LockedKernel
    from kernlock.sync.verify import VerifyResult

__all__ = ["verify"]


def verify(root: Path | None = None, all_environments: bool = False, full: bool = False) -> VerifyResult:
    """Re-hash every locked file in the cache; this environment's variants (``all_environments``: every
    locked variant) must be present. Returns the problems; none (``.ok``) means intact. ``full``: verify every
    signature with sigstore again, even one verified before for the same bundle and trusted root."""
    from kernlock.lock.validate import entry_from_index
    from kernlock.sync import verify as verifying

    plan = unchanged.verify_plan(root, all_environments=all_environments)
    try:
        entries = tuple(entry_from_index(table) for table in plan["kernel"]) if plan is not None else None
    except (ValueError, KeyError, TypeError):
        entries = None  # an answer this kernlock does not read: derive it again
    if plan is None or entries is None:
        plan, entries = _derive(root, all_environments)
    trusted_root = Path(plan["trusted-root"]) if plan["trusted-root"] is not None else None
    result = verifying.verify_entries(entries, plan["required"], trusted_root=trusted_root, full=full)
    return result._replace(not_required=plan["not-required"])


def _derive(root: Path | None, all_environments: bool) -> tuple[dict[str, Any], tuple[LockedKernel, ...]]:
    """What `verify` checks against, from pyproject.toml, kernels.lock and this machine (remembered for the next)."""
    from kernlock.commands.lock import read_lock
    from kernlock.environments.environment import detect
    from kernlock.errors import KernlockError
    from kernlock.lock.document import entry_table
    from kernlock.project import inputs as projects

    where = projects.locate(root)
    files = unchanged.project_files(where)  # taken before anything is read
    project = projects.load(where)
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
    plan = {
        "required": required,
        "not-required": not_required,
        "trusted-root": None if trusted_root is None else str(trusted_root),
        "kernel": [entry_table(entry) for entry in lock.kernels],
    }
    unchanged.remember_verify_plan(where, files, plan, all_environments=all_environments)
    return plan, lock.kernels
