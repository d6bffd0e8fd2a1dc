"""The Hub kernels transformers loads by itself, at run time (docs/activation.md, "Kernels transformers loads by
itself").

transformers 5.25 kernelizes every ``from_pretrained`` with its default kernel mapping (on cuda, rocm, xpu, mps;
before 5.25, with ``use_kernels=True``), and kernels' ``kernelize`` loads each mapped layer through
``LayerRepository.load``. A kernel of that mapping which kernels.lock locks here loads as any locked kernel (the
resolver hooks of :mod:`kernlock.runtime.loaders`: the lock wins over the mapping's version). One it does not lock
here is not loaded: strict mode stops with one line naming `kernlock add --implicit`; warn mode says so in one
warning line and raises :class:`~kernlock.errors.SkippedKernelError`, a FileNotFoundError, which kernelize (its
``KernelizeFallback.CANNOT_LOAD``) answers by keeping torch's own forward for that layer.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from kernlock.errors import SkippedKernelError

__all__ = ["install", "refuse_unlocked"]

_MARK = "__kernlock_implicit__"


def install() -> None:
    """Wrap kernels' ``LayerRepository.load`` (once), and ``_resolve_revision`` where it has one (kernels 0.17 and
    older resolve a ``version=N`` there, also for the log line kernelize writes before it loads)."""
    cls = getattr(sys.modules.get("kernels"), "LayerRepository", None)
    load = getattr(cls, "load", None)
    if cls is None or not callable(load) or getattr(load, _MARK, False):
        return

    @functools.wraps(load)
    def hooked_load(self: Any, *args: Any, **kwargs: Any) -> Any:
        skipped = refuse_unlocked(self)
        if skipped is not None:
            raise SkippedKernelError(skipped)
        return load(self, *args, **kwargs)

    setattr(hooked_load, _MARK, True)
    cls.load = hooked_load
    resolve = getattr(cls, "_resolve_revision", None)
    if not callable(resolve):
        return

    @functools.wraps(resolve)
    def hooked_resolve(self: Any, *args: Any, **kwargs: Any) -> Any:
        skipped = refuse_unlocked(self)
        if skipped is not None:  # only a log line asks now: load() skips it
            return f"{getattr(self, '_version', None) or getattr(self, '_revision', None)} (not in kernels.lock)"
        return resolve(self, *args, **kwargs)

    for name in ("cache_clear", "cache_info"):  # an lru cache, which activation clears
        if callable(getattr(resolve, name, None)):
            setattr(hooked_resolve, name, getattr(resolve, name))
    cls._resolve_revision = hooked_resolve


def _mapped_layers(repo: Any) -> tuple[tuple[str, str, str], list[str]] | None:
    """``repo``'s identity and the layers of transformers' default mapping that load it; None when it is not a
    repository of that mapping (or transformers is not imported)."""
    from kernlock.environments.implicit import layer_identity, mapped_kernels

    hub_kernels = sys.modules.get("transformers.integrations.hub_kernels")
    build = getattr(hub_kernels, "get_kernel_mapping_transformers", None)
    identity = layer_identity(repo)
    if build is None or identity is None:
        return None
    try:
        kernels = mapped_kernels(build())  # the mapping is built once by transformers, then its cache
    except Exception:  # a mapping of another shape: not ours to judge
        return None
    layers = sorted({k.layer for k in kernels if (k.repo, k.kernel_layer, k.rev) == identity})
    return (identity, layers) if layers else None


def refuse_unlocked(repo: Any) -> str | None:
    """Before kernels loads ``repo`` (a ``LayerRepository``): a kernel of transformers' default mapping that
    kernels.lock does not lock for this environment is refused (strict: ActivationError) or skipped (warn: one
    warning line, and the message of the SkippedKernelError that keeps torch's forward); None: load it."""
    from kernlock.runtime import policy

    if not policy.active():
        return None
    found = _mapped_layers(repo)
    if found is None:
        return None
    (repo_id, _, rev), layers = found
    view, environment = policy.current_lock()
    if environment not in view.environments:
        return None  # the load itself says that the lock does not cover this machine
    entry = view.entry_for(repo_id, environment)
    if entry is not None and entry.variant_for(environment) is not None:
        return None  # locked here: the resolver hooks serve the locked build
    asked = f"version={rev[1:]}" if rev[:1] == "v" and rev[1:].isdigit() else f"revision={rev}"
    if os.environ.get("KERNLOCK_RECORD"):  # `kernlock run --record` sees it too
        from kernlock.runtime import recording

        recording.note(repo_id, asked, False)
    what = (
        f"{repo_id} ({asked}) is loaded by transformers' default kernel mapping (layer{'s' * (len(layers) > 1)} "
        f"{', '.join(layers)}), but "
        f"kernels.lock does not lock it for {environment}"
    )
    fix = f"lock it with `kernlock add --implicit {repo_id}` (`kernlock add --implicit` locks all it loads)"
    if policy.strict():
        from kernlock.errors import ActivationError

        raise ActivationError(
            what,
            fix=f"{fix}, or turn transformers' Hub kernels off with USE_HUB_KERNELS=0 (or set KERNLOCK_MODE=warn to "
            "keep torch's own forward for it)",
        )
    policy.warn_once(f"implicit:{repo_id}", f"{what}: keeping torch's own forward for it; {fix}.")
    return f"{what}; {fix}."
