"""Hooks into the ``kernels`` library: every Hub kernel load of a locked repo gets the locked, verified build.

Two choke points that every Hub load of kernels 0.17 passes, patched at class / module level so that name
bindings made before activation (``transformers`` binds ``kernels.get_kernel`` at import) are covered too:

* ``resolve`` of the four Hub resolvers (``HubResolver``, ``HubCacheResolver`` and the ``Locked*`` pair used
  by ``get_locked_kernel``/``load_kernel``/``LockedLayerRepository``). ``get_kernel``, ``has_kernel``,
  ``install_kernel``, ``LayerRepository.load`` and a kernel's own ``kernel-depends`` (resolved recursively
  through the same resolver) all end there. For a locked repo the hook answers with the verified local build
  (a ``LocalKernel``): no refs lookup, no trust check, no download. Local resolvers (``LOCAL_KERNELS``,
  ``get_local_kernel``) run before the Hub resolvers and are left alone.
* ``kernels._versions.resolve_version_spec_as_ref`` (``version=N`` -> a commit), which ``LayerRepository`` /
  ``FuncRepository`` call before loading: a locked repo answers with the locked commit, without the network.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from kernlock import runtime
from kernlock.compat import INSTALL_KERNELS, SUPPORTED_KERNELS
from kernlock.errors import ActivationError, HubError, NotSyncedError
from kernlock.lockfile import Lock, LockedKernel, LockedVariant

logger = logging.getLogger("kernlock")

_RESOLVERS = ("HubResolver", "HubCacheResolver", "LockedHubResolver", "LockedHubCacheResolver")
_MARK = "__kernlock_hook__"
_FETCH_RETRIES = 1  # a fetching load retries once (huggingface_hub already retries connection errors)


# -- installation ---------------------------------------------------------------------------------------------


#: (module, attribute path) of everything kernlock patches or relies on; checked when the hooks install.
NEEDED = (
    *(("kernels.resolver", f"{name}.resolve") for name in _RESOLVERS),
    ("kernels._versions", "resolve_version_spec_as_ref"),
    ("kernels.layer.layer", "LayerRepository._resolve_revision.cache_clear"),
    ("kernels.layer.func", "FuncRepository._resolve_revision.cache_clear"),
    ("kernels.resolver", "LocalKernel"),
    ("kernels.resolver", "RemoteKernel"),
    ("kernels.variants", "parse_variant"),
    ("kernels._rust", "Metadata.read_from_file"),
    ("kernels.backends", "_backend"),
    ("kernels", "get_loaded_kernels"),
)


def _find(module: str, path: str) -> Any:
    """``module.path`` or None."""
    try:
        found: Any = importlib.import_module(module)
        for name in path.split("."):
            found = getattr(found, name)
    except (ImportError, AttributeError):
        return None
    return found


def install(kernels: ModuleType) -> None:
    """Patch the choke points (once); fail loudly when this kernels version lacks one of them."""
    missing = [f"{module}.{path}" for module, path in NEEDED if _find(module, path) is None]
    if missing:
        version = getattr(kernels, "__version__", "?")
        raise ActivationError(
            f"kernlock cannot hook kernels {version}: it lacks {', '.join(missing)}. kernlock supports "
            f"{SUPPORTED_KERNELS}; install it with {INSTALL_KERNELS}."
        )
    from kernels import _versions, resolver
    from kernels.layer import func, layer

    if not getattr(_versions.resolve_version_spec_as_ref, _MARK, False):
        for name in _RESOLVERS:
            cls = getattr(resolver, name)
            cls.resolve = _hook_resolve(cls.resolve)
        _versions.resolve_version_spec_as_ref = _hook_version_ref(_versions.resolve_version_spec_as_ref)
    # Revisions resolved before activation must not survive it.
    layer.LayerRepository._resolve_revision.cache_clear()
    func.FuncRepository._resolve_revision.cache_clear()
    _check_preloaded(kernels)


def _hook_resolve(original: Any) -> Any:
    @functools.wraps(original)
    def resolve(self: Any, *, api: Any, backend: str | None, kernel: Any) -> Any:
        if runtime.settings() is None:
            return original(self, api=api, backend=backend, kernel=kernel)
        version, revision = _requested(self, kernel)
        location = locate(kernel.repo_id, version=version, revision=revision, backend=backend)
        if location is None:  # unlocked, warn mode
            return original(self, api=api, backend=backend, kernel=kernel)
        return location

    setattr(resolve, _MARK, True)
    return resolve


def _hook_version_ref(original: Any) -> Any:
    @functools.wraps(original)
    def resolve_version_spec_as_ref(repo_id: str, version_spec: int, local_files_only: bool) -> Any:
        if runtime.settings() is None:
            return original(repo_id, version_spec, local_files_only)
        entry = _locked_entry(repo_id, f"version={version_spec}")
        if entry is None:
            return original(repo_id, version_spec, local_files_only)
        _note_version(repo_id, version_spec, entry)
        from huggingface_hub.hf_api import GitRefInfo

        return GitRefInfo(name=entry.ref, ref=f"refs/heads/{entry.ref}", target_commit=entry.commit)

    setattr(resolve_version_spec_as_ref, _MARK, True)
    return resolve_version_spec_as_ref


def _requested(resolver: Any, kernel: Any) -> tuple[int | None, str | None]:
    """(version, revision) a load asks for; for kernels' own lock resolvers, the commit in that lock."""
    locks = getattr(resolver, "kernel_locks", None)
    if locks is not None:
        lock = locks.get(kernel, None)
        if lock is not None:
            return None, lock.commit
    version = getattr(kernel.version, "version", None)
    return (version, None) if version is not None else (None, kernel.version.revision)


# -- the policy -----------------------------------------------------------------------------------------------


class _State:
    """What one activation derived: the parsed lock, this environment, verified builds, warnings given."""

    def __init__(self, generation: int, lock: Lock, environment: str, backend: str) -> None:
        self.generation = generation
        self.lock = lock
        self.environment = environment
        self.backend = backend
        self.verified: dict[tuple[str, str, str], Path] = {}
        self.warned: set[str] = set()


_state: _State | None = None
_guard = threading.RLock()


def _current() -> _State:
    """The state of the current activation (the lock is read and the environment detected once)."""
    global _state
    with _guard:
        if _state is None or _state.generation != runtime.generation:
            from kernels.backends import _backend

            from kernlock import lockfile
            from kernlock.environment import detect

            settings = runtime.settings()
            assert settings is not None
            _state = _State(
                runtime.generation, lockfile.read(settings.lockfile, canonical=False), str(detect()), _backend().name
            )
            _warn_local_overrides(_state)
        return _state


def _warn_local_overrides(state: _State) -> None:
    """LOCAL_KERNELS (kernels' developer switch) wins over the lock, unverified: say so."""
    value = os.environ.get("LOCAL_KERNELS", "")
    overridden = sorted({item.split("=", 1)[0] for item in value.split(":") if "=" in item} & set(state.lock.repos))
    if overridden:
        logger.warning(
            "kernlock: LOCAL_KERNELS overrides kernels.lock for %s: loaded from local folders, unverified.",
            ", ".join(overridden),
        )


def _strict() -> bool:
    settings = runtime.settings()
    return settings is None or settings.mode == "strict"


def _warn_once(state: _State, key: str, message: str) -> None:
    if key not in state.warned:
        state.warned.add(key)
        logger.warning("kernlock: %s", message)


def _locked_entry(repo: str, asked: str) -> LockedKernel | None:
    """The entry serving ``repo`` here; None for an unlocked repo in warn mode; ActivationError otherwise."""
    state = _current()
    settings = runtime.settings()
    assert settings is not None
    if not state.lock.entries(repo):
        message = f"{repo} ({asked}) is not in {settings.lockfile}; add it with `kernlock add {repo}`" + (
            " (or set KERNLOCK_MODE=warn to load unlocked kernels with a warning)." if _strict() else "."
        )
        if _strict():
            raise ActivationError(message)
        _warn_once(state, f"unlocked:{repo}", message + " Loading it unlocked and unverified, as kernels would.")
        return None
    entry = state.lock.entry_for(repo, state.environment)
    if entry is None or entry.variant_for(state.environment) is None:
        covered = ", ".join(state.lock.environments) or "none"
        raise ActivationError(
            f"{settings.lockfile} does not cover this environment, {state.environment} (it covers: {covered}); "
            f'add "{state.environment}" to `environments` in [tool.kernlock] and run `kernlock lock`.'
        )
    return entry


def satisfies(entry: LockedKernel, revision: str) -> bool:
    """True when an explicit ``revision`` names what the entry locks (its rev, ref or commit)."""
    revision = revision.strip()
    for prefix in ("refs/heads/", "refs/tags/"):
        revision = revision.removeprefix(prefix)
    if revision in (entry.requested, entry.ref, entry.commit):
        return True
    return len(revision) >= 7 and entry.commit.startswith(revision.lower())


def _note_version(repo: str, version: int, entry: LockedKernel) -> None:
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
    message = (
        f"{repo}@{revision} is requested, but kernels.lock pins {repo} to {entry.requested} "
        f"(commit {entry.commit[:12]}). Load it without a revision or with @{entry.ref}, or change the "
        f"requirement: `kernlock add {repo}@{revision}`."
    )
    if _strict():
        raise ActivationError(message)
    _warn_once(_current(), f"revision:{repo}@{revision}", message + " Loading the locked build.")


def locate(repo: str, *, version: int | None, revision: str | None, backend: str | None = None) -> Any:
    """The verified local build of a locked ``repo`` as a kernels ``LocalKernel`` (None: unlocked, warn mode)."""
    asked = f"version={version}" if version is not None else f"revision={revision}"
    entry = _locked_entry(repo, asked)
    if entry is None:
        return None
    if version is not None:
        _note_version(repo, version, entry)
    elif revision is not None:
        _check_revision(repo, revision, entry)
    state = _current()
    if backend is not None and backend != state.backend:
        raise ActivationError(
            f"{repo} is asked for backend={backend!r}, but kernels.lock locks the {state.environment} build "
            f"here; drop the backend argument, or lock an environment with that backend in [tool.kernlock]."
        )
    variant = entry.variant_for(state.environment)
    assert variant is not None
    path = _verified_path(state, entry, variant)
    return _local_kernel(entry, variant, path)


def _verified_path(state: _State, entry: LockedKernel, variant: LockedVariant) -> Path:
    """The variant folder, checked against the lock (once per process); fetched exactly when not synced."""
    key = (entry.repo, entry.commit, variant.name)
    with _guard:
        path = state.verified.get(key)
        if path is not None:
            return path
        from huggingface_hub import constants

        from kernlock import sync
        from kernlock.hub import Hub

        settings = runtime.settings()
        full = settings is not None and settings.verify == "full"
        try:
            path = sync.check_variant(entry, variant, full=full)
        except NotSyncedError:
            try:
                hub = Hub(retries=_FETCH_RETRIES, backoff=0.25)  # a load waits seconds, not minutes
                path = sync.ensure_variant(entry, variant, hub=hub, offline=bool(constants.HF_HUB_OFFLINE))
            except HubError as err:
                raise NotSyncedError(
                    f"{entry.repo} {variant.name} (commit {entry.commit[:12]}) is not synced here and could not "
                    f"be downloaded: {err} Run `kernlock sync` where the Hub is reachable, then run again."
                ) from err
        state.verified[key] = path
        return path


def _local_kernel(entry: LockedKernel, variant: LockedVariant, path: Path) -> Any:
    """A kernels ``LocalKernel`` for the build at ``path``, with its Hub origin (repo, commit) recorded."""
    from kernels._rust import Metadata
    from kernels.resolver import LocalKernel, RemoteKernel
    from kernels.variants import parse_variant

    metadata = Metadata.read_from_file(path / "metadata.json")
    origin = RemoteKernel(entry.repo, entry.commit, metadata, parse_variant(variant.name))
    return LocalKernel(variant_path=path, metadata=metadata, origin=origin)


def _check_preloaded(kernels: ModuleType) -> None:
    """A locked repo that kernels loaded before activation must be the locked build."""
    loaded = [k for k in kernels.get_loaded_kernels() if k.repo_info is not None]
    if not loaded or runtime.settings() is None:
        return
    state = _current()
    for item in loaded:
        repo, commit = item.repo_info.repo_id, item.repo_info.revision
        entry = state.lock.entry_for(repo, state.environment)
        if entry is None or entry.commit == commit:
            continue
        message = (
            f"{repo} (commit {commit[:12]}) was loaded before kernlock was activated, but kernels.lock pins "
            f"commit {entry.commit[:12]}; make `import kernlock.activate` the first import of the program."
        )
        if _strict():
            raise ActivationError(message)
        _warn_once(state, f"preloaded:{repo}", message)
