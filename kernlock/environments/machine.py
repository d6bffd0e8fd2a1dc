"""This machine's environment string as the kernels loader names it, from a torch that is already imported.

A light module (the standard library; torch, packaging and ``kernels.backends`` when asked): run-time activation
detects the machine it loads on through :func:`torch_environment` without importing kernlock's variant grammar,
which only explains a string the lock does not name (:func:`kernlock.environments.environment.detect`).
"""

from __future__ import annotations

import os
import sys

from kernlock.errors import NoEnvironmentError

__all__ = ["platform_parts", "torch_environment"]


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
            "cannot detect this environment: torch is not installed. Install torch, or declare "
            "`environments = [...]` in [tool.kernlock]."
        ) from err
    from kernels.backends import _backend
    from packaging.version import Version  # kernels and huggingface_hub import it too

    version = Version(torch.__version__.split("+")[0])
    cpu, system = platform_parts()
    abi = ""
    if system == "linux":
        abi = "-cxx11" if torch.compiled_with_cxx11_abi() else "-cxx98"
    return f"torch{version.major}{version.minor}{abi}-{_backend().variant_str}-{cpu}-{system}"
