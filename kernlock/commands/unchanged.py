"""The everyday commands' answers while nothing they read has changed: `lock --check`, a `sync` with nothing to do
(plain, `--locked` or `--frozen`) and `show`.

Each of them reads pyproject.toml and the whole kernels.lock, validates both, detects this machine and checks every
locked file it loads: most of its time goes to importing the lock model and TOML, for an answer that changes only
when one of those files does. So each remembers its answer (:mod:`kernlock.util.memo`) against the identity of
every file it read, taken before reading: pyproject.toml, kernels.lock, the ``sys.path`` folders (the installed
torch this machine's environment comes from), and for `sync` and `show` every path of each variant they checked
(:func:`kernlock.sync.cache.evidence`) and the refs `sync` keeps. The next identical command finds them all as
they were and answers after a few ``stat`` calls; any change among them (an edited pyproject, a new lock, a file
touched in the cache, torch reinstalled) and the command derives its answer again, exactly as it would have. Only
answers of commands that succeeded and changed nothing are remembered: an error is derived anew each time, and so
is an answer read from a lock a newer kernlock wrote (each command says so in its warning line).

`verify` remembers only what it checks against (its plan: the entries, the environments it requires, the trusted
root), never a verdict: it hashes every file again each time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kernlock.errors import ProjectError
from kernlock.project.location import PYPROJECT, locate
from kernlock.util import hfenv, memo
from kernlock.util.names import LOCK_NAME

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kernlock.lock.model import Lock, LockedKernel, LockedVariant

__all__ = [
    "Synced",
    "lock_is_current",
    "project_files",
    "remember_lock_check",
    "remember_show",
    "remember_sync",
    "remember_verify_plan",
    "remembers_sync",
    "shown",
    "sync_files",
    "synced",
    "variant_files",
    "verify_plan",
]


class Synced(NamedTuple):
    """A `sync` that found every locked file of its environments in the cache, as an identical one did before (a
    NamedTuple: the no-op `sync` imports no dataclasses)."""

    variants: int
    kernels: int
    environments: tuple[str, ...]
    cache: str


def project_files(root: Path) -> dict[str, memo.Identity]:
    """The identities of what every one of these commands reads first: pyproject.toml, kernels.lock and the
    folders of installed distributions (take them before reading)."""
    return memo.identities([str(root / PYPROJECT), str(root / LOCK_NAME), *memo.installed()])


def lock_is_current(root: Path | None) -> bool:
    """Whether `lock --check` found kernels.lock up to date before, and nothing it read has changed since."""
    where = _where(root)
    return where is not None and memo.recall("lock-check", [where]) is True


def remember_lock_check(root: Path, files: dict[str, memo.Identity]) -> None:
    """`lock --check` found the project at ``root`` up to date, reading ``files``."""
    if _keeps():
        memo.remember("lock-check", [str(root)], files, True)


def remembers_sync(*, all_environments: bool, offline: bool) -> bool:
    """Whether a `sync` with these options keeps (and is answered from) its answer: not `--all-environments` nor an
    offline one (`--offline`, ``HF_HUB_OFFLINE``), which always check the cache."""
    return not (all_environments or offline or hfenv.offline())


def synced(root: Path | None, *, frozen: bool, all_environments: bool = False, offline: bool = False) -> Synced | None:
    """What an identical `sync` (``frozen``: `sync --frozen`) found when nothing it read has changed since, else
    None (the sync must run; always for one that :func:`remembers_sync` says checks every time)."""
    if not remembers_sync(all_environments=all_environments, offline=offline):
        return None
    where = _where(root)
    kept = memo.recall(_sync_kind(frozen), [where]) if where is not None else None
    try:
        return Synced(**{**kept, "environments": tuple(kept["environments"])}) if isinstance(kept, dict) else None
    except (TypeError, KeyError):
        return None


def sync_files(lock: Lock, environments: list[str], cache: Path) -> dict[str, memo.Identity]:
    """The identities of every path a `sync` of ``environments`` with nothing to do reads in ``cache``: each
    variant's (:func:`variant_files`) and each ref it keeps."""
    from kernlock.sync.cache import ref_file, targets

    pairs = targets(lock, environments)
    refs = [str(path) for entry, _ in pairs if (path := ref_file(entry, cache)) is not None]
    return {**variant_files(pairs, cache), **memo.identities(refs)}


def variant_files(pairs: Iterable[tuple[LockedKernel, LockedVariant]], cache: Path) -> dict[str, memo.Identity]:
    """The identities of every path whose state says whether these (entry, variant) pairs are synced in ``cache``."""
    from kernlock.sync.cache import evidence

    return memo.identities(path for entry, variant in pairs for path in evidence(entry, variant, cache))


def remember_sync(root: Path, frozen: bool, files: dict[str, memo.Identity], found: Synced) -> None:
    """A `sync` of the project at ``root`` found ``found`` and changed nothing, reading ``files``."""
    if _keeps():
        memo.remember(_sync_kind(frozen), [str(root)], files, found._asdict())


def shown(root: Path | None) -> dict[str, Any] | None:
    """`show`'s result (rows, stale, no_variant) when nothing it read has changed since, else None."""
    where = _where(root)
    kept = memo.recall("show", [where]) if where is not None else None
    return kept if isinstance(kept, dict) else None


def remember_show(root: Path, files: dict[str, memo.Identity], result: dict[str, Any]) -> None:
    """`show` of the project at ``root`` gave ``result`` (rows, stale, no_variant), reading ``files``."""
    if _keeps():
        memo.remember("show", [str(root)], files, result)


def verify_plan(root: Path | None, *, all_environments: bool) -> dict[str, Any] | None:
    """What `verify` checked against before (its entries' tables, the environments it required, the trusted root)
    when nothing that was derived from has changed since, else None. Only the plan: the files are hashed each time."""
    where = _where(root)
    kept = memo.recall(_verify_kind(all_environments), [where]) if where is not None else None
    return kept if isinstance(kept, dict) else None


def remember_verify_plan(
    root: Path, files: dict[str, memo.Identity], plan: dict[str, Any], *, all_environments: bool
) -> None:
    """`verify` of the project at ``root`` checks against ``plan``, derived from ``files``."""
    if _keeps():
        memo.remember(_verify_kind(all_environments), [str(root)], files, plan)


def _keeps() -> bool:
    """Whether an answer may be remembered: not one derived from a lock a newer kernlock wrote, whose warning line
    the next command must say again (it reads the lock anew)."""
    from kernlock.lock import file as lockfile  # imported already: the command read the lock

    return not lockfile.warned()


def _verify_kind(all_environments: bool) -> str:
    return "verify-all" if all_environments else "verify"


def _where(root: Path | None) -> str | None:
    """The project folder, or None where there is none (the command itself then says so)."""
    try:
        return str(locate(root))
    except ProjectError:
        return None


def _sync_kind(frozen: bool) -> str:
    """`sync` and `sync --locked` check the lock against pyproject; `--frozen` trusts it: its answer is its own."""
    return "sync-frozen" if frozen else "sync-checked"
