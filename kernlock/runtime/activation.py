"""Run-time activation: every Hub kernel load in this process honours ``kernels.lock`` (docs/activation.md).

``activate()`` finds the lock and reads the settings; it imports neither torch, transformers nor kernels. The
hooks live in :mod:`kernlock.runtime.policy` and :mod:`kernlock.runtime.transformers_hooks` and install right after
``kernels`` / ``transformers.modeling_utils`` are imported (at once if they already are), through a
``sys.meta_path`` entry that only watches those two names. This module stays small and cheap to import.
"""

from __future__ import annotations

import os
import sys

from kernlock.runtime import excepthook
from kernlock.runtime import state as activated
from kernlock.runtime.state import Settings

TYPE_CHECKING = False  # typing is not imported: activation must stay cheap
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

__all__ = [
    "LOCK_NAME",
    "MODES",
    "SITECUSTOMIZE",
    "VERIFY_MODES",
    "WATCHED",
    "Settings",
    "activate",
    "choose_mode",
    "choose_verify",
    "find_lockfile",
    "run_environment",
    "settings",
]

LOCK_NAME = "kernels.lock"
MODES = ("strict", "warn")
VERIFY_MODES = ("receipt", "full")

# Sources of ``sitecustomize.py`` for `kernlock run`: activate, then run the sitecustomize it shadows.
SITECUSTOMIZE = '''"""Written by `kernlock run`: activate kernlock in every Python process, then chain."""
import importlib, importlib.util, os, sys

# What `kernlock run` saw, restored where a launcher did not pass it on (DeepSpeed multi-node, srun --export=NONE).
for _key, _value in {settings}.items():
    os.environ.setdefault(_key, _value)


def _kernlock_fail(message):
    sys.stderr.write("kernlock: error: %s\\n" % message)
    sys.stderr.flush()
    os._exit(1)


try:
    import kernlock.activate  # noqa: F401
except ModuleNotFoundError as err:
    if err.name != "kernlock":
        _kernlock_fail(err)
    if importlib.util.find_spec("kernels") is not None:
        _kernlock_fail("%s can load Hub kernels but cannot import kernlock; install kernlock there." % sys.executable)
except Exception as err:  # an ActivationError names the fix
    _kernlock_fail(err)

_here = os.path.dirname(os.path.abspath(__file__))
_saved = sys.path[:]
_self = sys.modules.pop("sitecustomize", None)
try:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as err:
        if err.name != "sitecustomize":
            raise
finally:
    sys.path[:] = _saved
    if _self is not None:
        sys.modules["sitecustomize"] = _self
'''


def settings() -> Settings | None:
    """The current activation, or None when kernlock is not activated in this process."""
    return activated.settings()


def activate(lockfile: str | os.PathLike[str] | None = None, mode: str | None = None) -> Settings:
    """Make every Hub kernel load in this process honour the lock (see docs/activation.md).

    ``lockfile``: a path, else ``$KERNLOCK_LOCKFILE``, else ``kernels.lock`` in the current directory or a parent.
    ``mode``: ``strict`` or ``warn``, else ``$KERNLOCK_MODE``, else ``strict``. Raises ActivationError.
    From here on, a kernlock error the program does not catch is one line, ``kernlock: error: <message>``
    (:mod:`kernlock.runtime.excepthook`; the traceback with ``KERNLOCK_DEBUG=1``).
    """
    excepthook.install()  # first: a lock that cannot be found is such an error too
    new = Settings(find_lockfile(lockfile), choose_mode(mode), choose_verify())
    activated.set_settings(new)
    _watch()
    return new


def find_lockfile(
    lockfile: str | os.PathLike[str] | None = None, start: str | None = None, *, script: bool = True
) -> str:
    """The lock to honour (an absolute path): ``lockfile``, else ``$KERNLOCK_LOCKFILE``, else the nearest
    ``kernels.lock`` in ``start`` (default: the current directory) or a parent, else (``script``, without
    ``start``) in the folder of the main script or a parent: ``python proj/train.py`` from the folder above."""
    explicit = lockfile or os.environ.get("KERNLOCK_LOCKFILE")
    if explicit:
        path = os.path.abspath(os.path.expanduser(os.fspath(explicit)))
        if not os.path.isfile(path):
            where = "" if lockfile else " (from KERNLOCK_LOCKFILE)"
            raise _error(f"no lock file at {path}{where}; run `kernlock lock` in the project, or fix the path.")
        return path
    starts = [(os.path.abspath(start or os.getcwd()), "the current folder")]
    main = _main_script() if script and start is None else None
    if main is not None:
        starts.append((os.path.dirname(main), f"the folder of the main script {main}"))
    looked: list[str] = []
    for here, _why in starts:
        folder = here
        while True:
            if folder not in looked:
                looked.append(folder)
                candidate = os.path.join(folder, LOCK_NAME)
                if os.path.isfile(candidate):
                    return candidate
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    upward = " and ".join(f"upward from {why}" for _here, why in starts)
    raise _error(
        f"no {LOCK_NAME} found; looked {upward}, in {', '.join(looked)}. Run `kernlock lock` in the project, run "
        "from the project folder, or set KERNLOCK_LOCKFILE=/path/to/kernels.lock."
    )


def _main_script() -> str | None:
    """The main script's absolute path (``python proj/train.py``), or None (``python -c``, an interactive
    session)."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    return os.path.abspath(path)


def choose_mode(mode: str | None = None) -> str:
    """``mode``, else ``$KERNLOCK_MODE``, else ``strict``; ActivationError when it is no mode."""
    return _choice(mode or os.environ.get("KERNLOCK_MODE") or "strict", MODES, "mode (KERNLOCK_MODE)")


def choose_verify() -> str:
    """``$KERNLOCK_VERIFY``, else ``receipt``; ActivationError when it is no verification level."""
    return _choice(os.environ.get("KERNLOCK_VERIFY") or "receipt", VERIFY_MODES, "KERNLOCK_VERIFY")


def _choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    value = value.strip().lower()
    if value not in allowed:
        raise _error(f"invalid {what} {value!r}; use one of: {', '.join(allowed)}.")
    return value


def _error(message: str) -> Exception:
    from kernlock.errors import ActivationError

    return ActivationError(message)


# -- lazy hook installation -----------------------------------------------------------------------------------


def _install_kernels(module: ModuleType) -> None:
    """Hook the installed ``kernels`` (:func:`kernlock.runtime.loaders.install`), then check kernels it loaded
    before."""
    from kernlock.runtime import loaders
    from kernlock.runtime import policy as hooks_kernels

    loaders.install(module)
    hooks_kernels.check_preloaded(module)


def _install_transformers(module: ModuleType) -> None:
    from kernlock.runtime import transformers_hooks as hooks_transformers

    hooks_transformers.install(module)


def _install_trainer(module: ModuleType) -> None:
    from kernlock.runtime import provenance_hooks

    provenance_hooks.install_trainer(module)


# -- carried into spawned children ----------------------------------------------------------------------------
# A ``spawn`` or ``forkserver`` child (and so ``torch.multiprocessing.spawn``) is a new interpreter that imports the
# parent's main module as ``__mp_main__``: what the parent did under ``if __name__ == "__main__":``, such as
# ``kernlock.activate()``, is not done again there. multiprocessing sends every child a dict of preparation data
# before it imports anything of the parent's; kernlock adds one entry whose unpickling activates the child with the
# parent's lock and mode, before the child's main module runs. ``fork`` children share the parent's memory.

#: The entry of multiprocessing's preparation data (``spawn.prepare`` ignores keys it does not know).
CARRY_KEY = "kernlock_activation"


class _Carried:
    """The parent's activation, pickled into a child's preparation data: unpickling it activates the child."""

    __slots__ = ("lockfile", "mode", "verify")

    def __init__(self, lockfile: str, mode: str, verify: str) -> None:
        self.lockfile, self.mode, self.verify = lockfile, mode, verify

    def __reduce__(self) -> tuple[Any, tuple[str, str, str]]:
        return _reactivate, (self.lockfile, self.mode, self.verify)


def _reactivate(lockfile: str, mode: str, verify: str) -> None:
    """In the child: activate as the parent was (one line and exit 1 if that is no longer possible)."""
    from kernlock.errors import ActivationError

    if verify != "receipt":
        os.environ.setdefault("KERNLOCK_VERIFY", verify)
    try:
        activate(lockfile=lockfile, mode=mode)
    except ActivationError as err:
        sys.stderr.write(f"{excepthook.PREFIX}{err}\n")
        sys.stderr.flush()
        os._exit(1)


def _install_ray_train(module: ModuleType) -> None:
    from kernlock.runtime import provenance_hooks

    provenance_hooks.install_ray_train(module)


def _install_carry(module: ModuleType) -> None:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` so that every child it prepares carries the activation."""
    original = module.get_preparation_data
    if getattr(original, "__kernlock__", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        current = activated.settings()
        if current is not None:
            data[CARRY_KEY] = _Carried(current.lockfile, current.mode, current.verify)
        return data

    get_preparation_data.__kernlock__ = True  # type: ignore[attr-defined]  # marks the wrapper
    get_preparation_data.__wrapped__ = original  # type: ignore[attr-defined]
    module.get_preparation_data = get_preparation_data  # type: ignore[attr-defined]  # a ModuleType here


#: Ray's variable naming a function that may change every ``ray.init``'s runtime_env; kernlock's function; where a
#: hook set before kernlock's is kept (kernlock's calls it first).
RAY_HOOK_ENV = "RAY_RUNTIME_ENV_HOOK"
RAY_HOOK = "kernlock.ray.runtime_env_hook"
RAY_NEXT_HOOK_ENV = "KERNLOCK_RAY_NEXT_HOOK"


def _install_ray(module: ModuleType) -> None:
    """Point Ray's ``RAY_RUNTIME_ENV_HOOK`` at kernlock's (:mod:`kernlock.runtime.ray_jobs`), keeping one set
    before as the next: every ``ray.init`` here gives its job kernlock's runtime_env (every worker honours the lock)."""
    before = os.environ.get(RAY_HOOK_ENV)
    if before and before != RAY_HOOK:
        os.environ[RAY_NEXT_HOOK_ENV] = before
    os.environ[RAY_HOOK_ENV] = RAY_HOOK


#: Module name -> installer, run right after the module has executed (or at once if it already has).
WATCHED: dict[str, Callable[[ModuleType], None]] = {
    "kernels": _install_kernels,
    "transformers.modeling_utils": _install_transformers,
    "transformers.trainer": _install_trainer,  # checkpoints carry their kernels.lock; a resume compares it
    "multiprocessing.spawn": _install_carry,  # spawn and forkserver children carry the activation
    "threading": excepthook.install_threads,  # a kernlock error that stops a thread is one line too
    "ray": _install_ray,  # every Ray job this process starts activates its workers with this lock
    "ray.train": _install_ray_train,  # a checkpoint a Ray Train worker reports carries its kernels.lock
}


class _PostImportFinder:
    """A ``sys.meta_path`` entry that runs an installer right after a watched module has executed.

    It finds nothing itself: it asks the other finders for the spec and wraps that spec's loader's
    ``exec_module`` (file loaders are made per module, so nothing else is affected).
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        installer = WATCHED.get(fullname)
        if installer is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original = getattr(loader, "exec_module", None)
        if loader is None or original is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            original(module)
            installer(module)

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]  # wrapping it is the point
        except AttributeError:  # pragma: no cover - a loader without __dict__: hooks install on the next activate
            return spec
        return spec


def _watch() -> None:
    """Install the hooks of already imported libraries now, and watch for the others."""
    if not any(isinstance(finder, _PostImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
    for name, installer in WATCHED.items():
        module = sys.modules.get(name)
        if module is not None:
            installer(module)


# -- `kernlock run` ------------------------------------------------------------------------------------------


#: What `kernlock run` writes into its sitecustomize.py (never a token): a child whose launcher filtered the
#: environment gets them back, so it honours the same lock, mode and cache without any variable of its own.
CARRIED = ("KERNLOCK_LOCKFILE", "KERNLOCK_MODE", "KERNLOCK_VERIFY", "KERNELS_CACHE", "HF_HUB_OFFLINE", "HF_ENDPOINT")


def run_environment(lockfile: str | os.PathLike[str] | None, mode: str | None) -> tuple[dict[str, str], str]:
    """The environment for `kernlock run`: the lock (checked now, so errors come before CMD starts), the mode,
    and a ``sitecustomize.py`` on PYTHONPATH that activates kernlock in every Python process of CMD; and the line
    that says so (``kernlock: LOCK (N kernels) active``).

    The sitecustomize lives beside the lock (on the job's shared filesystem, where every node finds it) and carries
    the settings itself, so a rank whose launcher forwards only ``PYTHON*`` variables, or whose HOME is its own,
    still honours the lock (docs/clusters.md)."""
    from pathlib import Path

    from kernlock.lock import file as lockfiles
    from kernlock.sync.cache import cache_dir
    from kernlock.util.kept import digest, private_folder
    from kernlock.util.wording import count

    path = find_lockfile(lockfile, script=False)
    lock = lockfiles.read(Path(path))
    env = dict(os.environ)
    env["KERNLOCK_LOCKFILE"] = path
    chosen = choose_mode(mode)
    choose_verify()
    env["KERNLOCK_MODE"] = chosen
    env["KERNELS_CACHE"] = os.path.abspath(cache_dir())
    carried = {key: env[key] for key in CARRIED if env.get(key)}
    source = SITECUSTOMIZE.replace("{settings}", repr(carried), 1).encode()
    what = "`kernlock run`'s sitecustomize.py"
    site = private_folder(Path(path).parent, "run", digest(source), {"sitecustomize.py": source}, what)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    repos = {kernel.repo for kernel in lock.kernels}
    return env, f"kernlock: {path} ({count(len(repos), 'kernel')}, {chosen} mode) active"
