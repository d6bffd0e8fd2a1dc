"""One exception family: every error a user can meet is a :class:`KernlockError` defined here, built from parts.

Raise one as ``SomeError(what, why=..., fix=...)``:

- ``what``: what happened, naming the thing (``cannot write the hook into /venv/site-packages``);
- ``why``: optional, why it happened (an OS error, the check that failed: ``Permission denied``);
- ``fix``: optional, what the user does about it, in the imperative (``run as the environment's owner``).

``str(err)`` is the one line users read (the CLI prints ``error: <str>``, a process ``kernlock: error: <str>``),
joined by one rule: ``what``, then ``: why``, then the fix: ``; fix`` when it is a clause (it starts in lower case,
the usual form: ``; run `kernlock sync```), ``. Fix`` when it is written as sentences of its own (it starts with a
capital); the line ends with a full stop when a ``why`` or a ``fix`` was given and it does not end with one already.
Write the parts without a final full stop; ``what`` and ``why`` may hold several clauses. ``KernlockError("a whole
sentence.")`` (``what`` alone) reads exactly as given: the old form, left where a message is not split yet.
``.what``, ``.why`` and ``.fix`` keep the parts (None where not given), so a test checks a fix by itself
(``err.value.fix == "run `kernlock sync`"``).

Each class is a kind of failure (the CLI and the callers catch by class), not a site. Only a few internal
``ValueError`` s live elsewhere, because they never reach users: ``variants.grammar.VariantNameError`` and
``variants.tokens.BadToken`` (a name outside the build-variant grammar, asked by the readers of Hub answers that
skip such names, or re-raised as :class:`EnvironmentStringError`), ``environments.facts.FactError`` (re-raised as
:class:`EnvironmentStringError`), and the control-flow exceptions ``util.interrupt.Cancelled``, ``hub.http.Retry``
and ``hub.wire.Abort``; the fixture's own errors live in ``kernlock.testing``.
"""

from __future__ import annotations

__all__ = [
    "ActivationError",
    "ArgumentError",
    "BindingError",
    "BundleError",
    "CacheError",
    "CheckError",
    "DamagedLockError",
    "DiskFullError",
    "DuplicateSpecError",
    "EnvironmentStringError",
    "ExportError",
    "HookError",
    "HubError",
    "IntegrityError",
    "JsonLockError",
    "KernlockError",
    "LaunchError",
    "LockError",
    "NoEnvironmentError",
    "NotFoundError",
    "NotSyncedError",
    "OtherBuildsError",
    "ProjectError",
    "RankMismatchError",
    "ResolutionError",
    "ServeError",
    "SignatureError",
    "SignedDigestError",
    "SkippedKernelError",
    "SpecError",
    "UnknownRevisionError",
    "UnreachableError",
    "VariantNotSynced",
    "message",
]


def message(what: str, why: str | None = None, fix: str | None = None) -> str:
    """The one line of an error (the module's rule): ``what``, ``: why``, ``; fix`` (``. Fix`` for a fix that
    starts with a capital), and a final full stop after a ``why`` or a ``fix``."""
    text = what + (f": {why}" if why else "")
    if fix:
        text += (". " if fix[0].isupper() else "; ") + fix
    if (why or fix) and not text.endswith((".", "?", "!")):
        text += "."
    return text


class KernlockError(Exception):
    """A failure the user can fix; ``str(err)`` says what is wrong and the command that fixes it (the CLI prints
    it and exits 1). Built from its parts (the module's rule): ``.what``, ``.why`` and ``.fix`` (None when not
    given)."""

    def __init__(self, what: str, *, why: str | None = None, fix: str | None = None) -> None:
        super().__init__(message(what, why, fix))
        self.what = what
        self.why = why
        self.fix = fix


class ArgumentError(KernlockError):
    """What a command's function was given cannot be used: options that do not go together, ``-o`` naming a
    folder (the CLI checks most of them first, as click usage errors; this one exits 1)."""


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

    ``what`` is the place (``kernels.lock``, ``kernels.lock, entry #2``), ``why`` what failed
    (``it holds git merge-conflict markers``), ``fix`` the repair.
    """


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


class VariantNotSynced(NotSyncedError):
    """A locked variant's files are not in the kernel cache (:func:`kernlock.sync.integrity.check_variant`);
    ``detail`` says which are missing from which cache, for a caller that words its own message (a load that then
    cannot download the variant keeps it)."""

    def __init__(self, what: str, *, why: str | None = None, fix: str | None = None, detail: str = "") -> None:
        super().__init__(what, why=why, fix=fix)
        self.detail = detail


class DiskFullError(KernlockError):
    """The kernel cache's disk has no room for what the lock needs."""


class OtherBuildsError(ActivationError):
    """Strict mode: a model folder was computed with other builds than the lock in force would load here."""


class BundleError(KernlockError):
    """A file that is not a bundle kernlock can use (or one made for another kernels.lock)."""


class CacheError(KernlockError):
    """A cache kernlock writes cannot be written: the kernel cache (a full disk there is a DiskFullError), or the
    Hub answers it keeps (for another reason than a read-only or full disk, which only costs time)."""


class ExportError(KernlockError):
    """kernels.lock cannot be written in the format asked for (the kernels library's lock holds one commit per
    kernel)."""


class ServeError(KernlockError):
    """`kernlock serve` cannot start: gunicorn is not installed, or the address cannot be listened on."""


class CheckError(KernlockError):
    """`kernlock check --upgrade`'s check of the upgraded lock, run in a process of its own, failed or stopped."""


class LaunchError(KernlockError):
    """A program kernlock was asked to start cannot be started (`kernlock run -- CMD`, `kernlock hook --python`)."""


class HookError(KernlockError):
    """`kernlock hook` cannot install or remove the hook in a Python environment."""


class BindingError(KernlockError):
    """`kernlock run` cannot bind the Python environment to its lock for the run's processes, where a launcher
    would start them without `kernlock run`'s environment."""


class RankMismatchError(KernlockError):
    """The ranks of a distributed job loaded different kernel commits (:func:`kernlock.distributed.check_ranks`)."""
