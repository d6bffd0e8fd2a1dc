"""The ``kernels-0.19`` generation of the kernels loader (kernels 0.19, which transformers 5.25 requires; its range
and tested releases: :mod:`kernlock.generations.supported`).

kernels 0.18's loader (:mod:`.kernels_0_18`) moved whole under ``kernels._internals`` (``kernels.resolver`` and its
siblings no longer exist), plus one development switch: ``UNSTABLE_KERNELS_ALL_LATEST=1`` makes every Hub load ask
``LatestHubResolver``, "overriding requested versions and any lockfile pin". Under kernlock that is refused in
strict mode and said in one warning line in warn mode (where it then overrides the lock), never obeyed silently.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kernlock.runtime.loaders import _resolvers
from kernlock.runtime.loaders._common import Patcher, find, hooked, read_call, wrap

__all__ = ["CALLS", "COVERAGE", "ID", "SEAMS", "install", "missing"]

ID = "kernels-0.19"
NAMESPACE = _resolvers.Namespace(package="kernels._internals", oid=True)
_LATEST = "UNSTABLE_KERNELS_ALL_LATEST"

#: (module, attribute path, parameters it must take) of every seam this adapter patches or builds on.
SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    *_resolvers.resolver_seams(NAMESPACE),
    _resolvers.signature_seam(NAMESPACE),
    (NAMESPACE.module("resolver"), "LatestHubResolver.resolve", ("kernel",)),
)
#: (module, function, global it must look up at call time): none, the resolver classes are the seams.
CALLS: tuple[tuple[str, str, str], ...] = ()

#: Each load path (:data:`kernlock.runtime.loaders.PATHS`) -> (pinned by kernlock, how): `kernlock env`.
COVERAGE = _resolvers.coverage(
    "kernels._internals.resolver HubResolver/HubCacheResolver.resolve",
    "kernels._internals.resolver LockedHubResolver/LockedHubCacheResolver.resolve",
    "kernels._internals.validate.SignatureValidator",
)


def missing() -> list[str]:
    """The seams this kernels lacks (empty: this adapter fits)."""
    return _resolvers.missing(NAMESPACE, SEAMS)


def install(patcher: Patcher) -> None:
    _resolvers.hook_resolvers(NAMESPACE, patcher)
    _resolvers.hook_signature_check(NAMESPACE, patcher)
    latest = find(NAMESPACE.module("resolver"), "LatestHubResolver")
    if not hooked(latest.resolve):
        patcher.replace(latest, "resolve", wrap(latest.resolve, _latest_body))


def _latest_body(
    original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    from kernlock.errors import ActivationError
    from kernlock.runtime import policy

    if not policy.active():
        return original(*args, **kwargs)
    call = read_call(sig, args, kwargs) or {}
    repo = getattr(call.get("kernel"), "repo_id", None)
    what = repo if isinstance(repo, str) else "a kernel"
    message = f"{_LATEST} is set, which makes kernels load the newest version of {what} over kernels.lock"
    unset = "unset it to load the locked build"
    if policy.strict():
        raise ActivationError(
            message, fix=f"{unset} (or set KERNLOCK_MODE=warn to let it override the lock with a warning)"
        )
    policy.warn_once(f"latest:{what}", f"{message}; {unset}. Loading the newest version, unlocked and unverified.")
    return original(*args, **kwargs)
