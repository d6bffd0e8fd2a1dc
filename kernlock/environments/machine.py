"""This machine's environment string as the kernels loader names it, from a torch that is already imported.

A light module (the standard library; torch, packaging and kernels' backend probe when asked): run-time activation
detects the machine it loads on through :func:`torch_environment` without importing kernlock's variant grammar,
which only explains a string the lock does not name (:func:`kernlock.environments.environment.detect`). Whatever
kernels is installed (its probe moved to ``kernels._internals`` in 0.19; a future release may move it again), the
machine is named: from kernels' own probe where kernlock knows where it lives, else from torch alone.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from kernlock.errors import NoEnvironmentError

__all__ = ["kernels_backend", "platform_parts", "torch_environment"]

#: Where the kernels loader keeps its backend probe ``_backend()``, newest generation first.
_BACKEND_MODULES = ("kernels._internals.backends", "kernels.backends")


def platform_parts() -> tuple[str, str]:
    """(cpu, os) as the loader names them. ``os.uname()`` is what ``platform.machine()``/``system()`` read on
    POSIX; the ``platform`` module (~10 ms to import and ask) is used on Windows only."""
    if sys.platform == "win32":
        import platform

        cpu, system = platform.machine(), platform.system().lower()
    else:
        uname = os.uname()
        cpu, system = uname.machine, uname.sysname.lower()
    if system == "darwin":
        cpu = "aarch64" if cpu == "arm64" else cpu
    elif system == "windows":
        cpu = "x86_64" if cpu == "AMD64" else cpu
    return cpu, system


def torch_environment() -> str:
    """``torch{M}{m}[-cxx11|-cxx98]-{backend}-{cpu}-{os}`` from torch itself and the kernels backend probe (what
    the loader chooses a build by); NoEnvironmentError without torch."""
    try:
        import torch
    except ImportError as err:
        raise NoEnvironmentError(
            "cannot detect this environment",
            why="torch is not installed",
            fix="Install torch, or declare `environments = [...]` in [tool.kernlock]",
        ) from err
    from packaging.version import Version  # kernels and huggingface_hub import it too

    version = Version(torch.__version__.split("+")[0])
    cpu, system = platform_parts()
    abi = ""
    if system == "linux":
        abi = "-cxx11" if torch.compiled_with_cxx11_abi() else "-cxx98"
    found = kernels_backend()
    backend = str(found.variant_str) if found is not None else _torch_backend(torch)
    return f"torch{version.major}{version.minor}{abi}-{backend}-{cpu}-{system}"


def kernels_backend() -> Any | None:
    """The installed kernels loader's own backend probe (its ``_backend()``: ``.name``, ``.variant_str``), or None
    where kernels is absent, keeps it where kernlock does not know, or fails to answer. Never raises."""
    for name in _BACKEND_MODULES:
        try:
            return importlib.import_module(name)._backend()
        except Exception:  # not in this kernels release (or a broken probe): try the next place
            continue
    return None


def _torch_backend(torch: Any) -> str:
    """The backend part of the variant name from torch alone (kernels' probe, for a loader kernlock does not
    know): ``cu128``, ``rocm64``, ``xpu20253``, ``metal`` or ``cpu``."""
    version = torch.version
    if getattr(version, "cuda", None):
        major, minor = str(version.cuda).split(".")[:2]
        return f"cu{major}{minor}"
    if getattr(version, "hip", None):
        major, minor = str(getattr(version, "rocm", None) or version.hip).split("-")[0].split(".")[:2]
        return f"rocm{major}{minor}"
    xpu = getattr(version, "xpu", None)
    if xpu:
        return f"xpu{xpu[0:4]}{xpu[5:6]}"
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    return "metal" if mps is not None and mps.is_available() else "cpu"
