"""The ``kernels-0.18`` generation of the kernels loader (kernels 0.18, beside transformers 5.23-5.24; its range and
tested releases: :mod:`kernlock.generations.supported`).

The resolvers of kernels 0.17 (:mod:`._resolvers`), with two changes kernlock must follow: commits are kernels'
``Oid`` (a ``str`` revision in a build's origin is refused by its validators), and every load is checked after
install by kernels' own validators: a digest check (kept) and a signature check against sigstore's production
root over the network, which stands aside for builds kernlock verified (:func:`._resolvers.hook_signature_check`).
``LayerRepository``/``FuncRepository`` now load through ``get_kernel``, so the resolvers cover them too.
"""

from __future__ import annotations

from kernlock.runtime.loaders import _resolvers
from kernlock.runtime.loaders._common import Patcher

__all__ = ["CALLS", "COVERAGE", "ID", "SEAMS", "install", "missing"]

ID = "kernels-0.18"
NAMESPACE = _resolvers.Namespace(package="kernels", oid=True)

#: (module, attribute path, parameters it must take) of every seam this adapter patches or builds on.
SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    *_resolvers.resolver_seams(NAMESPACE),
    _resolvers.signature_seam(NAMESPACE),
)
#: (module, function, global it must look up at call time): none, the resolver classes are the seams.
CALLS: tuple[tuple[str, str, str], ...] = ()


#: Each load path (:data:`kernlock.runtime.loaders.PATHS`) -> (pinned by kernlock, how): `kernlock env`.
COVERAGE = _resolvers.coverage(
    "kernels.resolver HubResolver/HubCacheResolver.resolve",
    "kernels.resolver LockedHubResolver/LockedHubCacheResolver.resolve",
    "kernels.validate.SignatureValidator",
)


def missing() -> list[str]:
    """The seams this kernels lacks (empty: this adapter fits)."""
    return _resolvers.missing(NAMESPACE, SEAMS)


def install(patcher: Patcher) -> None:
    _resolvers.hook_resolvers(NAMESPACE, patcher)
    _resolvers.hook_signature_check(NAMESPACE, patcher)
