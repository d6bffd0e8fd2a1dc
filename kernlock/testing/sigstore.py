"""A private, deterministic sigstore instance for tests: a CA, a CT log and a Rekor log whose bundles sigstore's
real ``Verifier`` accepts offline (reference: docs/testing-hub.md, "Signed builds").

Only ``cryptography`` and ``rfc8785`` (both sigstore dependencies). Keys are derived from a seed, serials from the
content and ECDSA is deterministic, so the same seed, identity and artifact give the same bundle bytes. A bundle is
signed the way kernel-builder's workflow signs ``metadata.json`` (``cosign sign-blob --bundle``, keyless, a GitHub
Actions identity): a short-lived leaf certificate with the Fulcio identity extensions and an embedded SCT, a
``hashedrekord`` entry with an inclusion proof, a signed checkpoint and an inclusion promise.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DEFAULT_WORKFLOW",
    "EPOCH",
    "GITHUB_ISSUER",
    "Identity",
    "Instance",
    "instance",
]

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
DEFAULT_WORKFLOW = "https://github.com/huggingface/kernels-community/.github/workflows/build.yaml@refs/heads/main"
#: The fixed time every signature is made at (2025-01-01T00:00:00Z); the leaf certificate is valid 10 minutes.
EPOCH = 1735689600

_ECDSA = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
_FULCIO = "1.3.6.1.4.1.57264.1."
_DER = serialization.Encoding.DER
_SCT_LIST = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """Who signs: the GitHub Actions OIDC identity a Fulcio certificate records."""

    workflow: str = DEFAULT_WORKFLOW  # build signer URI (1.9), also the SAN
    repository: str = "huggingface/kernels-community"  # source repository (1.12), https://github.com/<this>
    issuer: str = GITHUB_ISSUER  # OIDC issuer (1.1 raw, 1.8 UTF8String)


def _key(seed: str, curve: ec.EllipticCurve) -> ec.EllipticCurvePrivateKey:
    scalar = int.from_bytes(hashlib.sha512(seed.encode()).digest(), "big")
    order = {"secp256r1": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551}.get(curve.name)
    if order is None:  # P-384
        order = int(
            "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973", 16
        )
    return ec.derive_private_key(scalar % (order - 1) + 1, curve)


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _utf8(value: str) -> bytes:
    """A DER UTF8String (``0x0c len value``), as Fulcio encodes its v2 extensions."""
    raw = value.encode()
    if len(raw) < 0x80:
        return b"\x0c" + bytes([len(raw)]) + raw
    size = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return b"\x0c" + bytes([0x80 | len(size)]) + size + raw


def _octets(raw: bytes) -> bytes:
    """A DER OCTET STRING around ``raw``."""
    if len(raw) < 0x80:
        return b"\x04" + bytes([len(raw)]) + raw
    size = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return b"\x04" + bytes([0x80 | len(size)]) + size + raw


def _time(seconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


class Instance:
    """One private sigstore instance (seeded): sign artifacts, write its trusted root."""

    def __init__(self, seed: str = "kernlock-testing", *, valid_from: int = EPOCH - 86400 * 365) -> None:
        self.seed = seed
        self.valid_from = valid_from
        self.ca_key = _key(f"{seed}:ca", ec.SECP384R1())
        self.ct_key = _key(f"{seed}:ct", ec.SECP256R1())
        self.rekor_key = _key(f"{seed}:rekor", ec.SECP256R1())
        name = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kernlock"), x509.NameAttribute(NameOID.COMMON_NAME, seed)]
        )
        public = self.ca_key.public_key()
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(int.from_bytes(hashlib.sha256(f"{seed}:ca-serial".encode()).digest()[:16], "big") >> 1)
            .not_valid_before(_time(valid_from))
            .not_valid_after(_time(valid_from + 86400 * 365 * 20))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.ca_key, hashes.SHA384(), ecdsa_deterministic=True)
        )
        self.rekor_id = hashlib.sha256(_spki(self.rekor_key.public_key())).digest()
        self.ct_id = hashlib.sha256(_spki(self.ct_key.public_key())).digest()

    # -- the trusted root --

    def trusted_root(self, *, ca_valid_from: int | None = None, ca_valid_until: int | None = None) -> dict[str, Any]:
        """The trusted root (``application/vnd.dev.sigstore.trustedroot+json;version=0.1``) as a dict."""
        start = _time(self.valid_from).strftime("%Y-%m-%dT%H:%M:%SZ")

        def log(key: ec.EllipticCurvePrivateKey, key_id: bytes, url: str) -> dict[str, Any]:
            return {
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(_spki(key.public_key())),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": start},
                },
                "logId": {"keyId": _b64(key_id)},
            }

        valid: dict[str, str] = {
            "start": _time(self.valid_from if ca_valid_from is None else ca_valid_from).strftime("%Y-%m-%dT%H:%M:%SZ")
        }
        if ca_valid_until is not None:
            valid["end"] = _time(ca_valid_until).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(self.rekor_key, self.rekor_id, f"https://rekor.{self.seed}.invalid")],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "kernlock", "commonName": self.seed},
                    "uri": f"https://fulcio.{self.seed}.invalid",
                    "certChain": {
                        "certificates": [{"rawBytes": _b64(self.ca.public_bytes(serialization.Encoding.DER))}]
                    },
                    "validFor": valid,
                }
            ],
            "ctlogs": [log(self.ct_key, self.ct_id, f"https://ctfe.{self.seed}.invalid")],
            "timestampAuthorities": [],
        }

    def trusted_root_json(self, **kwargs: int | None) -> str:
        return json.dumps(self.trusted_root(**kwargs), indent=2) + "\n"

    # -- signing --

    def _leaf(self, identity: Identity, key: ec.EllipticCurvePrivateKey, when: int) -> x509.Certificate:
        public = key.public_key()
        serial = int.from_bytes(hashlib.sha256(_spki(public) + identity.workflow.encode()).digest()[:16], "big") >> 1
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca.subject)
            .public_key(public)
            .serial_number(serial)
            .not_valid_before(_time(when - 60))
            .not_valid_after(_time(when + 540))
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity.workflow)]), True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        )
        fulcio = {
            "1": identity.issuer.encode(),
            "8": _utf8(identity.issuer),
            "9": _utf8(identity.workflow),
            "12": _utf8(f"https://github.com/{identity.repository}"),
        }
        for arc, raw in fulcio.items():
            builder = builder.add_extension(
                x509.UnrecognizedExtension(x509.ObjectIdentifier(_FULCIO + arc), raw), critical=False
            )
        pre = builder.sign(self.ca_key, hashes.SHA384(), ecdsa_deterministic=True)
        tbs = pre.tbs_certificate_bytes
        ms = (when - 30) * 1000
        issuer_key_hash = hashlib.sha256(_spki(self.ca_key.public_key())).digest()
        signed = struct.pack("!BBQH", 0, 0, ms, 1) + issuer_key_hash + len(tbs).to_bytes(3, "big") + tbs + b"\0\0"
        sig = self.ct_key.sign(signed, _ECDSA)
        sct = b"\0" + self.ct_id + struct.pack("!QH", ms, 0) + b"\x04\x03" + struct.pack("!H", len(sig)) + sig
        sct_list = struct.pack("!HH", len(sct) + 2, len(sct)) + sct
        return builder.add_extension(x509.UnrecognizedExtension(_SCT_LIST, _octets(sct_list)), critical=False).sign(
            self.ca_key, hashes.SHA384(), ecdsa_deterministic=True
        )

    def sign(
        self, artifact: bytes, identity: Identity | None = None, *, when: int = EPOCH, log_index: int = 0
    ) -> bytes:
        """A sigstore bundle (v0.3 JSON bytes) signing ``artifact`` as ``identity`` at ``when``."""
        identity = identity or Identity()
        digest = hashlib.sha256(artifact).digest()
        key, cert = _leaf_cached(self, identity, when)
        signature = key.sign(artifact, _ECDSA)
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body = rfc8785.dumps(
            {
                "apiVersion": "0.0.1",
                "kind": "hashedrekord",
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                    "signature": {"content": _b64(signature), "publicKey": {"content": _b64(pem)}},
                },
            }
        )
        leaf_hash = hashlib.sha256(b"\0" + body).digest()
        origin = f"rekor.{self.seed}.invalid - 1"
        note = f"{origin}\n1\n{_b64(leaf_hash)}\n"
        note_sig = self.rekor_key.sign(note.encode(), _ECDSA)
        checkpoint = f"{note}\n\u2014 rekor.{self.seed}.invalid {_b64(self.rekor_id[:4] + note_sig)}\n"
        promise = rfc8785.dumps(
            {"body": _b64(body), "integratedTime": when, "logID": self.rekor_id.hex(), "logIndex": log_index}
        )
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [
                    {
                        "logIndex": str(log_index),
                        "logId": {"keyId": _b64(self.rekor_id)},
                        "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                        "integratedTime": str(when),
                        "inclusionPromise": {"signedEntryTimestamp": _b64(self.rekor_key.sign(promise, _ECDSA))},
                        "inclusionProof": {
                            "logIndex": "0",
                            "rootHash": _b64(leaf_hash),
                            "treeSize": "1",
                            "hashes": [],
                            "checkpoint": {"envelope": checkpoint},
                        },
                        "canonicalizedBody": _b64(body),
                    }
                ],
            },
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": _b64(digest)},
                "signature": _b64(signature),
            },
        }
        return json.dumps(bundle, separators=(",", ":")).encode()


@functools.lru_cache(maxsize=256)
def _leaf_cached(inst: Instance, identity: Identity, when: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The leaf key and certificate: deterministic, so one per instance, identity and time (signing stays cheap)."""
    key = _key(f"{inst.seed}:leaf:{identity.workflow}:{identity.repository}:{identity.issuer}", ec.SECP256R1())
    return key, inst._leaf(identity, key, when)


@functools.lru_cache(maxsize=8)
def instance(seed: str = "kernlock-testing") -> Instance:
    """The instance of ``seed`` (built once per process: keys and CA certificate cost a few ms)."""
    return Instance(seed)
