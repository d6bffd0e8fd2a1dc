"""Ray jobs: every worker of a job, on every node, honours the driver's kernels.lock (docs/ray.md).

:mod:`kernlock.ray` is the public name of what is here (the hooks Ray is given name it).

Ray's workers are not children of the user's command: each node's raylet starts them, with the raylet's
environment plus the job's ``runtime_env``. So kernlock gives the job a runtime_env of its own, merged into the
job's: the lock, shipped in a tiny package in ``py_modules`` (Ray uploads it once and unpacks it on every node), and a
``worker_process_setup_hook`` that activates kernlock in each worker before any task or actor code runs, with the
lock's mode and the driver's explicit cache and Hub settings (a node's own variables win, as a rank's do under
`kernlock run`). A node whose kernel cache lacks a locked build fetches it at the first load, verified, under the
cache's file lock: once per node however many workers start there at once.

Three ways in, all the same runtime_env:

- an activated driver (``import kernlock.activate``, or a driver under `kernlock run`): activation sets Ray's own
  ``RAY_RUNTIME_ENV_HOOK`` to :func:`runtime_env_hook` when Ray is imported, so every ``ray.init()`` (explicit, or
  the one Ray Train makes by itself) merges it into the job's runtime_env;
- ``ray.init(runtime_env=kernlock.ray.runtime_env({...}))`` in any driver;
- ``ray job submit --runtime-env-json "$(kernlock ray-env)" -- python driver.py``.

This module imports neither ray nor torch at import time.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from kernlock.runtime.activation import RAY_NEXT_HOOK_ENV

__all__ = ["PACKAGE_ENV", "SETUP", "runtime_env", "runtime_env_hook", "setup_worker"]

#: The variable that names the shipped package in a worker (the job's ``env_vars``).
PACKAGE_ENV = "KERNLOCK_RAY_PACKAGE"
#: The worker setup hook kernlock gives the job, and where a job's own (a ``module.function`` string) is kept.
SETUP = "kernlock.ray.setup_worker"
NEXT_SETUP_ENV = "KERNLOCK_RAY_NEXT_SETUP"
#: A worker's Ray node (its id's first 12 characters): what its records and errors name.
NODE_ENV = "KERNLOCK_NODE"

_PREFIX = "kernlock_lock_"
#: Settings a node keeps when it has its own (its cache, its Hub, its offline switch); the lock and mode are the job's.
_NODE_WINS = ("KERNLOCK_VERIFY", "KERNELS_CACHE", "HF_ENDPOINT", "KERNLOCK_RECORD")
_PACKAGE_INIT = '''"""Written by kernlock for a Ray job: the job's kernels.lock (beside this file) and its settings."""

LOCK = "kernels.lock"
SETTINGS = {settings}
'''


def runtime_env(
    base: dict[str, Any] | None = None,
    *,
    lockfile: str | os.PathLike[str] | None = None,
    mode: str | None = None,
) -> dict[str, Any]:
    """``base`` (the job's runtime_env, unchanged) with kernlock's merged in: the lock shipped to every node and
    activated in every worker before its first task. ``lockfile`` and ``mode`` as :func:`kernlock.activate` finds
    them (this process's activation when it has one). Raises ActivationError (no lock, a setup hook Ray cannot
    chain)."""
    from kernlock.runtime import activation

    current = activation.settings()
    if lockfile is None and mode is None and current is not None:
        path, chosen, verify = current.lockfile, current.mode, current.verify
    else:
        path = activation.find_lockfile(lockfile, script=False)
        chosen = activation.choose_mode(mode)
        verify = activation.choose_verify()
    package = _package(Path(path), _settings(chosen, verify))
    return _merged(dict(base or {}), package)


def runtime_env_hook(env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray's ``RAY_RUNTIME_ENV_HOOK`` (set by activation when Ray is imported): the hook set before kernlock's
    first, then kernlock's runtime_env merged in when this process is activated."""
    from kernlock.runtime import activation

    following = os.environ.get(RAY_NEXT_HOOK_ENV)
    if following:
        env = _load(following, "RAY_RUNTIME_ENV_HOOK")(env)
    if activation.settings() is None:
        return dict(env or {})
    return runtime_env(env)


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook``: activate kernlock in this worker with the job's lock and mode, then run
    the job's own setup hook, if it had one."""
    name = os.environ.get(PACKAGE_ENV)
    if name:
        from kernlock.runtime import activation

        package = importlib.import_module(name)
        folder = Path(package.__file__ or "").parent
        settings: dict[str, str] = dict(package.SETTINGS)
        for key in _NODE_WINS:
            if key in settings:
                os.environ.setdefault(key, settings.pop(key))
        os.environ.update(settings)  # the lock's mode: the job's, whatever the node says
        os.environ["KERNLOCK_LOCKFILE"] = str(folder / package.LOCK)
        os.environ.setdefault(NODE_ENV, _node())
        activation.activate(lockfile=os.environ["KERNLOCK_LOCKFILE"], mode=settings["KERNLOCK_MODE"])
    following = os.environ.get(NEXT_SETUP_ENV)
    if following:
        _load(following, "worker_process_setup_hook")()


# -- the package ----------------------------------------------------------------------------------------------


def _settings(mode: str, verify: str) -> dict[str, str]:
    """What workers take from the driver: the mode always; verification, the record folder and the Hub when set;
    the kernel cache only when it was chosen (a node's default cache is under its own HOME)."""
    from kernlock.sync.cache import cache_dir, default_cache_dir

    chosen = {"KERNLOCK_MODE": mode}
    if verify != "receipt":
        chosen["KERNLOCK_VERIFY"] = verify
    for key in ("HF_ENDPOINT", "KERNLOCK_RECORD"):
        if os.environ.get(key):
            chosen[key] = os.environ[key]
    cache = os.path.abspath(cache_dir())
    if cache != os.path.abspath(default_cache_dir()):
        chosen["KERNELS_CACHE"] = cache
    return chosen


def _package(lock: Path, settings: dict[str, str]) -> Path:
    """The folder Ray ships as a module: the lock's bytes and the settings, named after both (written once). The
    lock is read as `kernlock run` reads it first: a damaged one is refused here, not on every worker."""
    from kernlock.lock import file as lockfiles
    from kernlock.util.kept import digest, private_folder

    text = lockfiles.read_text(lock)
    lockfiles.loads(text, str(lock))
    data = text.encode()
    init = _PACKAGE_INIT.replace("{settings}", repr(dict(sorted(settings.items()))), 1).encode()
    files = {"__init__.py": init, "kernels.lock": data}
    name = _PREFIX + digest(data + bytes(1) + init)
    return private_folder(lock.parent, "ray", name, files, "the lock shipped to Ray workers")


def _merged(env: dict[str, Any], package: Path) -> dict[str, Any]:
    """``env`` with the package in ``py_modules``, its name in ``env_vars`` and kernlock's setup hook (a job's own
    hook, a ``module.function`` string, runs after it)."""
    env_vars = dict(env.get("env_vars") or {})
    env_vars[PACKAGE_ENV] = package.name
    modules = [m for m in env.get("py_modules") or [] if not _ours(m)]
    env["py_modules"] = [*modules, str(package)]
    theirs = env.get("worker_process_setup_hook")
    if theirs is not None and theirs != SETUP:
        if not isinstance(theirs, str):
            from kernlock.errors import ActivationError

            raise ActivationError(
                f"the job's runtime_env has a worker_process_setup_hook kernlock cannot run after its own ({theirs!r})",
                fix="give it as a 'module.function' string, and kernlock runs it after activating the worker",
            )
        env_vars[NEXT_SETUP_ENV] = theirs
    env["worker_process_setup_hook"] = SETUP
    env["env_vars"] = env_vars
    return env


def _ours(module: object) -> bool:
    return isinstance(module, (str, os.PathLike)) and Path(module).name.startswith(_PREFIX)


def _load(name: str, what: str) -> Any:
    """The function ``module.function`` names (Ray's own form for its hooks)."""
    module, _, function = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError, ValueError) as err:
        from kernlock.errors import ActivationError

        raise ActivationError(
            f"cannot load the {what} {name!r}", why=str(err), fix="fix the name, or unset it"
        ) from err


def _node() -> str:
    """This worker's Ray node id (12 characters), else the host name."""
    ray = sys.modules.get("ray")
    try:  # only where connected: Ray's runtime context would otherwise start a cluster
        if ray is not None and ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())[:12]
    except Exception:
        pass
    return os.uname().nodename
