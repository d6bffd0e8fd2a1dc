"""``kernlock verify``: re-hash every locked variant in the cache and list what does not match the lock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from kernlock.errors import SignedDigestError
from kernlock.lock.model import Lock, LockedKernel, LockedVariant
from kernlock.sync import refusals
from kernlock.sync.cache import cache_dir, entry_targets
from kernlock.sync.integrity import FileState, Inspection, inspect_variant, refresh
from kernlock.sync.signatures import default_trusted_root, reverify, signed

__all__ = ["Problem", "VerifyResult", "verify", "verify_entries"]

_WORKERS = 8  # variants hashed in parallel (hashlib releases the GIL)
#: Locked bytes (over more than one variant: a variant is one task) from which hashing fans out to threads. Below
#: it a pool costs more than it saves: importing concurrent.futures (it imports logging) and starting threads
#: costs ~15-20 ms, while sha256 hashes ~1 GB/s per core, so 64 MiB is ~60 ms on one core and a pool could save at
#: most ~30 ms of it on a 2-core machine (more with more cores, where the bytes to hash are what grows).
PARALLEL_BYTES = 64 << 20
BUNDLE = "metadata.json.sigstore"


# NamedTuples, not dataclasses (as kernlock.sync.integrity's): created at a fifth of the cost, on `verify`'s path.


class Problem(NamedTuple):
    """A locked file that is missing or does not match the lock, or a file in a variant folder that the lock
    does not name; ``str()`` is the user-facing line."""

    repo: str
    commit: str
    variant: str
    path: str | None  # None: the whole variant is not synced; else relative to the variant folder
    kind: FileState  # MISSING, MISMATCH, UNEXPECTED or NOT_SYNCED
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.repo} {self.variant}" + (f" {self.path}" if self.path else "")
        text = f"{where} (commit {self.commit[:12]}): {self.kind.value}"
        return text + (f", {self.detail}" if self.detail else "")


class VerifyResult(NamedTuple):
    """What ``verify`` found: the problems (none: every locked file present matches and no variant folder holds
    anything else), the variants it re-hashed, how many files, in which cache."""

    problems: tuple[Problem, ...]
    checked: tuple[str, ...]  # "repo variant" of every variant that was re-hashed
    files: int
    cache: Path
    signed: int = 0  # variants whose recorded signature was verified again (offline)
    #: Locked variants neither in the cache nor required (other environments'), and the environments that load them.
    unchecked: int = 0
    unchecked_environments: tuple[str, ...] = ()
    #: Why this machine required nothing (set by :func:`kernlock.commands.verify.verify`); None when it did.
    not_required: str | None = None

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def __bool__(self) -> bool:
        raise TypeError("a VerifyResult has no truth value: ask for .ok or .problems")


def verify(
    lock: Lock,
    environments: list[str] | None = None,
    cache: Path | None = None,
    trusted_root: Path | None = None,
    full: bool = False,
) -> VerifyResult:
    """:func:`verify_entries` of every entry of ``lock``."""
    return verify_entries(lock.kernels, environments, cache, trusted_root, full)


def verify_entries(
    entries: Sequence[LockedKernel],
    environments: list[str] | None = None,
    cache: Path | None = None,
    trusted_root: Path | None = None,
    full: bool = False,
) -> VerifyResult:
    """Re-hash every locked variant present in the cache and list its folder; the variants ``environments`` load
    must be present.

    Returns the problems (none: all intact: every locked file matches, and no variant folder holds a file the
    lock does not name) and refreshes the receipts (where they no longer say what was found) and the
    ``__pycache__`` markers of intact variants. Variants are hashed in threads only above :data:`PARALLEL_BYTES`.
    Every intact variant with a recorded signature is verified again, offline, against ``trusted_root`` (None:
    ``$KERNLOCK_SIGSTORE_TRUSTED_ROOT``, else sigstore's public-good root) and its signed digest; a bundle that
    sigstore verified before (same bundle, ``metadata.json``, trusted root and signer) is not verified again
    unless ``full``.
    """
    root = cache or cache_dir()
    required = {(e.repo, e.commit, v.name) for e, v in entry_targets(entries, environments or [])}
    problems: list[Problem] = []
    checked: list[str] = []
    intact: list[tuple[LockedKernel, LockedVariant]] = []
    files = 0

    def inspect(pair: tuple[LockedKernel, LockedVariant]) -> Inspection:
        return inspect_variant(pair[0], pair[1], root, full=True)

    pairs = entry_targets(entries, None)
    if len(pairs) > 1 and sum(f.size for _e, v in pairs for f in v.files) > PARALLEL_BYTES:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(_WORKERS) as pool:
            inspections = list(pool.map(inspect, pairs))
    else:
        inspections = [inspect(pair) for pair in pairs]
    unchecked: list[LockedVariant] = []
    for (entry, variant), inspection in zip(pairs, inspections, strict=True):
        if not inspection.present:
            if (entry.repo, entry.commit, variant.name) in required:
                reason = refusals.refusal(entry, variant, root)  # sync refused it, or never ran
                why = f"refused: {reason}" if reason else "run `kernlock sync`"
                problems.append(_problem(entry, variant, None, FileState.NOT_SYNCED, why))
            else:
                unchecked.append(variant)
            continue
        checked.append(f"{entry.repo} {variant.name}")
        files += len(variant.files)
        problems += [
            _problem(entry, variant, state.file.path, state.state, state.detail)
            for state in inspection.files
            if state.state != FileState.OK
        ]
        for extra in inspection.extras:
            problems += [
                _problem(entry, variant, shown or ".", FileState.UNEXPECTED, extra.detail) for shown in extra.shown
            ]
            if extra.hidden:
                detail = f"{extra.hidden} more file(s) not in kernels.lock"
                problems.append(_problem(entry, variant, f"{extra.path}/", FileState.UNEXPECTED, detail))
        if inspection.ok:
            refresh(entry, variant, inspection, root)
            intact.append((entry, variant))
    failures = reverify(intact, root, trusted_root or default_trusted_root(), remember=not full)
    for entry, variant, error in failures:
        if isinstance(error, SignedDigestError):  # withdrawn from the cache: no loader sees it, sync checks again
            refusals.refuse(entry, variant, root, str(error))
        problems.append(_problem(entry, variant, BUNDLE, FileState.MISMATCH, str(error)))  # the signature fails
    return VerifyResult(
        problems=tuple(problems),
        checked=tuple(checked),
        files=files,
        cache=root,
        signed=len(signed(intact)) - len(failures),
        unchecked=len(unchecked),
        unchecked_environments=tuple(sorted({env for variant in unchecked for env in variant.environments})),
    )


def _problem(entry: LockedKernel, variant: LockedVariant, path: str | None, kind: FileState, detail: str) -> Problem:
    return Problem(repo=entry.repo, commit=entry.commit, variant=variant.name, path=path, kind=kind, detail=detail)
