"""A locked build a load finds missing from the kernel cache: fetched there and then, exactly the locked files,
verified and signature-checked as `kernlock sync` does; or, where downloads are off, refused in one line naming
both ways to bring it (a node of a cluster that was never synced, docs/ray.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.errors import HubError, KernlockError, NotSyncedError

if TYPE_CHECKING:
    from kernlock.lock.model import LockedKernel, LockedVariant
    from kernlock.sync.signatures import SignatureCheck

__all__ = ["fetch_missing"]

_FETCH_RETRIES = 1  # a fetching load retries once (huggingface_hub already retries connection errors)


def fetch_missing(entry: LockedKernel, variant: LockedVariant, missing: NotSyncedError, lockfile: str | None) -> Path:
    """The variant's verified folder, fetched from the Hub; NotSyncedError naming what is missing where (from
    ``missing``) and the fix, when HF_HUB_OFFLINE is set or the Hub cannot serve it."""
    from kernlock.util import hfenv

    where = f" ({detail})" if (detail := getattr(missing, "detail", "")) else ""  # what, from which cache
    head = f"{entry.repo} {variant.name} (commit {entry.commit[:12]}) is not synced here{where}"
    if hfenv.offline():
        raise NotSyncedError(
            f"{head}, and HF_HUB_OFFLINE=1 forbids downloading it",
            fix="Run `kernlock sync` on this machine while the Hub is reachable, or `kernlock bundle` where it is and "
            "`kernlock sync --from BUNDLE` here",
        ) from missing
    try:
        from kernlock.hub.client import Hub
        from kernlock.sync.fetch import ensure_variant

        hub = Hub(retries=_FETCH_RETRIES, backoff=0.25)  # a load waits seconds, not minutes
        return ensure_variant(entry, variant, hub=hub, signatures=_signature_check(lockfile))
    except HubError as err:
        raise NotSyncedError(
            f"{head} and could not be downloaded",
            why=str(err).rstrip("."),
            fix="Run `kernlock sync` where the Hub is reachable, then run again",
        ) from err


def _signature_check(lockfile: str | None) -> SignatureCheck:
    """The signature check of a load that fetches a variant: against the trusted root of the lock's project
    (``[tool.kernlock.signatures] trusted-root``), else ``$KERNLOCK_SIGSTORE_TRUSTED_ROOT`` or sigstore's own."""
    from kernlock.project import inputs
    from kernlock.sync.signatures import SignatureCheck

    root = None
    if lockfile is not None:
        folder = os.path.dirname(os.path.abspath(lockfile))
        try:
            root = inputs.load(folder).signatures.trusted_root_path(Path(folder))
        except (KernlockError, OSError):  # no readable project beside the lock: the default root
            root = None
    return SignatureCheck(root)
