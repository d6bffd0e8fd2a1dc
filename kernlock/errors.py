"""One exception family; every error carries the message the user sees."""

from __future__ import annotations

__all__ = [
    "ActivationError",
    "DamagedLockError",
    "DuplicateSpecError",
    "EnvironmentStringError",
    "HubError",
    "IntegrityError",
    "JsonLockError",
    "KernlockError",
    "LockError",
    "NoEnvironmentError",
    "NotFoundError",
    "NotSyncedError",
    "ProjectError",
    "ResolutionError",
    "SignatureError",
    "SignedDigestError",
    "SkippedKernelError",
    "SpecError",
    "UnknownRevisionError",
    "UnreachableError",
]


class KernlockError(Exception):
    """A failure the user can fix; ``str(err)`` says what is wrong and the command that fixes it (the CLI prints
    it and exits 1)."""


class SpecError(KernlockError):
    """A requirement spec or [tool.kernlock] entry is malformed."""


class DuplicateSpecError(SpecError):
    """One command names the same kernel twice (`kernlock add X X@v3`): a usage error."""


class ProjectError(KernlockError):
    """pyproject.toml is missing or its [tool.kernlock] table is invalid."""


class EnvironmentStringError(KernlockError):
    """An environment string does not follow the build-variant grammar."""


class NoEnvironmentError(KernlockError):
    """This machine has no environment of its own: torch is not installed, so it loads no kernels (it can still lock
    for the environments a project declares, and fill a cache for them)."""


class HubError(KernlockError):
    """The Hub could not answer (unreachable, rate limited, server errors)."""


class UnreachableError(HubError):
    """No connection to the Hub at all (refused, timed out, no route): what is already synced still loads."""


class NotFoundError(KernlockError):
    """An unknown repository, revision or file."""


class UnknownRevisionError(NotFoundError):
    """A repo exists but has no such branch, tag or commit."""


class ResolutionError(KernlockError):
    """Requirements cannot be satisfied (no build for an environment, conflicts, untrusted publisher)."""


class LockError(KernlockError):
    """kernels.lock is missing, malformed, of an unknown version or stale."""


class DamagedLockError(LockError):
    """kernels.lock fails its checks (edited by hand, damaged, or holding merge-conflict markers): every command
    that reads it refuses it; only `kernlock lock`, `add` and `remove` repair it, keeping every pin they can read.

    ``why`` is what failed, without the place or the fix (``it holds git merge-conflict markers``).
    """

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


class JsonLockError(LockError):
    """kernels.lock was written by another tool (the kernels library's JSON lock); kernlock never overwrites it."""


class IntegrityError(KernlockError):
    """A file does not match the hash recorded in the lock."""


class SignatureError(IntegrityError):
    """A build's sigstore signature fails, is signed by someone the policy does not accept, or is missing where the
    policy requires one; never waived (not by `--trust` either)."""


class SignedDigestError(SignatureError):
    """A build's files disagree with the digest its signature vouches for: the build itself is refused (at lock
    time; in the cache, withdrawn: :mod:`kernlock.sync.refusals`), unlike a signature the trusted root or the policy
    does not accept, which is a matter of configuration."""


class ActivationError(KernlockError, ImportError):
    """A kernel load in this process cannot honour the lock."""


class SkippedKernelError(KernlockError, FileNotFoundError):
    """A kernel transformers loads by itself that kernels.lock does not lock here, in warn mode: a FileNotFoundError,
    which kernelize answers by keeping torch's own forward for the layer (docs/activation.md)."""


class NotSyncedError(LockError):
    """Locked files are not in the cache (or have no receipt); `kernlock sync` fetches them."""
