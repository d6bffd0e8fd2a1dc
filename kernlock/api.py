"""kernlock's library API: what each command does, without parsing or printing (the CLI does that).

Each function lives in the module of its job (:mod:`kernlock.commands.lock`, :mod:`kernlock.commands.sync`,
:mod:`kernlock.commands.verify`, :mod:`kernlock.commands.show`, :mod:`kernlock.commands.reports`,
:mod:`kernlock.commands.implicit`, :mod:`kernlock.commands.interop`, :mod:`kernlock.commands.airgap`); this module
names them all and imports a job's module when one of its names is first used, so a command pays only for its own
job.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ below imports each on first use
    from kernlock.commands.adopt import Adopted, add_from
    from kernlock.commands.airgap import BundleResult, bundle, mirror_app, serve, sync_from
    from kernlock.commands.implicit import Implicit, add_implicit
    from kernlock.commands.interop import export, import_kernels
    from kernlock.commands.lock import (
        AddResult,
        LockResult,
        add,
        lock,
        read_lock,
        remove,
        stale_reason,
        target_environments,
    )
    from kernlock.commands.reports import env_report, environments, outdated
    from kernlock.commands.show import ShowResult, show
    from kernlock.commands.sync import NotSynced, not_synced_here, sync, sync_after_add
    from kernlock.commands.unchanged import Synced, lock_is_current, synced
    from kernlock.commands.verify import verify
    from kernlock.project.inputs import Upgrade

_HOMES = {
    "Adopted": "commands.adopt",
    "add_from": "commands.adopt",
    "Implicit": "commands.implicit",
    "add_implicit": "commands.implicit",
    "AddResult": "commands.lock",
    "LockResult": "commands.lock",
    "add": "commands.lock",
    "lock": "commands.lock",
    "read_lock": "commands.lock",
    "remove": "commands.lock",
    "stale_reason": "commands.lock",
    "target_environments": "commands.lock",
    "Upgrade": "project.inputs",
    "NotSynced": "commands.sync",
    "ShowResult": "commands.show",
    "not_synced_here": "commands.sync",
    "show": "commands.show",
    "sync": "commands.sync",
    "sync_after_add": "commands.sync",
    "Synced": "commands.unchanged",
    "lock_is_current": "commands.unchanged",
    "synced": "commands.unchanged",
    "verify": "commands.verify",
    "env_report": "commands.reports",
    "outdated": "commands.reports",
    "environments": "commands.reports",
    "export": "commands.interop",
    "import_kernels": "commands.interop",
    "BundleResult": "commands.airgap",
    "bundle": "commands.airgap",
    "mirror_app": "commands.airgap",
    "serve": "commands.airgap",
    "sync_from": "commands.airgap",
}

__all__ = [
    "AddResult",
    "Adopted",
    "BundleResult",
    "Implicit",
    "LockResult",
    "NotSynced",
    "ShowResult",
    "Synced",
    "Upgrade",
    "add",
    "add_from",
    "add_implicit",
    "bundle",
    "env_report",
    "environments",
    "export",
    "import_kernels",
    "lock",
    "lock_is_current",
    "mirror_app",
    "not_synced_here",
    "outdated",
    "read_lock",
    "remove",
    "serve",
    "show",
    "stale_reason",
    "sync",
    "sync_after_add",
    "sync_from",
    "synced",
    "target_environments",
    "verify",
]


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
