"""The run-time policy for Hub kernel loads, shared by every loader adapter (docs/activation.md).

Which seams of the ``kernels`` library are hooked depends on its generation, found by probing
(:mod:`kernlock.runtime.loaders`): the resolver classes of kernels 0.17, the module globals of ``kernels/utils.py`` in
kernels 0.15/0.16, or — for a loader kernlock does not recognise — the official ``LOCAL_KERNELS`` switch. What a
load of a locked repo gets is decided here, in one place, whatever the adapter:

* :func:`locate` — the locked entry for this environment, the strict/warn policy (unlocked repos, revisions the
  lock does not satisfy, another backend), and the verified variant folder (fetched exactly when not synced), of a
  build the installed loader can load (:mod:`kernlock.runtime.servable`);
* :func:`locked_entry` — the same policy for a seam that only needs to know whether a repo is locked;
* :func:`locked_builds` — every locked build of this environment, verified (the ``LOCAL_KERNELS`` fallback);
* :func:`check_preloaded` — kernels loaded before activation must be the locked builds.

:func:`kernlock.runtime.activation.activate` installs the adapter (:func:`kernlock.runtime.loaders.install`), then runs
:func:`check_preloaded`; this module reads the activation from :mod:`kernlock.runtime.state`, never from runtime.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from kernlock.errors import ActivationError, KernlockError, NotSyncedError
from kernlock.lock.model import LockedKernel, LockedVariant
from kernlock.runtime import servable
from kernlock.runtime import state as activated

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kernlock.lock.index import LockView

__all__ = [
    "Located",
    "active",
    "check_preloaded",
    "current_lock",
    "locate",
    "locked_builds",
    "locked_entry",
    "note_version",
    "origin_of",
    "pinned_by_kernlock",
    "satisfies",
    "strict",
    "warn_once",
]

logger = logging.getLogger("kernlock")


# -- the state of one activation ------------------------------------------------------------------------------


class Located(NamedTuple):
    """A locked build, verified: what a load of ``entry.repo`` gets here (a NamedTuple: this module is imported
    by every program that loads a kernel, and a frozen dataclass costs several times as much to create)."""

    entry: LockedKernel
    variant: LockedVariant
    path: Path


class _State:
    """What one activation derived: this environment's view of the lock, verified builds, warnings given."""

    def __init__(self, generation: int, lock: LockView, environment: str, backend: str | None) -> None:
        self.generation = generation
        self.lock = lock
        self.environment = environment
        self.backend = backend
        self.verified: dict[tuple[str, str, str], Path] = {}
        self.origins: dict[Path, LockedKernel] = {}
        self.warned: set[str] = set()


_state: _State | None = None
_guard = threading.RLock()
#: ``LOCAL_KERNELS`` entries kernlock itself set (the fallback): not a user's override.
pinned_by_kernlock: dict[str, str] = {}


def active() -> bool:
    """True when kernlock is activated in this process."""
    return activated.settings() is not None


def _backend_name() -> str | None:
    """kernels' name of this machine's backend; None where it cannot tell (backend= arguments are not compared)."""
    from kernlock.environments.machine import kernels_backend

    found = kernels_backend()
    return None if found is None else str(found.name)


def _current() -> _State:
    """The state of the current activation (the lock is read and the environment detected once)."""
    global _state
    with _guard:
        if _state is None or _state.generation != activated.generation:
            from kernlock.lock import index as lockindex

            settings = activated.settings()
            assert settings is not None
            light = _machine()
            environment = light or _detect()
            view = lockindex.read(settings.lockfile, environment)  # this environment's entries only
            if light is not None and environment not in view.environments:  # the full detection explains it
                detected = _detect()
                if detected != environment:
                    environment, view = detected, lockindex.read(settings.lockfile, detected)
            _state = _State(activated.generation, view, environment, _backend_name())
            _warn_local_overrides(_state)
        return _state


def _machine() -> str | None:
    """This machine's environment string as the loader names it, straight from the imported torch (no variant
    grammar imported; a string the lock names is valid); None without torch imported or when it cannot tell."""
    if "torch" not in sys.modules:
        return None
    from kernlock.environments.machine import torch_environment

    try:
        return torch_environment()
    except Exception:  # the full detection says what is wrong
        return None


def _detect() -> str:
    """This machine's environment for a load, or ActivationError: a lock names torch machines, so a process
    without torch (kernels alone loads some kernels without it) cannot tell which locked build it would load."""
    from kernlock.environments.environment import detect

    try:
        return str(detect())
    except KernlockError as err:
        import importlib.util

        if importlib.util.find_spec("torch") is not None:
            raise ActivationError(str(err)) from None
        raise ActivationError(
            "kernlock cannot tell which locked build this process loads",
            why="torch is not installed, and every environment of kernels.lock is a torch machine",
            fix="Install torch, or load without kernlock.activate",
        ) from None


def _warn_local_overrides(state: _State) -> None:
    """LOCAL_KERNELS (kernels' developer switch) wins over the lock, unverified: say so."""
    value = os.environ.get("LOCAL_KERNELS", "")
    items = dict(item.split("=", 1) for item in value.split(":") if "=" in item)
    mine = {repo for repo, path in items.items() if pinned_by_kernlock.get(repo) == path}
    overridden = sorted((set(items) - mine) & set(state.lock.repos))
    if overridden:
        logger.warning(
            "kernlock: LOCAL_KERNELS overrides kernels.lock for %s: loaded from local folders, unverified.",
            ", ".join(overridden),
        )


def current_lock() -> tuple[LockView, str]:
    """This activation's view of the lock (this environment's entries) and this environment's string."""
    state = _current()
    return state.lock, state.environment


def strict() -> bool:
    """True in strict mode (the default)."""
    settings = activated.settings()
    return settings is None or settings.mode == "strict"


def warn_once(key: str, message: str) -> None:
    """Log ``message`` once per activation (the key says what it is about)."""
    state = _current()
    if key not in state.warned:
        state.warned.add(key)
        logger.warning("kernlock: %s", message)


# -- the policy -----------------------------------------------------------------------------------------------


def locked_entry(repo: str, asked: str) -> LockedKernel | None:
    """The entry serving ``repo`` here; None for an unlocked repo in warn mode; ActivationError otherwise
    (an unlocked repo in strict mode, or this environment not in the lock). ``asked`` words the request."""
    state = _current()
    settings = activated.settings()
    assert settings is not None
    lock, here = state.lock, state.environment  # a repo scoped to other environments is not locked here
    locked = repo in lock.repos and (here not in lock.environments or lock.entry_for(repo, here) is not None)
    if os.environ.get("KERNLOCK_RECORD"):  # `kernlock run --record`
        from kernlock.runtime import recording

        recording.note(repo, asked, locked)
    if not locked:
        where = f"{settings.lockfile}" + (f" for {here}" if repo in lock.repos else "")
        fix = f"add it with `kernlock add {_spec(repo, asked)}`" + (
            ", or record every kernel a run asks for with `kernlock run --record -- CMD...` (or set "
            "KERNLOCK_MODE=warn to load unlocked kernels with a warning)"
            if strict()
            else ""
        )
        unlocked = ActivationError(f"{repo} ({asked}) is not in {where}", fix=fix)
        if strict():
            raise unlocked
        warn_once(f"unlocked:{repo}", f"{unlocked} Loading it unlocked and unverified, as kernels would.")
        return None
    entry = state.lock.entry_for(repo, state.environment)
    if entry is None or entry.variant_for(state.environment) is None:
        raise _not_covered(state, settings.lockfile)
    return entry


def _spec(repo: str, asked: str) -> str:
    """``org/name@rev`` for `kernlock add`: the revision the code asked (``version=4`` -> ``@v4``)."""
    kind, _, value = asked.partition("=")
    return f"{repo}@v{value}" if kind == "version" else f"{repo}@{value}" if kind == "revision" else repo


def _not_covered(state: _State, lockfile: str) -> ActivationError:
    covered = ", ".join(state.lock.environments) or "none"
    return ActivationError(
        f"{lockfile} does not cover this environment, {state.environment} (it covers: {covered})",
        fix=f'add "{state.environment}" to `environments` in [tool.kernlock] and run `kernlock lock`',
    )


def satisfies(entry: LockedKernel, revision: str) -> bool:
    """True when an explicit ``revision`` names what the entry locks (its rev, ref or commit)."""
    revision = revision.strip()
    for prefix in ("refs/heads/", "refs/tags/"):
        revision = revision.removeprefix(prefix)
    if revision in (entry.requested, entry.ref, entry.commit):
        return True
    return len(revision) >= 7 and entry.commit.startswith(revision.lower())


def note_version(repo: str, version: int, entry: LockedKernel) -> None:
    """Log (info) that ``version=N`` gets the locked build when N is not the locked branch."""
    if entry.ref == f"v{version}":
        return
    via = "" if entry.ref == entry.requested else f" via {entry.ref}"
    logger.info(
        "kernlock: %s asked for version=%d; kernels.lock pins %s%s (commit %s): loading the locked build.",
        repo,
        version,
        entry.requested,
        via,
        entry.commit[:12],
    )


def _check_revision(repo: str, revision: str, entry: LockedKernel) -> None:
    if satisfies(entry, revision):
        return
    refusal = ActivationError(
        f"{repo}@{revision} is requested, but kernels.lock pins {repo} to {entry.requested} "
        f"(commit {entry.commit[:12]})",
        fix=f"Load it without a revision or with @{entry.ref}, or change the requirement: "
        f"`kernlock add {repo}@{revision}`",
    )
    if strict():
        raise refusal
    warn_once(f"revision:{repo}@{revision}", f"{refusal} Loading the locked build.")


def locate(
    repo: str, *, version: int | None = None, revision: str | None = None, backend: str | None = None
) -> Located | None:
    """The verified local build of a locked ``repo`` (None: unlocked, warn mode). Raises ActivationError,
    NotSyncedError or IntegrityError with the message the user needs."""
    asked = f"version={version}" if version is not None else f"revision={revision}"
    entry = locked_entry(repo, asked)
    if entry is None:
        return None
    if version is not None:
        note_version(repo, version, entry)
    elif revision is not None:
        _check_revision(repo, revision, entry)
    state = _current()
    if backend is not None and state.backend is not None and backend != state.backend:
        raise ActivationError(
            f"{repo} is asked for backend={backend!r}, but kernels.lock locks the {state.environment} build here",
            fix="drop the backend argument, or lock an environment with that backend in [tool.kernlock]",
        )
    variant = entry.variant_for(state.environment)
    assert variant is not None
    return Located(entry=entry, variant=variant, path=_verified_path(state, entry, variant))


def origin_of(path: object) -> LockedKernel | None:
    """The locked entry whose verified folder is ``path`` (a folder kernlock handed to the loader), else None."""
    if not active() or not isinstance(path, (str, os.PathLike)):
        return None
    return _current().origins.get(Path(path))


def _verified_path(state: _State, entry: LockedKernel, variant: LockedVariant) -> Path:
    """The variant folder, checked against the lock (once per process); fetched exactly when not synced."""
    key = (entry.repo, entry.commit, variant.name)
    with _guard:
        path = state.verified.get(key)
        if path is not None:
            return path
        from kernlock.sync.integrity import check_variant

        settings = activated.settings()
        full = settings is not None and settings.verify == "full"
        try:
            path = check_variant(entry, variant, full=full)
        except NotSyncedError as missing:
            from kernlock.runtime.fetching import fetch_missing

            path = fetch_missing(entry, variant, missing, settings.lockfile if settings is not None else None)
        servable.check(entry, variant, path, state.environment)  # a build only kernels 0.19+ loads: every try
        state.verified[key] = path
        state.origins[path] = entry
        if os.environ.get("KERNLOCK_RECORD"):  # `kernlock run --record`: which build this process was handed
            from kernlock.runtime import recording

            recording.note_loaded(entry.repo, entry.commit, variant.name)
        return path


def locked_builds() -> tuple[dict[str, Path], dict[str, str]]:
    """Every repo locked for this environment -> its verified folder (fetched when not synced), and the repos
    that cannot be served -> why (the message of the error a load would raise)."""
    state = _current()
    settings = activated.settings()
    assert settings is not None
    builds: dict[str, Path] = {}
    problems: dict[str, str] = {}
    for repo in state.lock.repos:
        entry = state.lock.entry_for(repo, state.environment)
        variant = entry.variant_for(state.environment) if entry is not None else None
        if entry is None or variant is None:
            problems[repo] = str(_not_covered(state, settings.lockfile))
            continue
        try:
            builds[repo] = _verified_path(state, entry, variant)
        except KernlockError as err:
            problems[repo] = str(err)
    return builds, problems


def check_preloaded(kernels: ModuleType) -> None:
    """A locked repo that kernels loaded before activation must be the locked build."""
    if activated.settings() is None:
        return
    try:
        loaded = [k for k in kernels.get_loaded_kernels() if getattr(k, "repo_info", None) is not None]
        seen = [(str(k.repo_info.repo_id), str(k.repo_info.revision)) for k in loaded]
    except Exception:  # a loader without this registry: nothing to check
        return
    if not seen:
        return
    state = _current()
    for repo, commit in seen:
        entry = state.lock.entry_for(repo, state.environment)
        if entry is None or entry.commit == commit:
            continue
        message = (
            f"{repo} (commit {commit[:12]}) was loaded before kernlock was activated, but kernels.lock pins "
            f"commit {entry.commit[:12]}; make `import kernlock.activate` the first import of the program."
        )
        if strict():
            raise ActivationError(message)
        warn_once(f"preloaded:{repo}", message)
