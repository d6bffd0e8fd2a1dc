"""Verify a build's sigstore bundle (``metadata.json.sigstore``) over its ``metadata.json``, fully offline, and
check that the signed ``digest`` names exactly the variant's files (docs/security.md, "Signatures").

sigstore is imported here only, when a :class:`BundleVerifier` is made: activation, `lock --check` and a no-op
`sync` never reach this module. One verifier per command (building it reads the trusted root once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernlock.errors import SignatureError, SignedDigestError
from kernlock.lock.model import LockedFile, Signature
from kernlock.util.digest import sha256_hex

if TYPE_CHECKING:  # `verify` checks each synced build's signed digest and needs no signer policy (~1 ms)
    from kernlock.project.signatures import Signer

__all__ = [
    "BUNDLE",
    "MAX_BUNDLE",
    "METADATA",
    "BundleVerifier",
    "check_digest",
    "covered",
    "unsigned_allowed",
]

METADATA = "metadata.json"
BUNDLE = "metadata.json.sigstore"
#: A bundle is a few KB; anything over this is refused before it is parsed.
MAX_BUNDLE = 1 << 20
_FULCIO = "1.3.6.1.4.1.57264.1."
#: The fix of a trusted root that cannot be used.
_ROOT_FIX = "fix `trusted-root` in [tool.kernlock.signatures] or $KERNLOCK_SIGSTORE_TRUSTED_ROOT"


def _der_utf8(raw: bytes) -> str:
    """The text of a DER UTF8String (Fulcio's v2 extensions); raw bytes as text for the legacy ones."""
    if len(raw) >= 2 and raw[0] == 0x0C:
        size, start = raw[1], 2
        if size & 0x80:
            width = size & 0x7F
            size, start = int.from_bytes(raw[2 : 2 + width], "big"), 2 + width
        return raw[start : start + size].decode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


def _identity(certificate: Any) -> dict[str, str]:
    """Who a Fulcio certificate says signed: build signer URI (1.9), source repository (1.12), issuer (1.8/1.1)."""
    found: dict[str, str] = {}
    for extension in certificate.extensions:
        dotted = extension.oid.dotted_string
        if dotted.startswith(_FULCIO):
            raw = getattr(extension.value, "value", b"")
            found[dotted.removeprefix(_FULCIO)] = (
                _der_utf8(raw) if dotted != _FULCIO + "1" else raw.decode("utf-8", "replace")
            )
    repository = found.get("12", "")
    issuer = found.get("8") or found.get("1") or "(none)"
    if "1" in found and "8" in found and found["1"] != found["8"]:  # kernels requires both: they must agree
        issuer = f"{found['8']} (legacy issuer extension: {found['1']})"
    return {
        "signer": found.get("9", "(none)"),
        "repository": repository.removeprefix("https://github.com/") or "(none)",
        "issuer": issuer,
    }


def _who(identity: dict[str, str]) -> str:
    return f"repository {identity['repository']}, workflow {identity['signer']}, issuer {identity['issuer']}"


def _expected(signers: Iterable[Signer]) -> str:
    return "; ".join(
        f"repository {s.repository}, workflow {' or '.join(s.workflows)}, issuer {s.issuer}" for s in signers
    )


def _accepts(signer: Signer, identity: dict[str, str]) -> bool:
    return (
        identity["repository"] == signer.repository
        and identity["signer"] in signer.workflows
        and identity["issuer"] == signer.issuer
    )


class BundleVerifier:
    """sigstore's own ``Verifier`` over one trusted root (None: sigstore's public-good root as the installed
    sigstore ships it, read offline)."""

    def __init__(self, trusted_root: Path | None) -> None:
        import logging  # sigstore imports it anyway; a check of a remembered signature does not

        logging.getLogger("sigstore").setLevel(logging.ERROR)  # its offline and no-op-policy warnings are ours to word
        from sigstore.verify import Verifier

        self.trusted_root = trusted_root
        try:
            if trusted_root is None:
                self._verifier = Verifier.production(offline=True)
            else:
                from sigstore.models import TrustedRoot

                self._verifier = Verifier(trusted_root=TrustedRoot.from_file(str(trusted_root)))
        except FileNotFoundError:
            raise SignatureError(f"the sigstore trusted root {trusted_root} does not exist", fix=_ROOT_FIX) from None
        except Exception as err:  # sigstore's own errors, pydantic's, an unreadable file
            where = trusted_root or "sigstore's public-good trusted root"
            raise SignatureError(
                f"cannot read the sigstore trusted root {where} ({_short(err)})", fix=_ROOT_FIX
            ) from None

    def verify(self, what: str, metadata: bytes, bundle: bytes, signers: Iterable[Signer], *, fix: str) -> Signature:
        """Verify ``bundle`` over ``metadata`` and that one of ``signers`` signed it; the recorded Signature.
        ``what`` names the kernel and variant in errors; ``fix`` is the error's last words."""
        from sigstore.models import Bundle
        from sigstore.verify import policy

        signers = tuple(signers)
        if len(bundle) > MAX_BUNDLE:
            raise SignatureError(
                f"{what}: {BUNDLE} is {len(bundle)} bytes, over the {MAX_BUNDLE // 1024} KiB a sigstore bundle may "
                f"have; it is not a signature kernlock accepts",
                fix=fix,
            )
        try:
            parsed = Bundle.from_json(bundle)
        except Exception as err:  # InvalidBundle, JSON and pydantic errors: all mean "not a bundle"
            raise SignatureError(f"{what}: {BUNDLE} is not a sigstore bundle ({_short(err)})", fix=fix) from None
        try:
            identity = _identity(parsed.signing_certificate)
        except Exception as err:
            raise SignatureError(f"{what}: {BUNDLE} holds no readable certificate ({_short(err)})", fix=fix) from None
        try:
            self._verifier.verify_artifact(metadata, parsed, policy.UnsafeNoOp())
        except Exception as err:  # VerificationError, and the errors sigstore raises outside it (ExtensionNotFound)
            root = self.trusted_root or "sigstore's public-good trusted root"
            raise SignatureError(
                f"{what}: the signature in {BUNDLE} does not verify over {METADATA} against {root} "
                f"({_short(err)}); it claims {_who(identity)}",
                fix=fix,
            ) from None
        if not any(_accepts(signer, identity) for signer in signers):
            raise SignatureError(
                f"{what}: {METADATA} is signed by {_who(identity)}, but kernels.lock expects {_expected(signers)}",
                fix=fix,
            )
        entry: Any = getattr(parsed.log_entry, "_inner", parsed.log_entry)  # sigstore 4 keeps the fields there
        return Signature(
            signer=identity["signer"],
            repository=identity["repository"],
            issuer=identity["issuer"],
            log_index=int(entry.log_index),
            integrated_time=int(entry.integrated_time or 0),
            bundle="sha256:" + sha256_hex(bundle),
        )

    def reverify(self, what: str, metadata: bytes, bundle: bytes, record: Signature, *, fix: str) -> None:
        """Verify a synced bundle again, offline, against the signer kernels.lock recorded for it."""
        if "sha256:" + sha256_hex(bundle) != record.bundle:
            raise SignatureError(f"{what}: {BUNDLE} is not the bundle kernels.lock recorded", fix=fix)
        from kernlock.project.signatures import Signer

        signer = Signer(repository=record.repository, workflows=(record.signer,), issuer=record.issuer)
        found = self.verify(what, metadata, bundle, (signer,), fix=fix)
        if (found.log_index, found.integrated_time) != (record.log_index, record.integrated_time):
            raise SignatureError(f"{what}: {BUNDLE} names another transparency log entry than kernels.lock", fix=fix)


def _short(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def covered(path: str) -> bool:
    """Whether kernel-builder's digest lists ``path`` (all but metadata.json, its bundle, and compiled Python)."""
    return path not in (METADATA, BUNDLE) and "__pycache__" not in path.split("/") and not path.endswith(".pyc")


def check_digest(
    what: str,
    metadata: bytes,
    files: Iterable[LockedFile],
    hash_of: Callable[[LockedFile, str], bytes | None],
    *,
    fix: str,
) -> None:
    """The signed ``digest`` of ``metadata`` names exactly ``files`` (the variant's locked files); each file
    whose hash ``hash_of(file, algorithm)`` gives (raw digest bytes, None: not known here) must match it."""
    try:
        digest = json.loads(metadata).get("digest")
    except (ValueError, AttributeError):
        raise SignedDigestError(f"{what}: the signed {METADATA} is not a JSON object", fix=fix) from None
    if not isinstance(digest, dict) or not isinstance(digest.get("files"), dict):
        raise SignedDigestError(f"{what}: the signed {METADATA} has no `digest` of the build's files", fix=fix)
    algorithm = digest.get("algorithm")
    if algorithm not in ("sha256", "sha512"):
        raise SignedDigestError(f"{what}: the signed digest uses {algorithm!r}, not sha256 or sha512", fix=fix)
    listed: dict[str, Any] = digest["files"]
    locked = {f.path: f for f in files if covered(f.path)}
    missing, unknown = sorted(set(listed) - set(locked)), sorted(set(locked) - set(listed))
    if missing or unknown:
        parts = ([f"lists {', '.join(missing[:3])}, which the build does not have"] if missing else []) + (
            [f"does not list {', '.join(unknown[:3])}"] if unknown else []
        )
        raise SignedDigestError(f"{what}: the signed digest {' and '.join(parts)}", fix=fix)
    from base64 import b64decode  # here: only a signed build has digests to compare (~1 ms of imports)

    for path, file in locked.items():
        actual = hash_of(file, algorithm)
        if actual is None:
            continue
        try:
            signed = b64decode(str(listed[path]), validate=True)
        except ValueError:
            signed = b""
        if signed != actual:
            raise SignedDigestError(f"{what}: {path} does not match the hash its signed digest gives", fix=fix)


def unsigned_allowed(mode: str, what: str, fix: str) -> None:
    """``require`` refuses a build without a bundle; ``verify`` records it as unsigned."""
    if mode == "require":
        raise SignatureError(
            f'{what}: the build has no {BUNDLE}, and [tool.kernlock.signatures] mode = "require" refuses '
            f"unsigned builds",
            fix=fix,
        )
