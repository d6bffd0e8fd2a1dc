"""The ``kernels-0.17`` generation of the kernels loader (kernels 0.17; its range and tested releases:
:mod:`kernlock.generations.supported`): every Hub load asks a resolver object.

``get_kernel``, ``has_kernel``, ``install_kernel``, ``LayerRepository``/``FuncRepository`` loads and a kernel's
own ``kernel-depends`` (resolved recursively with the same resolver) end in ``HubResolver.resolve`` or
``HubCacheResolver.resolve``; ``get_locked_kernel``/``load_kernel``/``LockedLayerRepository`` in the ``Locked*``
pair. For a locked repo the hook answers with the verified local build (a ``LocalKernel`` with its Hub origin, so
``kernels.get_loaded_kernels()`` reports repo and commit): no refs lookup, no trust check, no download. Local
resolvers (``LOCAL_KERNELS``, ``get_local_kernel``) run before the Hub resolvers and are left alone.
``kernels._versions.resolve_version_spec_as_ref`` (``version=N`` -> a commit, which ``LayerRepository`` /
``FuncRepository`` ask before loading) answers the locked commit. Variants are chosen by kernlock's copy of this
generation's rule (:mod:`kernlock.variants.rule`, the lock's ``variant-rule = "kernels-0.17"``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kernlock.runtime.loaders._common import (
    VERSION_REF,
    Patcher,
    clear_revision_caches,
    find,
    has_params,
    hook_version_ref,
    hooked,
    read_call,
    wrap,
)

__all__ = ["CALLS", "COVERAGE", "ID", "RESOLVERS", "SEAMS", "install", "missing"]

ID = "kernels-0.17"
RESOLVERS = ("HubResolver", "HubCacheResolver", "LockedHubResolver", "LockedHubCacheResolver")

#: (module, attribute path, parameters it must take) of every seam this adapter patches or builds on.
SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    *(("kernels.resolver", f"{name}.resolve", ("kernel",)) for name in RESOLVERS),
    ("kernels._versions", "resolve_version_spec_as_ref", ("repo_id", "version_spec")),
    ("kernels.resolver", "LocalKernel", ("variant_path", "metadata", "origin")),
    ("kernels.resolver", "RemoteKernel", ("repo_id", "revision", "metadata", "variant")),
    ("kernels.variants", "parse_variant", ()),
)
#: (module, function, global it must look up at call time): none, the resolver classes are the seams.
CALLS: tuple[tuple[str, str, str], ...] = ()

_RESOLVERS = "kernels.resolver HubResolver/HubCacheResolver.resolve"
_LOCKED_RESOLVERS = "kernels.resolver LockedHubResolver/LockedHubCacheResolver.resolve"
#: Each load path (:data:`kernlock.runtime.loaders.PATHS`) -> (pinned by kernlock, how): `kernlock env`.
COVERAGE: dict[str, tuple[bool, str]] = {
    "get_kernel(version=N)": (True, _RESOLVERS),
    "get_kernel(revision=R)": (True, f"{_RESOLVERS}; the lock must satisfy the revision"),
    'transformers attn_implementation="org/repo"': (True, f"kernels.get_kernel -> {_RESOLVERS}"),
    'transformers attn_implementation="flash_attention_2" fallback': (True, f"kernels.get_kernel -> {_RESOLVERS}"),
    "LayerRepository / kernelize": (True, f"{VERSION_REF} + {_RESOLVERS}"),
    "FuncRepository": (True, f"{VERSION_REF} + {_RESOLVERS}"),
    "get_locked_kernel / load_kernel": (True, f"{_LOCKED_RESOLVERS}; their commit must be the locked one"),
    "LockedLayerRepository": (True, f"{_LOCKED_RESOLVERS}; their commit must be the locked one"),
    "has_kernel": (True, _RESOLVERS),
    "install_kernel": (True, _RESOLVERS),
    "kernel dependencies (kernel-depends)": (True, f"{_RESOLVERS} (each dependency, recursively)"),
}


def _metadata() -> Any:
    for module in ("kernels._rust", "kernels"):
        metadata = find(module, "Metadata")
        if callable(getattr(metadata, "read_from_file", None)):
            return metadata
    return None


def missing() -> list[str]:
    """The seams this kernels lacks (empty: this adapter fits)."""
    gaps = [f"{module}.{path}" for module, path, params in SEAMS if not has_params(find(module, path), *params)]
    if _metadata() is None:
        gaps.append("kernels._rust.Metadata.read_from_file")
    return gaps


def install(patcher: Patcher) -> None:
    from kernels import _versions, resolver

    for name in RESOLVERS:
        cls = getattr(resolver, name)
        if not hooked(cls.resolve):
            patcher.replace(cls, "resolve", _hook_resolve(cls.resolve, name))
    if not hooked(_versions.resolve_version_spec_as_ref):
        patcher.replace(
            _versions, "resolve_version_spec_as_ref", hook_version_ref(_versions.resolve_version_spec_as_ref)
        )
    clear_revision_caches()


def _request(owner: Any, call: dict[str, Any]) -> tuple[str, int | None, str | None, str | None] | None:
    """(repo, version, revision, backend) a ``resolve`` call asks for; for kernels' own lock resolvers the
    revision is the commit in that lock. None when the call does not read as expected."""
    try:
        kernel = call.get("kernel")
        repo = getattr(kernel, "repo_id", None)
        backend = call.get("backend")
        if not isinstance(repo, str) or not (backend is None or isinstance(backend, str)):
            return None
        locks = getattr(owner, "kernel_locks", None)
        if locks is not None:
            lock = locks.get(kernel, None)
            commit = getattr(lock, "commit", None)
            if isinstance(commit, str):
                return repo, None, commit, backend
        spec = getattr(kernel, "version", None)
        version = getattr(spec, "version", None)
        if isinstance(version, int) and not isinstance(version, bool):
            return repo, version, None, backend
        revision = getattr(spec, "revision", None)
        if isinstance(revision, str):
            return repo, None, revision, backend
    except Exception:
        return None
    return None


def _hook_resolve(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    def body(
        original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from kernlock.runtime import policy

        if not policy.active():
            return original(*args, **kwargs)
        call = read_call(sig, args, kwargs)
        request = _request(args[0] if args else None, call) if call is not None else None
        if request is None:
            policy.warn_once(
                f"unreadable:{name}",
                f"could not read a call to kernels' {name}.resolve; it was passed on unchanged, so that load is not "
                "pinned by kernels.lock. Upgrade kernlock: `pip install -U kernlock`.",
            )
            return original(*args, **kwargs)
        repo, version, revision, backend = request
        located = policy.locate(repo, version=version, revision=revision, backend=backend)
        if located is None:  # unlocked, warn mode
            return original(*args, **kwargs)
        return _local_kernel(located)

    return wrap(original, body)


#: Variant name -> kernels' parsed ``Variant`` (a value object, a pure function of the name): the kernels a process
#: loads mostly share this environment's variant, and parsing one costs ~40 us.
_variants: dict[str, Any] = {}


def _variant(name: str) -> Any:
    variant = _variants.get(name)
    if variant is None:
        from kernels.variants import parse_variant

        variant = _variants[name] = parse_variant(name)
    return variant


def _local_kernel(located: Any) -> Any:
    """A kernels ``LocalKernel`` for the verified build, with its Hub origin (repo, commit) recorded."""
    from kernels.resolver import LocalKernel, RemoteKernel

    metadata = _metadata().read_from_file(located.path / "metadata.json")
    origin = RemoteKernel(
        repo_id=located.entry.repo,
        revision=located.entry.commit,
        metadata=metadata,
        variant=_variant(located.variant.name),
    )
    return LocalKernel(variant_path=located.path, metadata=metadata, origin=origin)
