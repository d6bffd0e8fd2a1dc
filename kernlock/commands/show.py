"""`kernlock show`: one row per lock entry, with this machine's variant and whether it is synced."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kernlock.commands import unchanged
from kernlock.project.location import locate

if TYPE_CHECKING:
    from kernlock.lock.model import Signature

__all__ = ["ShowResult", "show"]


def _signer(signature: Signature | str | None) -> str | None:
    """Who signed, in a few words: ``owner/repo workflow.yaml@ref``, ``"unsigned"``, or None (not recorded)."""
    from kernlock.lock.model import Signature

    if not isinstance(signature, Signature):
        return signature
    workflow = signature.signer.split("/.github/workflows/", 1)[-1]
    return f"{signature.repository} {workflow}"


class ShowResult(NamedTuple):
    """`show`'s table: one row per lock entry, and why the lock is stale or rows have no variant here (a NamedTuple:
    a remembered `show` imports no dataclasses)."""

    rows: list[dict[str, Any]]  # one per lock entry
    stale: str | None  # why kernels.lock no longer matches pyproject.toml, or None
    #: Why rows have no variant here (None when every row has one): no torch, an environment the lock does not
    #: cover, or entries locked for other environments only.
    no_variant: str | None = None


def show(root: Path | None = None) -> ShowResult:
    """One row per lock entry: kernel, requested, resolved ref, commit, this environment's variant, synced; and
    whether the lock is stale. Answered from memory while nothing it read has changed (:mod:`.unchanged`)."""
    where = locate(root)
    kept = unchanged.shown(where)
    if kept is not None:
        try:
            return ShowResult(**kept)
        except TypeError:
            pass  # remembered by another kernlock: derived again
    files = unchanged.project_files(where)
    result = _show(where, files)
    unchanged.remember_show(where, files, result._asdict())
    return result


def _show(where: Path, files: dict[str, Any]) -> ShowResult:
    """The rows, from the lock; adds to ``files`` the identity of every cache path it checks, before checking."""
    # The lock model, TOML and this machine's detection only here, when the answer is not remembered.
    from kernlock.commands.lock import read_lock, stale_reason, target_environments
    from kernlock.commands.sync import NO_TORCH
    from kernlock.environments.environment import detect
    from kernlock.errors import KernlockError, NoEnvironmentError
    from kernlock.lock import document
    from kernlock.project import inputs as projects
    from kernlock.sync import cache, integrity

    project = projects.load(where)
    lock = read_lock(project)
    try:
        stale = stale_reason(project, lock, target_environments(project))
    except KernlockError as err:
        stale = str(err)
    no_variant = None
    try:
        env: str | None = str(detect())
    except NoEnvironmentError:
        env, no_variant = None, f"{NO_TORCH}; it locks for {', '.join(lock.environments) or 'no environment'}"
    except KernlockError as err:
        env, no_variant = None, str(err)
    if env is not None and env not in lock.environments:
        no_variant = (
            f"this machine ({env}) is not an environment of kernels.lock; add it to `environments` in [tool.kernlock] "
            "and run `kernlock lock`"
        )
    variants = [(kernel, kernel.variant_for(env) if env else None) for kernel in lock.kernels]
    files.update(unchanged.variant_files([(k, v) for k, v in variants if v is not None], cache.cache_dir()))
    rows = []
    for kernel, variant in variants:
        rows.append(
            {
                **document.entry_view(kernel),
                "environment": env,
                "variant": variant.name if variant else None,
                "synced": integrity.is_synced(kernel, variant) if variant else None,
                "path": str(cache.variant_path(kernel, variant)) if variant else None,
                "signer": _signer(variant.signature) if variant else None,
                "signature": document.plain(variant.signature) if variant else None,
            }
        )
    elsewhere = sorted({str(row["repo"]) for row in rows if row["variant"] is None})
    if no_variant is None and elsewhere:
        no_variant = f"{', '.join(elsewhere)}: an entry locked for other environments than this machine's ({env})"
    return ShowResult(rows=rows, stale=stale, no_variant=no_variant if rows else None)
