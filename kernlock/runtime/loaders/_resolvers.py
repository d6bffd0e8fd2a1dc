"""What the resolver generations of the kernels loader share (kernels 0.17, 0.18, 0.19): every Hub load asks a
resolver object, and kernlock answers a locked repo's request with its verified local build.

``get_kernel``, ``has_kernel``, ``install_kernel``, ``LayerRepository``/``FuncRepository`` loads and a kernel's own
``kernel-depends`` (resolved recursively with the same resolver) end in ``HubResolver.resolve`` or
``HubCacheResolver.resolve``; ``get_locked_kernel``/``load_kernel``/``LockedLayerRepository`` in the ``Locked*``
pair. For a locked repo the hook answers with the verified local build (a ``LocalKernel`` with its Hub origin, so
``kernels.get_loaded_kernels()`` reports repo and commit): no refs lookup, no trust check, no download. Local
resolvers (``LOCAL_KERNELS``, ``get_local_kernel``) run before the Hub resolvers and are left alone.

The generations differ in where these live (:class:`Namespace`: ``kernels.resolver`` up to 0.18,
``kernels._internals.resolver`` from 0.19) and in how a commit is written (a ``str`` up to 0.17, kernels'
``Oid`` from 0.18). Each generation's module names its own seams, coverage and extra hooks and calls these.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from kernlock.runtime.loaders._common import Patcher, find, has_params, hooked, read_call, unreadable, wrap

__all__ = [
    "RESOLVERS",
    "Namespace",
    "commit_text",
    "coverage",
    "hook_resolvers",
    "hook_signature_check",
    "missing",
    "resolver_seams",
    "signature_seam",
]

RESOLVERS = ("HubResolver", "HubCacheResolver", "LockedHubResolver", "LockedHubCacheResolver")


class Namespace(NamedTuple):
    """Where a generation's loader lives and how it writes a commit."""

    #: The package of its modules: ``kernels`` (0.17, 0.18) or ``kernels._internals`` (0.19).
    package: str
    #: Whether commits are kernels' ``Oid`` (0.18 on) rather than ``str``.
    oid: bool

    def module(self, name: str) -> str:
        """The full name of its module ``name`` (``resolver`` -> ``kernels._internals.resolver``)."""
        return f"{self.package}.{name}"


def coverage(resolvers: str, locked: str, signature: str) -> dict[str, tuple[bool, str]]:
    """Each load path (:data:`kernlock.runtime.loaders.PATHS`) -> (pinned by kernlock, how), for a resolver
    generation whose layer repositories load through ``get_kernel`` (0.18 on)."""
    checked = f"{resolvers}; {signature} stands aside for the verified build"
    return {
        "get_kernel(version=N)": (True, checked),
        "get_kernel(revision=R)": (True, f"{checked}; the lock must satisfy the revision"),
        'transformers attn_implementation="org/repo"': (True, f"kernels.get_kernel -> {resolvers}"),
        'transformers attn_implementation="flash_attention_2" fallback': (True, f"kernels.get_kernel -> {resolvers}"),
        "LayerRepository / kernelize": (True, f"kernels.get_kernel -> {resolvers}"),
        "FuncRepository": (True, f"kernels.get_kernel -> {resolvers}"),
        "get_locked_kernel / load_kernel": (True, f"{locked}; their commit must be the locked one"),
        "LockedLayerRepository": (True, f"{locked}; their commit must be the locked one"),
        "has_kernel": (True, resolvers),
        "install_kernel": (True, resolvers),
        "kernel dependencies (kernel-depends)": (True, f"{resolvers} (each dependency, recursively)"),
    }


def resolver_seams(ns: Namespace) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(module, attribute path, parameters) of the resolver seams every resolver generation patches or builds on."""
    resolver = ns.module("resolver")
    return (
        *((resolver, f"{name}.resolve", ("kernel",)) for name in RESOLVERS),
        (resolver, "LocalKernel", ("variant_path", "metadata", "origin")),
        (resolver, "RemoteKernel", ("repo_id", "revision", "metadata", "variant")),
        (ns.module("variants"), "parse_variant", ()),
    )


def _metadata() -> Any:
    for module in ("kernels._rust", "kernels"):
        metadata = find(module, "Metadata")
        if callable(getattr(metadata, "read_from_file", None)):
            return metadata
    return None


def missing(ns: Namespace, seams: tuple[tuple[str, str, tuple[str, ...]], ...]) -> list[str]:
    """The seams of ``seams`` this kernels lacks, and the metadata reader and ``Oid`` the answers need."""
    gaps = [f"{module}.{path}" for module, path, params in seams if not has_params(find(module, path), *params)]
    if _metadata() is None:
        gaps.append("kernels._rust.Metadata.read_from_file")
    if ns.oid and not callable(getattr(find("kernels._rust", "Oid"), "from_str", None)):
        gaps.append("kernels._rust.Oid.from_str")
    return gaps


def hook_resolvers(ns: Namespace, patcher: Patcher) -> None:
    """Patch the four Hub resolvers' ``resolve`` of ``ns`` (once: hooks are marked)."""
    resolver = find(ns.module("resolver"))
    for name in RESOLVERS:
        cls = getattr(resolver, name)
        if not hooked(cls.resolve):
            patcher.replace(cls, "resolve", _hook_resolve(cls.resolve, name, ns))


def signature_seam(ns: Namespace) -> tuple[str, str, tuple[str, ...]]:
    """kernels' load-time signature check (0.18 on): ``SignatureValidator.validate_kernel(kernel=)``."""
    return (ns.module("validate"), "SignatureValidator.validate_kernel", ("kernel",))


def hook_signature_check(ns: Namespace, patcher: Patcher) -> None:
    """kernels 0.18+ checks a loaded build's signature against sigstore's production trust root, over the network
    (offline it dies with a TUF error; a bad signature only warns). For a build kernlock served, that check is
    kernlock's: its signature was verified at lock time against the project's trusted root and signer policy,
    re-verified offline at sync, and the load checked every file against the hashes the lock records (metadata and
    signature bundle included). Every other build gets kernels' own check; kernels' digest check always runs."""
    cls = find(ns.module("validate"), "SignatureValidator")
    if not hooked(cls.validate_kernel):
        patcher.replace(cls, "validate_kernel", wrap(cls.validate_kernel, _signature_body))


def _signature_body(
    original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    from kernlock.runtime import policy

    call = read_call(sig, args, kwargs) if policy.active() else None
    kernel = call.get("kernel") if call is not None else None
    if kernel is not None and policy.origin_of(getattr(kernel, "variant_path", None)) is not None:
        return None  # a build kernlock verified against kernels.lock in this process
    try:
        return original(*args, **kwargs)
    except Exception as err:
        if kernel is None or not _root_unreachable(err):
            raise
        raise _unchecked(kernel, err) from None


def _root_unreachable(err: BaseException) -> bool:
    """sigstore could not fetch its production trust root (no network): kernels' check could not run at all."""
    kind = type(err)
    return kind.__name__ == "TUFError" and kind.__module__.startswith("sigstore")


def _unchecked(kernel: Any, err: BaseException) -> Exception:
    """The one line for an unlocked build whose signature kernels could not check (its trust root unreachable)."""
    from kernlock.errors import ActivationError

    repo = getattr(getattr(kernel, "origin", None), "repo_id", None)
    repo = repo if isinstance(repo, str) else "a kernel kernels.lock does not lock"
    return ActivationError(
        f"kernels could not check the signature of {repo}, which kernels.lock does not lock",
        why=f"sigstore's trust root is unreachable from this machine ({type(err).__name__}: {err})",
        fix=f"Lock it with `kernlock add {repo}` and `kernlock sync` (kernlock checks a locked build's signature at "
        "lock time, and loads it offline), or let this machine reach sigstore's trust root",
    )


def commit_text(commit: Any) -> str | None:
    """A commit as kernels wrote it (``str``, or ``Oid`` from kernels 0.18 on), as 40 hex digits; else None."""
    if isinstance(commit, str):
        return commit
    if commit is None or type(commit).__name__ != "Oid":
        return None
    text = str(commit)
    return text if len(text) in (40, 64) else None


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
            commit = commit_text(getattr(lock, "commit", None))
            if commit is not None:
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


def _hook_resolve(original: Callable[..., Any], name: str, ns: Namespace) -> Callable[..., Any]:
    def body(
        original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from kernlock.runtime import policy

        if not policy.active():
            return original(*args, **kwargs)
        call = read_call(sig, args, kwargs)
        request = _request(args[0] if args else None, call) if call is not None else None
        if request is None:
            unreadable(f"{name}.resolve")
            return original(*args, **kwargs)
        repo, version, revision, backend = request
        located = policy.locate(repo, version=version, revision=revision, backend=backend)
        if located is None:  # unlocked, warn mode
            return original(*args, **kwargs)
        return _local_kernel(located, ns)

    return wrap(original, body)


#: (namespace, variant name) -> kernels' parsed ``Variant`` (a value object, a pure function of the name): the
#: kernels a process loads mostly share this environment's variant, and parsing one costs ~40 us.
_variants: dict[tuple[str, str], Any] = {}


def _variant(ns: Namespace, name: str) -> Any:
    variant = _variants.get((ns.package, name))
    if variant is None:
        parse_variant = find(ns.module("variants"), "parse_variant")
        variant = _variants[(ns.package, name)] = parse_variant(name)
    return variant


def _local_kernel(located: Any, ns: Namespace) -> Any:
    """A kernels ``LocalKernel`` for the verified build, with its Hub origin (repo, commit) recorded."""
    resolver = find(ns.module("resolver"))
    commit: Any = located.entry.commit
    if ns.oid:
        commit = find("kernels._rust", "Oid").from_str(commit)
    metadata = _metadata().read_from_file(located.path / "metadata.json")
    origin = resolver.RemoteKernel(
        repo_id=located.entry.repo,
        revision=commit,
        metadata=metadata,
        variant=_variant(ns, located.variant.name),
    )
    return resolver.LocalKernel(variant_path=located.path, metadata=metadata, origin=origin)
