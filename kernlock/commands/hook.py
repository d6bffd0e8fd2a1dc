"""`kernlock hook`: bind a Python environment to a lock with a ``.pth`` startup hook (docs/clusters.md).

A ``.pth`` file in site-packages whose line starts with ``import`` runs at every start of that environment's
interpreter, whatever the environment variables (site.py; coverage and editable installs hook processes so). Ours
imports ``_kernlock_hook``, a small module written beside it that holds the bound lock and mode and puts one
finder on ``sys.meta_path``: it imports nothing else, so a process that never imports ``kernels`` or
``transformers``' model code pays well under a millisecond; the first such import activates kernlock (or stops
the process with one line naming the fix, e.g. a bound lock missing on this node).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernlock.errors import HookError, LaunchError, LockError

__all__ = ["HOOK_MODULE", "PTH_NAME", "HookStatus", "finder_source", "install", "site_packages", "status", "uninstall"]

PTH_NAME = "kernlock-hook.pth"
HOOK_MODULE = "_kernlock_hook"
PTH_LINE = f"import {HOOK_MODULE}\n"

# The module the .pth imports. Kept tiny: it runs at every interpreter start of the environment.
HOOK_SOURCE = '''"""Written by `kernlock hook install` (`kernlock hook status`: what it binds; `uninstall`: remove it).

The first import of kernels or transformers' model code in this environment activates kernlock with the lock below
(None: $KERNLOCK_LOCKFILE, else the nearest kernels.lock); a lock that cannot be honoured stops the process.
"""
import os
import sys

LOCKFILE = {lockfile!r}
MODE = {mode!r}
CACHE = {cache!r}  # the kernel cache `kernlock hook install` saw: used where KERNELS_CACHE and HF_HUB_CACHE are unset
'''


def finder_source(name: str, who: str, activate: str) -> str:
    """The ``sys.meta_path`` finder of a startup module (``kernlock hook``'s, ``kernlock run``'s): at the first
    import of kernels or transformers' model code it runs ``activate`` (lines of code, indented as a ``try`` body);
    whatever that raises stops the process with one line (``error: WHO (its file): the message``)."""
    return (
        """_NAMES = ("kernels", "transformers.modeling_utils")


class <<NAME>>:
    done = False

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if cls.done or name not in _NAMES:
            return None
        cls.done = True
        if "kernlock.cli.app" in sys.modules:  # kernlock's own commands activate only where they mean to
            return None
        try:<<ACTIVATE>>
        except Exception as err:  # an ActivationError names the fix; anything else is no silent unlocked load
            if isinstance(err, ModuleNotFoundError) and err.name == "kernlock":
                err = "kernlock is not installed in %s; install it there, or remove %s" % (sys.prefix, __file__)
            sys.stderr.write("error: <<WHO>> (%s): %s\\n" % (__file__, err))
            sys.stderr.flush()
            os._exit(1)
        for finder in sys.meta_path:
            if type(finder).__name__ == "_PostImportFinder":
                return finder.find_spec(name, path, target)
        return None


sys.meta_path.insert(0, <<NAME>>)
""".replace("<<NAME>>", name)
        .replace("<<WHO>>", who)
        .replace("<<ACTIVATE>>", activate)
    )


HOOK_ACTIVATE = """
            from kernlock.runtime import state as activated; from kernlock.runtime import activation as runtime

            if activated.settings() is not None:  # `kernlock run` or the program activated already
                return None
            if CACHE and not (os.environ.get("KERNELS_CACHE") or os.environ.get("HF_HUB_CACHE")):
                os.environ["KERNELS_CACHE"] = CACHE
            runtime.activate(lockfile=LOCKFILE, mode=MODE)"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookStatus:
    """What ``kernlock hook status`` reports for one environment."""

    site_packages: Path
    installed: bool
    lockfile: str | None = None  # None: KERNLOCK_LOCKFILE or the nearest kernels.lock
    mode: str | None = None  # None: KERNLOCK_MODE or strict
    cache: str | None = None  # the kernel cache used where KERNELS_CACHE and HF_HUB_CACHE are unset
    lock_present: bool | None = None  # whether the bound lock exists here (None: no lock bound)


def site_packages(python: str | None) -> Path:
    """The site-packages folder of ``python`` (default: this interpreter), checked to import kernlock."""
    if python is None:
        import sysconfig

        return Path(sysconfig.get_paths()["purelib"])
    code = (
        "import importlib.util, sysconfig; "
        "print(sysconfig.get_paths()['purelib']); print(importlib.util.find_spec('kernlock') is not None)"
    )
    try:
        result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError as err:
        raise LaunchError(
            f"cannot run {python!r}", why=f"{err.strerror or err}", fix="pass the interpreter's path"
        ) from err
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        raise HookError(
            f"{python} did not say where its site-packages is",
            why=result.stderr.strip()[-300:] or f"it exited {result.returncode}",
            fix="pass the path of a Python interpreter that runs",
        )
    return Path(lines[0])


def _kernlock_importable(python: str) -> bool:
    result = subprocess.run([python, "-c", "import kernlock.runtime.activation"], capture_output=True, timeout=60)
    return result.returncode == 0


def install(lockfile: Path | None, mode: str | None, python: str | None) -> HookStatus:
    """Write the hook into ``python``'s environment, bound to ``lockfile`` (checked now) and ``mode``."""
    from kernlock.lock import file as lockfiles
    from kernlock.sync.cache import cache_dir
    from kernlock.util.atomic import write_text_atomic

    bound = None
    if lockfile is not None:
        bound = os.path.abspath(lockfile)
        if not os.path.isfile(bound):
            raise LockError(f"no lock file at {bound}", fix="run `kernlock lock` in the project, or fix --lockfile")
        lockfiles.read(Path(bound))
    site = site_packages(python)
    if python is not None and not _kernlock_importable(python):
        raise HookError(f"{python} cannot import kernlock", fix="install kernlock into that environment first")
    try:
        source = HOOK_SOURCE.format(lockfile=bound, mode=mode, cache=os.path.abspath(cache_dir()))
        source += finder_source("KernlockHook", "kernlock hook", HOOK_ACTIVATE)
        write_text_atomic(site / f"{HOOK_MODULE}.py", source)
        write_text_atomic(site / PTH_NAME, PTH_LINE)
    except OSError as err:
        raise HookError(
            f"cannot write the hook into {site}", why=f"{err.strerror or err}", fix="run as the environment's owner"
        ) from err
    # Its bytecode now, by that interpreter (its own magic number): startup then never compiles it, even where
    # PYTHONDONTWRITEBYTECODE is set or site-packages is read-only for the ranks. Without it the hook still works.
    subprocess.run([python or sys.executable, "-m", "py_compile", str(site / f"{HOOK_MODULE}.py")], timeout=60)
    return status(python, site)


def uninstall(python: str | None) -> HookStatus:
    """Remove the hook from ``python``'s environment (nothing to do when there is none)."""
    site = site_packages(python)
    for name in (PTH_NAME, f"{HOOK_MODULE}.py"):
        try:
            (site / name).unlink(missing_ok=True)
        except OSError as err:
            raise HookError(
                f"cannot remove {site / name}", why=f"{err.strerror or err}", fix="run as its owner"
            ) from err
    return HookStatus(site_packages=site, installed=False)


def status(python: str | None, site: Path | None = None) -> HookStatus:
    """Whether ``python``'s environment has the hook, and what it binds."""
    site = site or site_packages(python)
    module = site / f"{HOOK_MODULE}.py"
    if not (site / PTH_NAME).is_file() or not module.is_file():
        return HookStatus(site_packages=site, installed=False)
    bound: dict[str, str | None] = {"LOCKFILE": None, "MODE": None, "CACHE": None}
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in bound:
            bound[node.targets[0].id] = ast.literal_eval(node.value)
    lock = bound["LOCKFILE"]
    return HookStatus(
        site_packages=site,
        installed=True,
        lockfile=lock,
        mode=bound["MODE"],
        cache=bound["CACHE"],
        lock_present=None if lock is None else os.path.isfile(lock),
    )
