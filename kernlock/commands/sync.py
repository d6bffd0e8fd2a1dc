"""`kernlock sync`: this machine's locked files in the kernel cache, verified (re-locking a stale lock first)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.commands import unchanged
from kernlock.commands.lock import LockResult, lock_project, read_lock
from kernlock.environments.environment import detect
from kernlock.errors import DamagedLockError, KernlockError, LockError, NoEnvironmentError, UnreachableError
from kernlock.lock import index as lockindex
from kernlock.lock.model import Lock
from kernlock.project import inputs as projects
from kernlock.project.inputs import Project, Upgrade
from kernlock.util import hfenv, interrupt
from kernlock.util.sharing import cache_lock, kernlock_folder

if TYPE_CHECKING:
    from kernlock.hub.client import Hub
    from kernlock.sync import engine as syncing

__all__ = ["NO_TORCH", "NotSynced", "not_synced_here", "sync", "sync_after_add", "this_environment"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NotSynced:
    """What `sync` (and `add`'s sync) did on a machine that loads none of the lock's builds: nothing, and why."""

    why: str  # "this machine loads no kernels (torch is not installed)", or the lock does not cover it
    no_torch: bool  # this machine has no environment of its own: it locks for others and can fill a cache for them
    relocked: str | None = None  # why kernels.lock was re-written first (plain `sync`)


NO_TORCH = "this machine loads no kernels (torch is not installed)"


def this_environment(lock: Lock) -> str:
    """This machine's environment string, which must be one the lock covers."""
    env = str(detect())
    if env not in lock.environments:
        raise LockError(
            f"this machine ({env}) is not an environment of kernels.lock (it covers {', '.join(lock.environments)})",
            fix="add it to `environments` in [tool.kernlock] and run `kernlock lock`, or fill a shared cache with "
            "`kernlock sync --all-environments`",
        )
    return env


def _fix_also(err: KernlockError, more: str) -> str:
    """``err``'s fix, then ``more`` as a sentence of its own (``more`` alone when ``err`` names no fix): the fix
    of an error sync re-raises with what only sync can say."""
    return f"{err.fix}. {more}" if err.fix else more


def _lock_for_sync(project: Project, locked: bool, frozen: bool, offline: bool, hub: Hub | None) -> LockResult:
    """The lock to sync: as is (``frozen``), checked (``locked``, ``offline``), or re-locked when stale, under the
    project lock (``.kernlock/lock.lock``): 8 ranks syncing a stale lock at once resolve it once and write it once,
    and every rank syncs the same commits (where the filesystem cannot lock, each re-locks). A lock that fails its
    checks is refused in every mode: only `kernlock lock` repairs it (it may not move a pin)."""
    if frozen:
        return LockResult(lock=read_lock(project), written=False, reason=None)
    if locked or offline:
        try:
            return lock_project(project, Upgrade(), check=True, hub=hub)
        except LockError as err:
            if not offline or locked or isinstance(err, DamagedLockError):
                raise
            raise LockError(
                err.what,
                why=err.why,
                fix=_fix_also(
                    err,
                    "`--offline` cannot re-lock: run `kernlock lock` online first, or use the lock as it is with "
                    "`kernlock sync --offline --frozen`",
                ),
            ) from err
    try:
        return lock_project(project, Upgrade(), check=True, hub=hub)  # up to date: no project lock, no request
    except DamagedLockError:
        raise
    except LockError:
        pass  # stale: one process at a time re-locks; the others wait, then read what it wrote (no request)
    with cache_lock(kernlock_folder(project.root) / "lock.lock"):
        return lock_project(project, Upgrade(), hub=hub, repair=False)


def sync(
    root: Path | None = None,
    all_environments: bool = False,
    locked: bool = False,
    frozen: bool = False,
    offline: bool = False,
    hub: Hub | None = None,
    progress: bool = True,
) -> syncing.SyncReport | NotSynced:
    """Download and verify the locked files this environment needs (``all_environments``: every locked one).

    Default: re-lock first when kernels.lock is stale; ``locked``: fail instead; ``frozen``: use it as is.
    ``offline``: no request; verify what is in the cache and fail naming anything missing or corrupt.
    On a machine without torch (no environment of its own) the lock is checked as above and nothing is fetched:
    :class:`NotSynced` says so (``all_environments`` still fills the cache for every locked environment).
    """
    from kernlock.sync import engine as syncing

    if locked and frozen:
        raise LockError("--locked and --frozen cannot be combined: --locked checks kernels.lock, --frozen trusts it.")
    interrupt.reset()
    offline = offline or hfenv.offline()
    where = projects.locate(root)
    remembered = unchanged.remembers_sync(all_environments=all_environments, offline=offline)
    files = unchanged.project_files(where) if remembered else {}
    project = projects.load(where)
    trusted_root = project.signatures.trusted_root_path(project.root)
    try:
        result = _lock_for_sync(project, locked, frozen, offline, hub)
        try:
            environments = list(result.lock.environments) if all_environments else [this_environment(result.lock)]
        except NoEnvironmentError:  # a machine that only locks: the lock was checked (or re-locked), nothing to fetch
            return NotSynced(why=NO_TORCH, no_torch=True, relocked=result.reason if result.written else None)
        if remembered:
            files.update(unchanged.sync_files(result.lock, environments, syncing.cache_dir()))
        report = syncing.sync(
            result.lock, environments, hub=hub, offline=offline, progress=progress, trusted_root=trusted_root
        )
    except UnreachableError as err:  # only sync's own words may point to its offline mode
        raise UnreachableError(
            err.what,
            why=err.why,
            fix=_fix_also(
                err, "What is already synced still loads: `kernlock sync --offline --frozen` checks it with no network"
            ),
        ) from err
    lockindex.prime(project.lockfile, result.lock, environments)  # the first process after this reads no lock
    quiet = not result.written and report.receipts_refused is None
    if remembered and quiet and all(v.status == "present" for v in report.variants):  # nothing fetched or repaired
        found = unchanged.Synced(
            variants=len(report.variants),
            kernels=len(report.kernels),
            environments=report.environments,
            cache=str(report.cache),
        )
        unchanged.remember_sync(where, frozen, files, found)
    return replace(report, relocked=result.reason if result.written else None)


def sync_after_add(lock: Lock, hub: Hub | None = None, root: Path | None = None) -> syncing.SyncReport | NotSynced:
    """Sync this machine with the lock `add` just wrote (in the project at ``root``, None: the enclosing one);
    :class:`NotSynced` when this machine loads none of its builds (no torch, or an environment the lock lacks)."""
    from kernlock.sync import engine as syncing

    project = projects.load(projects.locate(root))
    trusted_root = project.signatures.trusted_root_path(project.root)
    try:
        environment = str(detect())
    except NoEnvironmentError:
        return NotSynced(why=NO_TORCH, no_torch=True)
    if environment not in lock.environments:
        return NotSynced(why="this machine is not one of the lock's environments", no_torch=False)
    return syncing.sync(lock, [environment], hub=hub, offline=hfenv.offline(), trusted_root=trusted_root)


def not_synced_here(lock: Lock) -> tuple[str, list[str]] | None:
    """`lock` downloads nothing: this machine's environment and the kernels of ``lock`` it would load that are not
    synced here (an offline run would fail on them), or None when there are none or the lock does not cover this
    machine."""
    from kernlock.sync import integrity

    try:
        env = str(detect())
    except KernlockError:
        return None
    missing = [
        f"{kernel.repo} {kernel.requested} {kernel.commit[:8]}"
        for kernel in lock.kernels
        if (variant := kernel.variant_for(env)) is not None and not integrity.is_synced(kernel, variant)
    ]
    return (env, missing) if missing else None
