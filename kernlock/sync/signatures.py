"""Re-verify, offline, the signatures kernels.lock records for variants in the cache: the bundle is the recorded one,
it verifies over the variant's ``metadata.json`` against the trusted root and the recorded signer, and the signed
digest matches the variant's files. `kernlock sync` checks a variant it installs in its staging folder, before any
loader can see it (:mod:`kernlock.sync.fetch`); `sync --offline` and `kernlock verify` check everything synced.
A variant that fails is withdrawn from the cache (:mod:`kernlock.sync.refusals`)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.errors import SignatureError
from kernlock.lock.model import LockedFile, LockedKernel, LockedVariant, Signature
from kernlock.sync.cache import variant_path
from kernlock.util import hfenv, names
from kernlock.util.atomic import write_bytes_atomic
from kernlock.util.digest import sha256_hex

if TYPE_CHECKING:
    from kernlock.signing.bundle import BundleVerifier

__all__ = ["FIX", "TRUST_FIX", "SignatureCheck", "default_trusted_root", "reverify", "signed"]

VERIFIED = "signatures-verified"  # {kernlock cache}/signatures-verified/<key>: bundles sigstore verified
#: The fix of a build whose files disagree with its signed digest: it is withdrawn (:mod:`kernlock.sync.refusals`).
FIX = (
    "nothing of this build is loaded (kernlock removed it from the cache); run `kernlock lock` to check the lock "
    "against the Hub again (a build whose files its signature does not vouch for is refused there: pin another "
    "revision), or restore the committed lock with `git checkout HEAD -- kernels.lock`"
)
#: The fix of a signature the trusted root or the recorded signer does not accept: configuration, or an edited lock.
TRUST_FIX = (
    "check the trusted root (`trusted-root` in [tool.kernlock.signatures], $KERNLOCK_SIGSTORE_TRUSTED_ROOT), or "
    "re-lock with `kernlock lock` and review `git diff kernels.lock`"
)


def default_trusted_root() -> Path | None:
    """``$KERNLOCK_SIGSTORE_TRUSTED_ROOT`` when set, else None (sigstore's public-good root)."""
    from kernlock.project.signatures import TRUSTED_ROOT_VARIABLE

    value = os.environ.get(TRUSTED_ROOT_VARIABLE)
    return Path(value) if value else None


def signed(pairs: Iterable[tuple[LockedKernel, LockedVariant]]) -> list[tuple[LockedKernel, LockedVariant]]:
    """The pairs whose variant has a recorded signature."""
    return [(e, v) for e, v in pairs if isinstance(v.signature, Signature)]


def _sha(path: Path, algorithm: str) -> bytes:
    from kernlock.util.hashing import hasher  # only where a signed file is hashed (a no-op sync hashes none)

    with open(path, "rb") as handle:
        digest = hasher(algorithm, os.fstat(handle.fileno()).st_size)
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return bytes(digest.digest())


class SignatureCheck:
    """Verifies variants' recorded signatures against one trusted root (None: ``$KERNLOCK_SIGSTORE_TRUSTED_ROOT``,
    else sigstore's public-good root). sigstore is imported at the first signed variant, once, from any thread."""

    def __init__(self, trusted_root: Path | None = None, *, remember: bool = True) -> None:
        self.trusted_root = trusted_root or default_trusted_root()
        self.remember = remember  # a bundle verified before, against the same root and signer, is not verified again
        self._verifier: BundleVerifier | None = None
        self._guard = threading.Lock()
        self._root_id: str | None = None

    def _made(self) -> BundleVerifier:
        with self._guard:
            if self._verifier is None:
                from kernlock.signing.bundle import BundleVerifier

                self._verifier = BundleVerifier(self.trusted_root)
            return self._verifier

    def failure(
        self, entry: LockedKernel, variant: LockedVariant, root: Path | None = None, cache: Path | None = None
    ) -> SignatureError | None:
        """Why the variant's files in ``root`` (default: its folder in ``cache``) fail its recorded signature, or
        None when they pass or the lock records none; a SignedDigestError when the files disagree with the signed
        digest (the build is refused), else a SignatureError (the trusted root or the recorded signer does not
        accept the bundle). Files must already match the lock (their hashes are used)."""
        record = variant.signature
        if not isinstance(record, Signature):
            return None
        from kernlock.signing.bundle import BUNDLE, METADATA, check_digest

        root = root if root is not None else variant_path(entry, variant, cache)
        what = f"{entry.repo}@{entry.commit[:12]} {variant.name}"

        def hash_of(file: LockedFile, algorithm: str) -> bytes:
            if file.algorithm == "sha256" and algorithm == "sha256":
                return bytes.fromhex(file.digest)  # the file was checked against this hash
            return _sha(names.under(root, *file.path.split("/")), algorithm)

        memo = self._memo(entry, variant, record) if self.remember else None
        known = memo is not None and hfenv.read_private(memo, 0) is not None  # the user's own empty marker
        verifier = None if known else self._made()  # a bad trusted root: an error
        try:
            metadata = names.under(root, METADATA).read_bytes()
            bundle_path = names.under(root, BUNDLE)
            if bundle_path.stat().st_size > 1 << 20:
                raise SignatureError(f"{what}: {BUNDLE} is over the 1 MiB a sigstore bundle may have", fix=TRUST_FIX)
            bundle = bundle_path.read_bytes()
            if verifier is not None:
                with self._guard:  # sigstore's objects are not documented as thread-safe
                    verifier.reverify(what, metadata, bundle, record, fix=TRUST_FIX)
            elif "sha256:" + sha256_hex(bundle) != record.bundle:
                raise SignatureError(f"{what}: {BUNDLE} is not the bundle kernels.lock recorded", fix=TRUST_FIX)
            check_digest(what, metadata, variant.files, hash_of, fix=FIX)
        except SignatureError as err:
            return err
        except OSError as err:
            return SignatureError(f"{what}: cannot read its signed files ({err.strerror or err})", fix=TRUST_FIX)
        if memo is not None and verifier is not None:
            with contextlib.suppress(OSError):  # only a shortcut
                write_bytes_atomic(memo, b"", private=True)
        return None

    def _memo(self, entry: LockedKernel, variant: LockedVariant, record: Signature) -> Path | None:
        """The marker that sigstore verified this bundle, over this ``metadata.json``, against this trusted root and
        the recorded signer: kept in kernlock's own cache (the user's alone, or none is kept)."""
        folder = hfenv.cache_root() / VERIFIED
        if not hfenv.private(folder, create=True):
            return None
        if self._root_id is None:
            try:
                root = self.trusted_root.read_bytes() if self.trusted_root is not None else b"public-good"
            except OSError:
                return None  # the verifier says what is wrong with it
            self._root_id = sha256_hex(root)
        metadata = next((f.hash for f in variant.files if f.path == "metadata.json"), "")
        fields = [
            record.signer,
            record.repository,
            record.issuer,
            record.log_index,
            record.integrated_time,
            record.bundle,
        ]
        key = json.dumps([self._root_id, metadata, entry.repo, *fields])
        return folder / sha256_hex(key.encode())


def reverify(
    pairs: Iterable[tuple[LockedKernel, LockedVariant]], cache: Path, trusted_root: Path | None, remember: bool = True
) -> list[tuple[LockedKernel, LockedVariant, SignatureError]]:
    """Re-verify every signed pair that is in ``cache``; returns (entry, variant, error) for each failure
    (:meth:`SignatureCheck.failure`). Files must already match the lock (sync and verify check them first)."""
    todo = signed(pairs)
    if not todo:
        return []
    check = SignatureCheck(trusted_root, remember=remember)
    failures = []
    for entry, variant in todo:
        error = check.failure(entry, variant, cache=cache)
        if error is not None:
            failures.append((entry, variant, error))
    return failures
