"""Lock -> verified files in the Hugging Face cache: exactly the locked variants, in parallel, atomically.

This module orchestrates; the jobs live in their own modules: :mod:`kernlock.sync.cache` (layout, receipts, hashing),
:mod:`kernlock.sync.integrity` (is a variant intact?), :mod:`kernlock.sync.fetch` (downloads),
:mod:`kernlock.sync.verify` (re-hash everything). It also re-exports the documented library API (docs/sync.md), so
``kernlock.sync.engine`` stays the one place a user imports it from; kernlock's own run-time path imports the small
modules instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.errors import IntegrityError, NotSyncedError
from kernlock.lock.model import Lock, LockedKernel, LockedVariant
from kernlock.sync import refusals
from kernlock.sync.cache import cache_dir as cache_dir
from kernlock.sync.cache import receipts_folder, receipts_kept
from kernlock.sync.cache import targets as targets
from kernlock.sync.cache import variant_path as variant_path
from kernlock.sync.fetch import (
    FILE_WORKERS,
    FileSource,
    cache_error,
    client,
    fetch_variant,
    gather,
    progress_bar,
    write_ref,
)
from kernlock.sync.fetch import VariantResult as VariantResult
from kernlock.sync.fetch import ensure_variant as ensure_variant
from kernlock.sync.integrity import FileState, describe, describe_extras, inspect_variant, refresh
from kernlock.sync.integrity import check_variant as check_variant
from kernlock.sync.integrity import is_synced as is_synced
from kernlock.sync.signatures import SignatureCheck, reverify
from kernlock.sync.verify import Problem as Problem
from kernlock.sync.verify import VerifyResult as VerifyResult
from kernlock.sync.verify import verify as verify
from kernlock.util import hfenv, interrupt

if TYPE_CHECKING:
    from kernlock.hub.client import Hub

__all__ = [
    "Problem",
    "SyncReport",
    "VariantResult",
    "VerifyResult",
    "cache_dir",
    "check_variant",
    "ensure_variant",
    "is_synced",
    "sync",
    "targets",
    "variant_path",
    "verify",
]

VARIANT_WORKERS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncReport:
    """The outcome of a sync: every variant it made sure of, where, and whether the lock was re-written first."""

    cache: Path
    environments: tuple[str, ...]
    variants: tuple[VariantResult, ...]
    offline: bool = False
    relocked: str | None = None  # why kernels.lock was re-written before syncing (default mode)
    kernels: tuple[str, ...] = ()
    #: Where receipts would go when they cannot be kept there (kernlock's cache cannot be made, or is not the user's
    #: alone: docs/security.md), so that every load hashes; None when they are kept.
    receipts_refused: Path | None = None
    source: Path | None = None  # the bundle it installed from (`sync --from`); None: the Hub

    @property
    def downloaded_files(self) -> int:
        """Files fetched, over every variant."""
        return sum(len(v.downloaded) for v in self.variants)

    @property
    def downloaded_bytes(self) -> int:
        """Bytes fetched, over every variant."""
        return sum(v.downloaded_bytes for v in self.variants)


def sync(
    lock: Lock,
    environments: list[str],
    hub: Hub | FileSource | None = None,
    offline: bool = False,
    cache: Path | None = None,
    progress: bool = True,
    trusted_root: Path | None = None,
) -> SyncReport:
    """Make the cache hold exactly the locked, verified files of every variant ``environments`` load.

    Files whose receipt still holds cost a ``stat`` and no request. ``offline``: only check, and raise one
    error naming every missing or corrupt file. The signatures kernels.lock records are verified again, offline,
    for every variant this sync installed or repaired (``offline``: every variant), against ``trusted_root``
    (None: ``$KERNLOCK_SIGSTORE_TRUSTED_ROOT``, else sigstore's public-good root); SignatureError if one fails.
    """
    cache = cache or cache_dir()
    unknown = sorted(set(environments) - set(lock.environments))
    if unknown:
        raise NotSyncedError(
            f"kernels.lock has no entries for {', '.join(unknown)} (it covers {', '.join(lock.environments)})",
            fix="add the environment to [tool.kernlock] environments and run `kernlock lock`",
        )
    pairs = targets(lock, environments)
    offline = offline or (hfenv.offline() and getattr(hub, "remote", True))  # a bundle is no network
    if offline:
        results = _check_offline(pairs, cache)
        refusals.refuse_all(reverify(pairs, cache, trusted_root), cache)
    else:
        # Each variant it installs or repairs is verified (signature included) before it becomes visible; sigstore
        # is imported only when there is a signature to check: a no-op sync has none.
        results = _sync_online(pairs, client(hub), cache, progress, SignatureCheck(trusted_root))
        for entry, _variant in pairs:
            write_ref(entry, cache)
    return SyncReport(
        cache=cache,
        environments=tuple(environments),
        variants=tuple(results),
        offline=offline,
        kernels=tuple(sorted({e.repo for e, _ in pairs})),
        receipts_refused=None if receipts_kept(create=True) else receipts_folder(),
    )


def _present(entry: LockedKernel, variant: LockedVariant, root: Path) -> VariantResult:
    """The result of a variant that was already intact."""
    return VariantResult(
        repo=entry.repo, commit=entry.commit, variant=variant.name, path=root, files=len(variant.files)
    )


def _sync_online(
    pairs: list[tuple[LockedKernel, LockedVariant]],
    hub: Callable[[], FileSource],
    cache: Path,
    progress: bool,
    signatures: SignatureCheck,
) -> list[VariantResult]:
    """The result of every pair: those already intact cost stat calls; the others are fetched or repaired."""
    try:
        # The no-op path first: stat calls only, no lock file, no request, and no thread pool (concurrent.futures
        # imports logging: ~15 ms that a sync with nothing to fetch would pay for nothing).
        results = {
            i: _present(e, v, variant_path(e, v, cache)) for i, (e, v) in enumerate(pairs) if is_synced(e, v, cache)
        }
        todo = [i for i in range(len(pairs)) if i not in results]
        if todo:
            from kernlock.sync import disk_space

            disk_space.require_space([pairs[i] for i in todo], cache)  # before any download: a sync that cannot fit
            with interrupt.worker_pool(FILE_WORKERS) as files, interrupt.worker_pool(VARIANT_WORKERS) as variants:
                bar = progress_bar(progress)
                futures = {
                    i: variants.submit(fetch_variant, *pairs[i], hub(), cache, files, bar, signatures) for i in todo
                }
                results.update(gather(futures))
    except OSError as err:
        raise cache_error(cache, err) from err
    return [results[i] for i in range(len(pairs))]


def _check_offline(pairs: list[tuple[LockedKernel, LockedVariant]], cache: Path) -> list[VariantResult]:
    """Check every target without any request; one error lists everything missing, corrupt or unexpected."""
    results: list[VariantResult] = []
    missing: list[str] = []
    corrupt: list[str] = []
    unexpected: list[str] = []
    for entry, variant in pairs:
        inspection = inspect_variant(entry, variant, cache, full=False)
        corrupt += [describe(entry, variant, [s]) for s in inspection.bad(FileState.MISMATCH)]
        if inspection.extras:
            unexpected.append(describe_extras(entry, variant, inspection.extras))
        absent = inspection.bad(FileState.MISSING)
        if absent:
            missing.append(describe(entry, variant, absent) if inspection.present else f"{entry.repo} {variant.name}")
        if inspection.ok:
            refresh(entry, variant, inspection, cache)
            results.append(_present(entry, variant, inspection.root))
    if corrupt or missing or unexpected:
        parts = (
            ([f"locked files that do not match kernels.lock: {'; '.join(corrupt)}"] if corrupt else [])
            + ([f"files that kernels.lock does not name: {'; '.join(unexpected)}"] if unexpected else [])
            + ([f"locked files not in the cache: {'; '.join(missing)}"] if missing else [])
        )
        error = IntegrityError if corrupt or unexpected else NotSyncedError
        raise error(
            f"offline sync into {cache} found {' | '.join(parts)}; run `kernlock sync` online (without "
            "--offline, HF_HUB_OFFLINE unset) to download, replace or remove them."
        )
    return results
