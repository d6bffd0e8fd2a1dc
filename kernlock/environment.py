"""Environments: the machine a lock targets, written in the Hub's build-variant grammar.

An environment string such as ``torch213-cxx11-cpu-x86_64-linux`` describes a machine (torch 2.13, C++11 ABI,
no accelerator, x86_64 Linux). Which build variant such a machine loads is decided by the kernels loader's own
rule (``kernels.variants._resolve_variant_for_system``), called here with the environment's facts instead of
this machine's, so that a lock made anywhere picks what the loader picks on the target.
"""

from __future__ import annotations

import importlib.util
import operator
import platform
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernlock.compat import INSTALL_KERNELS, SUPPORTED_KERNELS
from kernlock.errors import EnvironmentStringError, KernlockError, SpecError

# Metal builds need macOS 26; an environment string has no macOS version, so a Metal environment is taken
# to be a machine that can run the Metal builds it names.
_METAL_MACOS = Version("26.0")


def _loader() -> Any:
    """The kernels loader's variant module, checked for the private functions kernlock relies on."""
    try:
        from kernels import backends, variants
    except ImportError as err:  # pragma: no cover - kernels is a hard dependency
        raise KernlockError(f"kernlock needs {SUPPORTED_KERNELS}: {err}; run {INSTALL_KERNELS}.") from err
    needed = ("parse_variant", "_resolve_variant_for_system", "ArchVariant", "Torch")
    missing = [name for name in needed if not hasattr(variants, name)]
    if missing or not hasattr(backends, "parse_backend"):
        raise KernlockError(
            f"this version of `kernels` lacks {', '.join(missing) or 'parse_backend'}; "
            f"kernlock supports {SUPPORTED_KERNELS}: run {INSTALL_KERNELS}."
        )
    return variants


@dataclass(frozen=True, order=True)
class Environment:
    """A target machine: torch version, C++ ABI, backend (``cpu``, ``cu128``...), CPU and OS."""

    name: str

    @classmethod
    def parse(cls, text: str) -> Environment:
        """Parse an environment string; raise EnvironmentStringError naming the grammar on bad input."""
        env = cls(text.strip())
        env._parts  # noqa: B018 - validates
        return env

    @cached_property
    def _parts(self) -> Any:
        variants = _loader()
        try:
            parsed = variants.parse_variant(self.name)
            ok = isinstance(parsed, variants.ArchVariant) and isinstance(parsed.framework, variants.Torch)
        except (ValueError, TypeError, AttributeError):
            ok = False
        if not ok or parsed.variant_str != self.name:
            raise EnvironmentStringError(
                f"'{self.name}' is not an environment string; expected "
                "torch{M}{m}[-cxx11|-cxx98]-{backend}-{cpu}-{os}, e.g. torch213-cxx11-cpu-x86_64-linux or "
                "torch211-cxx11-cu128-x86_64-linux (run `kernlock env` to print this machine's)."
            )
        if parsed.arch.os == "linux" and parsed.framework.cxx11_abi is None:
            raise EnvironmentStringError(
                f"'{self.name}' names a Linux machine without its C++ ABI; write "
                f"'{self.name.replace('-', '-cxx11-', 1)}' (torch's default) or the -cxx98 form."
            )
        return parsed

    def __str__(self) -> str:
        return self.name

    @property
    def torch(self) -> Version:
        return self._parts.framework.version

    @property
    def backend(self) -> str:
        """The backend as written in variants: ``cpu``, ``cu128``, ``rocm64``, ``metal``..."""
        return self._parts.arch.backend.variant_str

    @property
    def cpu(self) -> str:
        return self._parts.arch.platform

    @property
    def os(self) -> str:
        return self._parts.arch.os

    def facts(self) -> dict[str, Version | str | None]:
        """The values that `when` conditions compare: torch, cuda, rocm, os, arch."""
        backend = self._parts.arch.backend
        version = getattr(backend, "version", None)
        return {
            "torch": self.torch,
            "cuda": version if backend.name == "cuda" else None,
            "rocm": version if backend.name == "rocm" else None,
            "os": self.os,
            "arch": self.cpu,
        }

    def accepted_variants(self, names: Iterable[str]) -> list[str]:
        """The variants among ``names`` this environment can load, most preferred first (the loader's rule)."""
        variants = _loader()
        from kernels.backends import parse_backend

        parsed = []
        for name in names:
            try:
                parsed.append(variants.parse_variant(name))
            except (ValueError, TypeError):
                continue
        framework = self._parts.framework
        accepted, _trace = variants._resolve_variant_for_system(
            variants=parsed,
            selected_backend=parse_backend(self.backend),
            cpu=self.cpu,
            os=self.os,
            torch_version=framework.version,
            torch_cxx11_abi=framework.cxx11_abi,
            tvm_ffi_version=None,
            macos_version=_METAL_MACOS if self.os == "darwin" else None,
        )
        return [variant.variant_str for variant in accepted]

    def select_variant(self, names: Iterable[str]) -> str | None:
        """The variant the kernels loader would load on this environment, or None."""
        accepted = self.accepted_variants(names)
        return accepted[0] if accepted else None


def detect() -> Environment:
    """This machine as an environment string, from the installed torch and the kernels backend probe.

    When torch is not imported yet (the CLI), the facts come from torch's own ``version.py`` without importing
    torch (two seconds saved per command); machines where that could differ from the loader's probe (accelerator
    plugins, macOS, torch < 2.7) take the full path. A test checks that both paths agree.
    """
    name = None if "torch" in sys.modules else _detect_from_version_file()
    return Environment.parse(name or _detect_with_torch())


def _platform() -> tuple[str, str]:
    cpu = platform.machine()
    system = platform.system().lower()
    if system == "darwin":
        cpu = "aarch64" if cpu == "arm64" else cpu
    elif system == "windows":
        cpu = "x86_64" if cpu == "AMD64" else cpu
    return cpu, system


def _detect_with_torch() -> str:
    try:
        import torch
    except ImportError as err:
        raise KernlockError(
            "cannot detect this environment: torch is not installed. Install torch, or declare "
            "`environments = [...]` in [tool.kernlock]."
        ) from err
    from kernels.backends import _backend

    version = Version(torch.__version__.split("+")[0])
    cpu, system = _platform()
    abi = ""
    if system == "linux":
        abi = "-cxx11" if torch.compiled_with_cxx11_abi() else "-cxx98"
    return f"torch{version.major}{version.minor}{abi}-{_backend().variant_str}-{cpu}-{system}"


_PLUGINS = ("torch_neuronx", "torch_tpu", "torch_npu", "torch_xla")


def _detect_from_version_file() -> str | None:
    """The environment from ``torch/version.py`` alone (Linux, torch >= 2.7, no accelerator plugin), else None."""
    cpu, system = _platform()
    spec = importlib.util.find_spec("torch")
    if system != "linux" or spec is None or not spec.submodule_search_locations:
        return None
    if any(importlib.util.find_spec(plugin) is not None for plugin in _PLUGINS):
        return None
    facts: dict[str, Any] = {}
    try:
        source = Path(next(iter(spec.submodule_search_locations)), "version.py").read_text()
        exec(compile(source, "torch/version.py", "exec"), facts)  # a file of constants
        version = Version(str(facts["__version__"]).split("+")[0])
    except (OSError, KeyError, SyntaxError, InvalidVersion):
        return None
    if version < Version("2.7"):
        return None  # older torch builds shipped both C++ ABIs: ask torch itself
    from kernels.backends import CPU, CUDA, XPU, ROCm

    if facts.get("cuda"):
        backend: Any = CUDA(version=Version(facts["cuda"]))
    elif facts.get("hip"):
        backend = ROCm(version=Version(facts["hip"].split("-")[0]))
    elif facts.get("xpu"):
        xpu = facts["xpu"]
        backend = XPU(version=Version(f"{xpu[0:4]}.{xpu[5:6]}"))
    else:
        backend = CPU()
    return f"torch{version.major}{version.minor}-cxx11-{backend.variant_str}-{cpu}-{system}"


# -- `when` conditions -------------------------------------------------------------------------------------

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_CLAUSE = re.compile(r"^\s*(torch|cuda|rocm|os|arch)\s*(==|!=|<=|>=|<|>)\s*([A-Za-z0-9_.\-]+)\s*$")
_VERSIONED = {"torch", "cuda", "rocm"}


@dataclass(frozen=True)
class Condition:
    """A `when` expression: clauses like ``cuda == 12.8`` joined by ``and``."""

    text: str
    clauses: tuple[tuple[str, str, Version | str], ...]

    @classmethod
    def parse(cls, text: str) -> Condition:
        """Parse a `when` string; raise SpecError that shows the accepted form."""
        clauses = []
        for part in re.split(r"\s+and\s+", text.strip()):
            match = _CLAUSE.match(part)
            if not match:
                raise SpecError(
                    f"invalid `when` condition '{text}': expected clauses like `cuda == 12.8` or "
                    "`torch >= 2.10` over torch, cuda, rocm, os, arch, joined by `and`."
                )
            key, op, raw = match.groups()
            value: Version | str = raw
            if key in _VERSIONED:
                try:
                    value = Version(raw)
                except InvalidVersion as err:
                    raise SpecError(f"invalid version '{raw}' in `when` condition '{text}'.") from err
            elif op not in ("==", "!="):
                raise SpecError(f"`when` condition '{text}': {key} can only be compared with == or !=.")
            clauses.append((key, op, value))
        return cls(" and ".join(f"{k} {o} {v}" for k, o, v in clauses), tuple(clauses))

    def matches(self, env: Environment) -> bool:
        """True when every clause holds on ``env``; a fact the environment lacks (cuda on a CPU) only
        satisfies ``!=``."""
        facts = env.facts()
        for key, op, value in self.clauses:
            fact = facts[key]
            if fact is None:
                if op != "!=":
                    return False
                continue
            if not _OPS[op](fact, value):
                return False
        return True
