"""The optional facts of an environment: what the kernels loader decides on besides the environment string.

An entry of ``[tool.kernlock] environments`` may be an inline table::

    { name = "torch211-cxx11-cu128-x86_64-linux", cuda-capabilities = ["9.0"], python = "3.13t",
      tvm-ffi = "0.1", kernels = "0.17.2" }

``cuda-capabilities`` are the compute capabilities of the GPUs the environment runs on (a CUDA environment only),
``python`` the interpreter (``t``: free-threaded), ``tvm-ffi`` the apache-tvm-ffi installed there, ``kernels`` the
loader version installed there (it picks the loader's variant rule: :func:`kernlock.variants.rule.rule_for_kernels`),
``macos`` the macOS version (a darwin environment only), ``mlx`` the mlx version installed there (kernels 0.19 loads
``mlx-metal`` builds only where mlx is). This module parses and
validates them (:class:`Facts`) and detects them on this machine (:func:`detect`); at module level it imports only
the standard library's light modules and packaging (run-time activation reads a lock's facts), never kernels or
torch.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

__all__ = [
    "FREE_THREADED_ABI3",
    "KEYS",
    "TABLE_FORM",
    "FactError",
    "Facts",
    "as_toml",
    "detect",
    "differences",
    "parse",
]


#: The keys of an environment table, in the order kernlock writes them.
KEYS = ("name", "cuda-capabilities", "python", "tvm-ffi", "kernels", "macos", "mlx")
#: Free-threaded CPython before this version cannot load arch builds (they use the stable ABI).
FREE_THREADED_ABI3 = Version("3.15")
_CAPABILITY = re.compile(r"([0-9]{1,2})\.([0-9]{1,2})")
_PYTHON = re.compile(r"([0-9])\.([0-9]{1,2})(?:\.[0-9]{1,3})?(t?)")
TABLE_FORM = (
    '{ name = "torch211-cxx11-cu128-x86_64-linux", cuda-capabilities = ["9.0"], python = "3.13t", '
    'tvm-ffi = "0.1", kernels = "0.17.2" } (macos = "15.0" for darwin)'
)


class FactError(ValueError):
    """An optional fact that is not valid; the message names the fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """The optional facts of one environment (None: not declared)."""

    cuda_capabilities: tuple[str, ...] | None = None
    python: str | None = None
    tvm_ffi: Version | None = None
    kernels: Version | None = None
    macos: Version | None = None
    mlx: Version | None = None

    @property
    def python_minor(self) -> Version | None:
        """The declared Python as major.minor (None: not declared)."""
        return None if self.python is None else Version(self.python.rstrip("t"))

    @property
    def gil_disabled(self) -> bool:
        """A free-threaded CPython (``3.13t``, ``3.15t``): kernels 0.19 loads only its ``abi3t`` builds."""
        return self.python is not None and self.python.endswith("t")

    @property
    def free_threaded(self) -> bool:
        """A free-threaded CPython that loads no arch build (``3.13t``; 3.15t and later load them)."""
        if self.python is None or not self.python.endswith("t"):
            return False
        return Version(self.python[:-1]) < FREE_THREADED_ABI3

    @property
    def tvm_ffi_minor(self) -> Version | None:
        """The tvm-ffi version as the loader's rule takes it (major.minor)."""
        return None if self.tvm_ffi is None else Version(f"{self.tvm_ffi.major}.{self.tvm_ffi.minor}")

    def capability_pairs(self) -> list[tuple[int, int]]:
        """The declared capabilities as (major, minor)."""
        return [_capability_pair(c) for c in self.cuda_capabilities or ()]

    def as_data(self) -> dict[str, Any]:
        """The declared facts as pyproject/lock values, keys in :data:`KEYS` order (empty when none)."""
        data: dict[str, Any] = {}
        if self.cuda_capabilities is not None:
            data["cuda-capabilities"] = list(self.cuda_capabilities)
        for key, value in (("python", self.python), ("tvm-ffi", self.tvm_ffi), ("kernels", self.kernels)):
            if value is not None:
                data[key] = str(value)
        if self.macos is not None:
            data["macos"] = str(self.macos)
        if self.mlx is not None:
            data["mlx"] = str(self.mlx)
        return data


def _capability_pair(text: str) -> tuple[int, int]:
    match = _CAPABILITY.fullmatch(text)
    assert match is not None
    return int(match.group(1)), int(match.group(2))


def parse(table: dict[str, Any], backend: str, os: str) -> Facts:
    """The facts of an environment table (every key but ``name``); FactError naming the fix on bad input.

    ``backend`` and ``os`` are the environment's: capabilities need a CUDA backend, ``macos`` a darwin machine.
    """
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        key = unknown[0]
        import difflib

        close = difflib.get_close_matches(str(key).lower().replace("_", "-"), KEYS, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0]}`?" if close else f"; known: {', '.join(KEYS)}"
        raise FactError(f"unknown key `{key}`{hint}")
    return Facts(
        cuda_capabilities=_capabilities(table.get("cuda-capabilities"), backend),
        python=_python(table.get("python")),
        tvm_ffi=_version(table.get("tvm-ffi"), "tvm-ffi", "the apache-tvm-ffi version installed there", "0.1"),
        kernels=_version(table.get("kernels"), "kernels", "the kernels version installed there", "0.17.2"),
        macos=_macos(table.get("macos"), os),
        mlx=_version(table.get("mlx"), "mlx", "the mlx version installed there", "0.29.0"),
    )


def _quoted(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f' (write it as a string: "{value}")'
    return f" (not {value!r:.40})"


def _capabilities(value: object, backend: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not backend.startswith("cu"):
        raise FactError(f"`cuda-capabilities` is for CUDA environments, and this one's backend is {backend}")
    if not isinstance(value, list) or not value:
        raise FactError('`cuda-capabilities` must be a non-empty list of GPU compute capabilities, like ["9.0"]')
    found = []
    for item in value:
        if not isinstance(item, str) or not _CAPABILITY.fullmatch(item):
            raise FactError(
                f'`cuda-capabilities`: {item!r:.40} is not a compute capability like "9.0" (an H100/H200)' + _hint(item)
            )
        found.append(item)
    if len(set(found)) != len(found):
        raise FactError("`cuda-capabilities` lists a capability twice")
    return tuple(sorted(found, key=_capability_pair))


def _hint(item: object) -> str:
    """``sm90``/``sm_90a``/``90``/9.0 -> a did-you-mean for a capability."""
    if isinstance(item, float):
        return f'; did you mean "{item}"?'
    match = re.fullmatch(r"(?:sm_?|compute_?)?([0-9]{1,2})([0-9])[af]?(?:\+ptx)?", str(item).strip().lower())
    if match:
        return f'; did you mean "{int(match.group(1))}.{match.group(2)}"?'
    return ""


def _python(value: object) -> str | None:
    if value is None:
        return None
    match = _PYTHON.fullmatch(value) if isinstance(value, str) else None
    if not match:
        fix = f'; did you mean "{value}"?' if isinstance(value, float) else ""
        raise FactError(
            f'`python` must be the interpreter\'s version like "3.12", or "3.13t" when it is free-threaded '
            f"(not {value!r:.40}){fix}"
        )
    return f"{match.group(1)}.{int(match.group(2))}{match.group(3)}"


def _version(value: object, key: str, what: str, example: str) -> Version | None:
    if value is None:
        return None
    try:
        if not isinstance(value, str) or len(value) > 32:
            raise InvalidVersion(repr(value))
        return Version(value)
    except InvalidVersion:
        raise FactError(f'`{key}` must be {what}, like "{example}"{_quoted(value)}') from None


def _macos(value: object, os: str) -> Version | None:
    if value is None:
        return None
    if os != "darwin":
        raise FactError(f"`macos` is for darwin environments, and this one runs {os}")
    return _version(value, "macos", "the macOS version", "15.0")


# -- this machine ------------------------------------------------------------------------------------------


def detect(backend: str, os: str) -> Facts:
    """This machine's facts: the interpreter, installed kernels and apache-tvm-ffi, macOS version, and (CUDA
    backends only: from the driver, else torch) the compute capabilities of the visible GPUs."""
    return Facts(
        cuda_capabilities=_detect_capabilities() if backend.startswith("cu") else None,
        python=_detect_python(),
        tvm_ffi=_installed_version("apache-tvm-ffi"),
        kernels=_installed_version("kernels"),
        macos=_detect_macos() if os == "darwin" else None,
        mlx=_installed_version("mlx") if os == "darwin" else None,
    )


def _detect_python() -> str:
    """``3.12``, or ``3.13t`` for a free-threaded build: ``sys.abiflags`` holds its ``t`` on POSIX; Windows has no
    abiflags, so there the build configuration is read (``sysconfig``: ~3 ms to import and load)."""
    if hasattr(sys, "abiflags"):
        threaded = "t" if "t" in sys.abiflags else ""
    else:  # pragma: no cover - Windows
        import sysconfig

        threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info.major}.{sys.version_info.minor}{threaded}"


def _installed_version(distribution: str) -> Version | None:
    from kernlock.environments.compat import installed

    found = installed(distribution)
    try:
        return None if found is None else Version(found)
    except InvalidVersion:
        return None


def _detect_macos() -> Version | None:
    import platform

    try:
        return Version(platform.mac_ver()[0])
    except InvalidVersion:
        return None


def _detect_capabilities() -> tuple[str, ...] | None:
    """The visible GPUs' capabilities: from the driver (NVML, no torch import), else from torch."""
    from kernlock.environments.gpus import nvml_capabilities

    found = nvml_capabilities()
    if found is not None:
        return found or None
    return _torch_capabilities()


def _torch_capabilities() -> tuple[str, ...] | None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    found = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    return tuple(f"{major}.{minor}" for major, minor in sorted(found)) or None


def as_toml(data: dict[str, Any]) -> str:
    """An environment table as pyproject writes it: ``{name = "...", python = "3.11", kernels = "0.17.2"}``
    (the text tomlkit gives an inline table, written without importing tomlkit)."""
    from kernlock.util import tomlwrite

    return tomlwrite.value(data)


def differences(recorded: dict[str, Any], detected: dict[str, Any]) -> list[str]:
    """Where this machine (``detected``) contradicts the facts a lock recorded for its environment, in words
    (both in the declared form; only recorded facts are compared)."""
    found = []
    for key, value in recorded.items():
        mine = detected.get(key)
        if key == "cuda-capabilities":
            extra = [c for c in mine or [] if c not in value]
            if extra:
                found.append(f"this machine's GPUs ({', '.join(extra)}) are not among cuda-capabilities {value}")
            continue
        if key == "tvm-ffi" and mine is not None:
            same = Version(mine).release[:2] == Version(value).release[:2]
        else:
            same = mine == value
        if not same:
            found.append(f"{key} is {mine or 'not installed'} here, the lock was made for {value}")
    return found
