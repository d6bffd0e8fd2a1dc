"""Lock time: verify every locked variant's sigstore bundle against the project's policy and record who signed
it (``signature`` in kernels.lock), or ``"unsigned"``; a signature that fails stops the lock (docs/security.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from kernlock.errors import IntegrityError, SignatureError
from kernlock.hub.answers import MAX_READ
from kernlock.hub.wire import git_blob_id
from kernlock.lock.model import UNSIGNED, Lock, LockedFile, LockedKernel, LockedVariant, Signature
from kernlock.util import interrupt

if TYPE_CHECKING:
    from kernlock.hub.client import Hub
    from kernlock.project.inputs import Project

__all__ = ["record_signatures"]

WORKERS = 16


def _fix(repo: str) -> str:
    return (
        "kernels.lock was not written. A failed signature is never waived (`--trust` does not either): report it to "
        f"{repo}'s publisher, pin another revision, or, if you trust that signer, add it as a "
        "[[tool.kernlock.signatures.signer]] (docs/pyproject.md)"
    )


def _file(variant: LockedVariant, path: str) -> LockedFile | None:
    return next((f for f in variant.files if f.path == path), None)


def _fetched(file: LockedFile, covered: Callable[[str], bool]) -> bool:
    """Whether lock time fetches ``file`` to check it against the signed digest: a git (non-LFS) file the digest
    covers, small enough for one read (Python sources, metadata: what runs at import)."""
    return file.algorithm == "git-sha1" and file.size <= MAX_READ and covered(file.path)


def _git_file(hub: Hub, entry: LockedKernel, base: str, file: LockedFile) -> bytes:
    """The bytes of a git file of the build, proven to be the blob the tree names."""
    data = hub.read_blob(entry.repo, entry.commit, base + file.path, file.hash)
    if git_blob_id(data) != file.digest:
        raise IntegrityError(
            f"{hub.endpoint} served {entry.repo}@{entry.commit[:12]} {base}{file.path} with other bytes than its "
            "tree names (git blob id); kernels.lock was not written",
            fix="Retry; if it persists, check HF_ENDPOINT",
        )
    return data


def record_signatures(lock: Lock, project: Project, hub: Hub) -> Lock:
    """``lock`` with every variant's ``signature`` set by the project's ``[tool.kernlock.signatures]`` policy."""
    policy = project.signatures
    if policy.mode == "off":
        return lock
    from kernlock.signing.bundle import (
        BUNDLE,
        MAX_BUNDLE,
        METADATA,
        BundleVerifier,
        check_digest,
        covered,
        unsigned_allowed,
    )

    jobs: dict[tuple[str, str, str], tuple[LockedKernel, LockedVariant]] = {}
    for entry in lock.kernels:
        for variant in entry.variants:
            jobs.setdefault((entry.repo, entry.commit, variant.name), (entry, variant))

    def fetch(job: tuple[LockedKernel, LockedVariant]) -> tuple[bytes, bytes, dict[str, bytes]] | None:
        entry, variant = job
        what = f"{entry.repo}@{entry.commit[:12]} {variant.name}"
        bundle, metadata = _file(variant, BUNDLE), _file(variant, METADATA)
        if bundle is None:
            unsigned_allowed(policy.mode, what, _fix(entry.repo))
            return None
        if bundle.size > MAX_BUNDLE:
            raise SignatureError(
                f"{what}: {BUNDLE} is {bundle.size} bytes, over the {MAX_BUNDLE // 1024} KiB a sigstore bundle may "
                f"have; it is not a signature kernlock accepts",
                fix=_fix(entry.repo),
            )
        if metadata is None:
            raise SignatureError(f"{what}: the build has a {BUNDLE} but no {METADATA} it signs", fix=_fix(entry.repo))
        base = f"build/{variant.name}/"
        return (
            hub.read_blob(entry.repo, entry.commit, base + METADATA, metadata.hash),
            hub.read_blob(entry.repo, entry.commit, base + BUNDLE, bundle.hash),
            {f.path: _git_file(hub, entry, base, f) for f in variant.files if _fetched(f, covered)},
        )

    with interrupt.worker_pool(WORKERS) as pool:
        fetched = dict(zip(jobs, pool.map(fetch, jobs.values()), strict=True))
    verifier = BundleVerifier(policy.trusted_root_path(project.root)) if any(fetched.values()) else None
    found: dict[tuple[str, str, str], Signature | str] = {}
    seen: dict[tuple[str, bytes, bytes], Signature] = {}
    for key, pair in jobs.items():
        blobs = fetched[key]
        if blobs is None:
            found[key] = UNSIGNED
            continue
        entry, variant = pair
        metadata, bundle, small = blobs
        what = f"{entry.repo}@{entry.commit[:12]} {variant.name}"
        assert verifier is not None
        record = seen.get((entry.repo, metadata, bundle))
        if record is None:
            record = verifier.verify(what, metadata, bundle, policy.signers, fix=_fix(entry.repo))
            seen[(entry.repo, metadata, bundle)] = record

        def hash_of(file: LockedFile, algorithm: str, small: dict[str, bytes] = small) -> bytes | None:
            """LFS files are named by their sha256 in the tree; the git files were fetched (a few KB each, checked
            against their blob id); an LFS file under another algorithm is checked when synced, before it is seen."""
            if file.algorithm == "sha256" and algorithm == "sha256":
                return bytes.fromhex(file.digest)
            data = small.get(file.path)
            return None if data is None else hashlib.new(algorithm, data).digest()

        check_digest(what, metadata, variant.files, hash_of, fix=_fix(entry.repo))
        found[key] = record
    kernels = []
    for entry in lock.kernels:
        variants = tuple(replace(v, signature=found[(entry.repo, entry.commit, v.name)]) for v in entry.variants)
        kernels.append(replace(entry, variants=variants))
    return replace(lock, kernels=tuple(kernels))
