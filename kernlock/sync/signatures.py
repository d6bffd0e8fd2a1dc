"""Re-verify, offline, the signatures kernels.lock records for synced variants: the synced bundle is the recorded
one, it verifies over the synced ``metadata.json`` against the trusted root and the recorded signer, and the
signed digest matches the synced files (`kernlock sync` for what it just installed, `sync --offline` and
`kernlock verify` for everything)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from kernlock.errors import SignatureError
from kernlock.lock.model import LockedFile, LockedKernel, LockedVariant, Signature
from kernlock.project.signatures import TRUSTED_ROOT_VARIABLE
from kernlock.sync.cache import variant_path
from kernlock.util import names

__all__ = ["default_trusted_root", "reverify", "signed"]

FIX = (
    "the cache does not hold what kernels.lock signed off; run `kernlock sync` online to replace the files, and if "
    "it persists, re-lock with `kernlock lock` and review `git diff kernels.lock`"
)


def default_trusted_root() -> Path | None:
    """``$KERNLOCK_SIGSTORE_TRUSTED_ROOT`` when set, else None (sigstore's public-good root)."""
    value = os.environ.get(TRUSTED_ROOT_VARIABLE)
    return Path(value) if value else None


def signed(pairs: Iterable[tuple[LockedKernel, LockedVariant]]) -> list[tuple[LockedKernel, LockedVariant]]:
    """The pairs whose variant has a recorded signature."""
    return [(e, v) for e, v in pairs if isinstance(v.signature, Signature)]


def _sha(path: Path, algorithm: str) -> bytes:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


def reverify(
    pairs: Iterable[tuple[LockedKernel, LockedVariant]], cache: Path, trusted_root: Path | None
) -> list[tuple[LockedKernel, LockedVariant, str]]:
    """Re-verify every signed pair that is in ``cache``; returns (entry, variant, message) for each failure.
    Files must already match the lock (sync and verify check them first)."""
    todo = signed(pairs)
    if not todo:
        return []
    from kernlock.signing.bundle import BUNDLE, METADATA, BundleVerifier, check_digest

    verifier = BundleVerifier(trusted_root)
    failures = []
    for entry, variant in todo:
        root = variant_path(entry, variant, cache)
        what = f"{entry.repo}@{entry.commit[:12]} {variant.name}"
        record = variant.signature
        assert isinstance(record, Signature)

        def hash_of(file: LockedFile, algorithm: str, root: Path = root) -> bytes:
            if file.algorithm == "sha256" and algorithm == "sha256":
                return bytes.fromhex(file.digest)  # the file was checked against this hash
            return _sha(names.under(root, *file.path.split("/")), algorithm)

        try:
            metadata = names.under(root, METADATA).read_bytes()
            bundle_path = names.under(root, BUNDLE)
            if bundle_path.stat().st_size > 1 << 20:
                raise SignatureError(f"{what}: {BUNDLE} is over the 1 MiB a sigstore bundle may have; {FIX}")
            verifier.reverify(what, metadata, bundle_path.read_bytes(), record, fix=FIX)
            check_digest(what, metadata, variant.files, hash_of, fix=FIX)
        except SignatureError as err:
            failures.append((entry, variant, str(err)))
        except OSError as err:
            failures.append((entry, variant, f"{what}: cannot read its signed files ({err.strerror or err}); {FIX}"))
    return failures
