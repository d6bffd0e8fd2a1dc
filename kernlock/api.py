"""kernlock's library API: what each command does, without parsing or printing (the CLI does that).

Each function lives in the module of its job (:mod:`kernlock.locking`, :mod:`kernlock.installing`,
:mod:`kernlock.reports`, :mod:`kernlock.interop`, :mod:`kernlock.airgap`); this module names them all and imports
a job's module when one of its names is first used, so a command pays only for its own job.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

_HOMES = {
    "AddResult": "locking",
    "LockResult": "locking",
    "add": "locking",
    "lock": "locking",
    "read_lock": "locking",
    "remove": "locking",
    "stale_reason": "locking",
    "target_environments": "locking",
    "Upgrade": "project",
    "ShowResult": "installing",
    "show": "installing",
    "sync": "installing",
    "sync_after_add": "installing",
    "verify": "installing",
    "env_report": "reports",
    "outdated": "reports",
    "export": "interop",
    "import_kernels": "interop",
    "BundleResult": "airgap",
    "bundle": "airgap",
    "mirror_app": "airgap",
    "serve": "airgap",
    "sync_from": "airgap",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """``api.<name>``: imported from its job's module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kernlock.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kernlock.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
