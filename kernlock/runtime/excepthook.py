"""Errors in a process kernlock activates read like the CLI's: one line, exit status 1 (docs/activation.md).

:func:`kernlock.runtime.activation.activate` installs :func:`install`: a ``sys.excepthook`` and a
``threading.excepthook`` that print an uncaught kernlock error as ``kernlock: error: <message>`` instead of a
traceback, also when kernels or transformers rewrapped it (an ImportError or ValueError raised while handling ours,
or from it). Any other exception, and one that code of the program raised from ours, goes to the hook that was there
before, untouched. ``KERNLOCK_DEBUG=1`` (set by ``kernlock -v`` for the commands it runs) shows every traceback.
``torch.multiprocessing.spawn`` re-raises a child's failure in the parent as text: a kernlock error there is one line
too. This module imports nothing of its own: activation stays cheap.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType, TracebackType
    from typing import Any

    from kernlock.errors import KernlockError

__all__ = [
    "DEBUG",
    "PREFIX",
    "debug",
    "install",
    "install_threads",
    "kernlock_error_in",
    "message_of",
    "root_kernlock_error",
]

#: How a kernlock error starts in a process kernlock runs or activates (the CLI itself prints ``error: ...``).
PREFIX = "kernlock: error: "
#: The variable that brings tracebacks back (``kernlock -v`` sets it for the commands it runs).
DEBUG = "KERNLOCK_DEBUG"
#: Packages whose code may rewrap a kernlock error on its way up without adding anything the user needs.
_REWRAPPERS = frozenset({"kernels", "transformers", "kernlock", "importlib"})
_MARK = "__kernlock_excepthook__"


def debug() -> bool:
    """True when tracebacks are asked for (``KERNLOCK_DEBUG`` set to anything but empty or ``0``)."""
    return os.environ.get(DEBUG, "").strip() not in ("", "0")


def kernlock_error_in(err: BaseException) -> KernlockError | None:
    """The first KernlockError in ``err``'s cause/context chain (``err`` itself included)."""
    from kernlock.errors import KernlockError

    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, KernlockError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def root_kernlock_error(err: BaseException) -> KernlockError | None:
    """The KernlockError that ``err`` stands for: ``err`` itself, or the one down its cause/context chain when every
    exception above it was raised by kernels, transformers, kernlock or the import system (a rewrap). None when
    there is none, or when code of the program raised an exception of its own from it (that one is the news)."""
    found = kernlock_error_in(err)
    if found is None:
        return None
    current: BaseException | None = err
    while current is not None and current is not found:
        if not _raised_by_library(current):
            return None
        current = current.__cause__ or current.__context__
    return found


def _raised_by_library(err: BaseException) -> bool:
    """Whether the frame that raised ``err`` (its traceback's last) is code of kernels, transformers, kernlock or
    the import system."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__")
    return isinstance(name, str) and name.split(".", 1)[0] in _REWRAPPERS


def message_of(err: BaseException) -> str | None:
    """The line to print for an uncaught ``err`` (without :data:`PREFIX`), or None when it is not kernlock's."""
    found = root_kernlock_error(err)
    if found is not None:
        return str(found)
    return _spawned(err) or _refused_by_fallback(err) or _compiled_code(err)


#: What the dynamic loader says when a compiled extension cannot be loaded on this machine.
_DLOPEN = ("cannot open shared object file", "undefined symbol", "invalid ELF header", "file too short", "ELF class")


def _compiled_code(err: BaseException) -> str | None:
    """An ImportError or OSError from loading the compiled code of a build kernlock served (verified, so it is the
    machine that does not fit: a CUDA build without the NVIDIA driver, other libraries): that build, the loader's
    reason and the fix."""
    policy = sys.modules.get("kernlock.runtime.policy")
    seen: set[int] = set()
    current: BaseException | None = err
    while policy is not None and current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip()
        if isinstance(current, (ImportError, OSError)) and any(marker in text for marker in _DLOPEN):
            served = _served_build(policy, current)
            if served is not None:
                entry, folder = served
                fix = (
                    "a CUDA build needs the NVIDIA driver (libcuda), which this machine lacks; run it on a GPU node, "
                    "or without a GPU install torch's CPU build (the lock's CPU environment loads its CPU build)"
                    if "libcuda" in text
                    else "its files are there and match kernels.lock, so it is this machine that does not fit the "
                    "build (a CUDA build without a GPU driver, other system libraries); compare `kernlock env` with "
                    "the environment it was locked for"
                )
                return (
                    f"{entry.repo} {os.path.basename(folder)} (commit {entry.commit[:12]}) is the locked, verified "
                    f"build, but its compiled code does not load here ({text}): {fix}."
                )
        current = current.__cause__ or current.__context__
    return None


def _served_build(policy: ModuleType, err: BaseException) -> tuple[Any, str] | None:
    """The lock entry and variant folder of the build kernlock served that ``err`` came from (a frame or a path in
    its message inside that folder), or None."""
    places = [word.strip("'\":,") for word in str(err).split() if os.sep in word]
    tb = err.__traceback__
    while tb is not None:
        places.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    for place in places:
        folder = os.path.dirname(place)
        for _ in range(4):  # the variant folder is a few levels above any of its files at most
            entry = policy.origin_of(folder)
            if entry is not None:
                return entry, folder
            folder = os.path.dirname(folder)
    return None


def _refused_by_fallback(err: BaseException) -> str | None:
    """kernels' error for a load the ``LOCAL_KERNELS`` fallback refused (it names the folder kernlock pinned the
    repo to, which does not exist): the fallback's line for that repo."""
    fallback = sys.modules.get("kernlock.runtime.loaders.fallback")
    refused: dict[str, str] = getattr(fallback, "REFUSED", None) or {}
    text = str(err)
    return next((line for folder, line in refused.items() if folder in text), None)


def _spawned(err: BaseException) -> str | None:
    """torch.multiprocessing.spawn's ProcessRaisedException: the child's traceback as text. A kernlock error as its
    last line (``kernlock.errors.ActivationError: ...``) is what stopped the child."""
    kind = type(err)
    if kind.__name__ != "ProcessRaisedException" or not kind.__module__.startswith("torch.multiprocessing"):
        return None
    lines = [line for line in str(err).splitlines() if line.strip()]
    if not lines or not lines[-1].startswith("kernlock.errors."):
        return None
    from kernlock import errors

    name, _, message = lines[-1].removeprefix("kernlock.errors.").partition(": ")
    if not isinstance(getattr(errors, name, None), type) or not message:
        return None
    index = getattr(err, "error_index", None)
    return f"process {index} of torch.multiprocessing.spawn stopped: {message}"


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"{PREFIX}{line}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr left: nothing to tell
        pass


def install() -> None:
    """Wrap ``sys.excepthook`` (once; the hook present now is kept and called for everything that is not a kernlock
    error). ``threading.excepthook`` is wrapped by :func:`install_threads` once ``threading`` is imported
    (activation watches for it: importing it here would cost more than the rest of activation)."""
    if getattr(sys.excepthook, _MARK, False):
        return
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        line = None if debug() else _message_or_none(value)
        if line is None:
            previous(kind, value, tb)
        else:
            _say(line)

    setattr(excepthook, _MARK, True)
    sys.excepthook = excepthook


def install_threads(threading: ModuleType) -> None:
    """Wrap ``threading.excepthook`` (once) as :func:`install` wraps ``sys.excepthook``."""
    previous = threading.excepthook
    if getattr(previous, _MARK, False):
        return

    def excepthook(args: Any) -> None:  # threading.ExceptHookArgs
        value = args.exc_value
        line = None if debug() or value is None else _message_or_none(value)
        if line is None:
            previous(args)
            return
        name = args.thread.name if args.thread is not None else "a thread"
        _say(f"thread {name} stopped: {line}")

    setattr(excepthook, _MARK, True)
    threading.excepthook = excepthook  # type: ignore[attr-defined]  # a ModuleType here


def _message_or_none(value: BaseException) -> str | None:
    """:func:`message_of`, never failing: a hook that raises would hide the error it was given."""
    try:
        return message_of(value)
    except Exception:
        return None
