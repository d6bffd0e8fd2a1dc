"""Hooks into ``transformers``: kernlock's errors reach the user intact.

transformers loads Hub kernels through ``kernels`` (hooked in :mod:`kernlock.runtime.policy`), so the lock
already decides what loads; transformers' default versions (``FLASH_ATTN_KERNEL_VERSIONS``) are overridden there.
What transformers does do is rewrap failures: ``load_and_register_attn_kernel`` turns them into a ValueError,
and the ``attn_implementation="flash_attention_N"`` fallback replaces any failure with "flash_attn is not
installed". One wrapper, around ``PreTrainedModel._check_and_adjust_attn_implementation`` (the method every
attention choice passes: model init, ``from_pretrained``, ``set_attn_implementation``), re-raises the kernlock
error found in the exception chain instead. The kernels transformers loads by itself (its default kernel mapping,
in every ``from_pretrained`` from 5.25 on) are guarded by :mod:`kernlock.runtime.implicit`.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

from kernlock.environments.compat import SUPPORTED_TRANSFORMERS
from kernlock.runtime.excepthook import kernlock_error_in

__all__ = ["install", "kernlock_error_in", "surface_kernlock_errors"]

logger = logging.getLogger("kernlock")

_METHOD = "_check_and_adjust_attn_implementation"
_MARK = "__kernlock_hook__"


def install(modeling_utils: ModuleType) -> None:
    """Wrap the attention check (once). A transformers without it still loads the locked builds (every Hub load goes
    through the kernels hooks); only kernlock's error messages may then reach the user rewrapped: say so once.
    Also hook the model folders' save and load (:mod:`kernlock.runtime.provenance_hooks`), and the loads of the
    kernels transformers' default kernel mapping names (:mod:`kernlock.runtime.implicit`)."""
    from kernlock.runtime import implicit, provenance_hooks

    provenance_hooks.install_models(modeling_utils)
    implicit.install()
    model = getattr(modeling_utils, "PreTrainedModel", None)
    method = getattr(model, _METHOD, None)
    if method is None:
        import transformers

        logger.warning(
            "kernlock: transformers %s has no PreTrainedModel.%s: locked builds still load, but kernlock's errors "
            "may reach you rewrapped by transformers. kernlock is tested with %s; upgrade kernlock for this one.",
            transformers.__version__,
            _METHOD,
            SUPPORTED_TRANSFORMERS,
        )
        _warn_if_gated()
        return
    if not getattr(method, _MARK, False):
        setattr(model, _METHOD, surface_kernlock_errors(method))
    _warn_if_gated()


def surface_kernlock_errors(fn: Any) -> Any:
    """Wrap ``fn`` so that a KernlockError anywhere in a failure's chain is what the caller sees."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            found = kernlock_error_in(err)
            if found is None or found is err:
                raise
            raise found from None

    setattr(wrapper, _MARK, True)
    return wrapper


def _warn_if_gated() -> None:
    """transformers silently ignores Hub kernels with a kernels version outside its range: say so."""
    from kernlock.environments.compat import transformers_gate

    gate = transformers_gate()
    if gate is not None and not gate.ok:
        logger.warning("kernlock: %s", gate.message())
