"""The ``kernels-0.17`` generation of the kernels loader (kernels 0.17; its range and tested releases:
:mod:`kernlock.generations.supported`): every Hub load asks a resolver object (:mod:`._resolvers`).

``kernels._versions.resolve_version_spec_as_ref`` (``version=N`` -> a commit, which ``LayerRepository`` /
``FuncRepository`` ask before loading) answers the locked commit. Variants are chosen by kernlock's copy of this
generation's rule (:mod:`kernlock.variants.rule`, the lock's ``variant-rule = "kernels-0.17"``).
"""

from __future__ import annotations

from kernlock.runtime.loaders import _resolvers
from kernlock.runtime.loaders._common import VERSION_REF, Patcher, clear_revision_caches, hook_version_ref, hooked

__all__ = ["CALLS", "COVERAGE", "ID", "SEAMS", "install", "missing"]

ID = "kernels-0.17"
NAMESPACE = _resolvers.Namespace(package="kernels", oid=False)

#: (module, attribute path, parameters it must take) of every seam this adapter patches or builds on.
SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    *_resolvers.resolver_seams(NAMESPACE),
    ("kernels._versions", "resolve_version_spec_as_ref", ("repo_id", "version_spec")),
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


def missing() -> list[str]:
    """The seams this kernels lacks (empty: this adapter fits)."""
    return _resolvers.missing(NAMESPACE, SEAMS)


def install(patcher: Patcher) -> None:
    from kernels import _versions

    _resolvers.hook_resolvers(NAMESPACE, patcher)
    if not hooked(_versions.resolve_version_spec_as_ref):
        patcher.replace(
            _versions, "resolve_version_spec_as_ref", hook_version_ref(_versions.resolve_version_spec_as_ref)
        )
    clear_revision_caches()
