"""Run-time activation: every Hub kernel load in this process honours ``kernels.lock`` (docs/activation.md).

``activate()`` finds the lock and reads the settings; it imports neither torch, transformers nor kernels. The
hooks live in :mod:`kernlock.hooks_kernels` and :mod:`kernlock.hooks_transformers` and install right after
``kernels`` / ``transformers.modeling_utils`` are imported (at once if they already are), through a
``sys.meta_path`` entry that only watches those two names. This module stays small and cheap to import.
"""

from __future__ import annotations

import os
import sys

from kernlock import activated
from kernlock.activated import Settings

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


def _kernlock_fail(message):
    sys.stderr.write("error: %s\\n" % message)
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
    """
    new = Settings(
        find_lockfile(lockfile),
        _choice(mode or os.environ.get("KERNLOCK_MODE") or "strict", MODES, "mode (KERNLOCK_MODE)"),
        _choice(os.environ.get("KERNLOCK_VERIFY") or "receipt", VERIFY_MODES, "KERNLOCK_VERIFY"),
    )
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
    """Hook the installed ``kernels`` (:func:`kernlock.loaders.install`), then check kernels it loaded before."""
    from kernlock import hooks_kernels, loaders

    loaders.install(module)
    hooks_kernels.check_preloaded(module)


def _install_transformers(module: ModuleType) -> None:
    from kernlock import hooks_transformers

    hooks_transformers.install(module)


#: Module name -> installer, run right after the module has executed (or at once if it already has).
WATCHED: dict[str, Callable[[ModuleType], None]] = {
    "kernels": _install_kernels,
    "transformers.modeling_utils": _install_transformers,
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


def run_environment(lockfile: str | os.PathLike[str] | None, mode: str | None) -> tuple[dict[str, str], str]:
    """The environment for `kernlock run`: the lock (checked now, so errors come before CMD starts), the mode,
    and a ``sitecustomize.py`` on PYTHONPATH that activates kernlock in every Python process of CMD; and the line
    that says so (``kernlock: LOCK (N kernels) active``)."""
    from pathlib import Path

    from kernlock import lockfile as lockfiles
    from kernlock.wording import count

    path = find_lockfile(lockfile, script=False)
    lock = lockfiles.read(Path(path))
    env = dict(os.environ)
    env["KERNLOCK_LOCKFILE"] = path
    chosen = _choice(mode or env.get("KERNLOCK_MODE") or "strict", MODES, "mode (KERNLOCK_MODE)")
    _choice(env.get("KERNLOCK_VERIFY") or "receipt", VERIFY_MODES, "KERNLOCK_VERIFY")
    if mode is not None:
        env["KERNLOCK_MODE"] = chosen
    site = _site_dir()
    env["PYTHONPATH"] = os.pathsep.join([site, *filter(None, [env.get("PYTHONPATH")])])
    repos = {kernel.repo for kernel in lock.kernels}
    return env, f"kernlock: {path} ({count(len(repos), 'kernel')}, {chosen} mode) active"


def _site_dir() -> str:
    """A folder holding only our ``sitecustomize.py``, named after its content (written once, atomically)."""
    import hashlib

    from kernlock.atomic import write_text_atomic
    from kernlock.hfenv import cache_root, private

    digest = hashlib.sha256(SITECUSTOMIZE.encode()).hexdigest()[:16]
    folder = cache_root() / "run" / digest
    if not private(folder.parent, create=True):
        raise _error(
            f"cannot keep `kernlock run`'s sitecustomize.py in {folder.parent}: it cannot be created, or it is not "
            "this user's alone (another user owns it, or a group or others can write it, and the program would run "
            "code from it). Point KERNLOCK_CACHE at a folder of your own, or `chmod go-w` it and the folder above."
        )
    target = folder / "sitecustomize.py"
    if not target.is_file() or target.read_text() != SITECUSTOMIZE:
        write_text_atomic(target, SITECUSTOMIZE)
    return str(folder)
