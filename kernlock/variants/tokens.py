"""The tokens of build variant names (:mod:`kernlock.variants.grammar` assembles names from them): OSes, CPUs,
backends in both forms (``cu128``; kernels 0.19's ``cuda-12.8``), the Python ABI (``cpython-3.12-abi3``), versions;
and what is wrong with a token or a name's characters. Only the standard library and ``packaging``."""

from __future__ import annotations

import re

from packaging.version import Version

from kernlock.variants.types import FIXED_BACKENDS, VERSIONED_BACKENDS, Backend, Python, ROCm, System

__all__ = [
    "ABI3T_MIN_PYTHON",
    "ABI_TAGS",
    "CPUS",
    "MAX_NAME",
    "METAL_MIN_MACOS",
    "MLX_BACKENDS",
    "NOARCH_BACKENDS",
    "OSES",
    "PYTHON_ABIS",
    "BadToken",
    "describe_characters",
    "dotted",
    "parse_backend",
    "parse_new_backend",
    "parse_python",
    "parse_system",
    "token_kind",
    "version_pair",
]


#: Metal builds use ``-std=metal4.0``, which needs macOS 26 or later (kernels' ``_METAL_MIN_MACOS_VERSION``).
METAL_MIN_MACOS = Version("26.0")

#: The operating systems and CPUs that variant names use.
OSES = ("linux", "darwin", "windows")
CPUS = ("x86_64", "aarch64")
#: The backends a noarch variant ``torch-<backend>`` may name (``npu`` is the noarch name of CANN before kernels
#: 0.19, ``cann`` from 0.19).
NOARCH_BACKENDS = ("cpu", "cuda", "metal", "rocm", "xpu", "npu", "cann", "neuron", "tpu", "universal")
#: The backends an MLX noarch variant ``mlx-<backend>`` may name.
MLX_BACKENDS = ("metal",)
#: The Python ABIs of kernels 0.19's names: the stable ABI, and the free-threaded stable ABI (Python 3.15+).
PYTHON_ABIS = ("abi3", "abi3t")
ABI3T_MIN_PYTHON = Version("3.15")
#: The ABI tags of Torch arch variants (Linux builds; the loader prefers names without one).
ABI_TAGS = ("cxx11", "cxx98")

#: The longest variant name (also the longest build folder name kernlock accepts, ``names.check_variant_folder``).
MAX_NAME = 128

_BACKENDS_TEXT = "cpu, metal, neuron, tpu, cu{M}{m}, rocm{M}{m}, xpu{YYYY}{m} or cann{M}{m}"


def parse_backend(text: str) -> Backend:
    """Parse a backend as written in a variant (``cpu``, ``cu128``, ``rocm71``, ``xpu20253``...).

    Versions split like the loader's greedy regexes (``cu(\\d+)(\\d+)``: ``cu128`` -> 12.8, ``xpu20253`` ->
    2025.3); a version not written canonically (``cu0128``) is refused. Raises ValueError with the reason.
    """
    if text in FIXED_BACKENDS:
        return FIXED_BACKENDS[text]
    if text == "rocm714":  # kernels 0.19: the one legacy ROCm name with a two-digit minor
        return ROCm(version=Version("7.14"))
    for kind in VERSIONED_BACKENDS:
        match = re.fullmatch(rf"{kind.prefix}(\d+)(\d)", text)
        if match:
            backend = kind(version=Version(f"{match.group(1)}.{match.group(2)}"))
            if backend.variant_str != text:
                raise BadToken(
                    f"backend '{text}' is not written canonically", f"the loader reads it as '{backend.variant_str}'"
                )
            return backend
    raise BadToken(f"unknown backend '{text}'", f"expected {_BACKENDS_TEXT}")


class BadToken(ValueError):
    """A parse failure inside a name: what is wrong, and what was expected there."""

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason if hint is None else f"{reason} ({hint})")
        self.reason = reason
        self.hint = hint


def version_pair(text: str, pattern: str, what: str, example: str) -> Version:
    match = re.fullmatch(pattern, text)
    if not match:
        raise BadToken(f"invalid {what} '{text}'", f"expected e.g. {example}")
    return Version(f"{match.group(1)}.{match.group(2)}")


def token_kind(token: str) -> str | None:
    if token in OSES:
        return "OS"
    if token in CPUS:
        return "CPU"
    try:
        parse_backend(token)
    except ValueError:
        return None
    return "backend"


def parse_new_backend(parts: list[str]) -> Backend:
    """A backend in kernels 0.19's form: ``cpu`` (a backend without a version) or ``cuda-12.8`` (two parts)."""
    text = "-".join(parts)
    if len(parts) == 1 and parts[0] in FIXED_BACKENDS:
        return FIXED_BACKENDS[parts[0]]
    kind = next((k for k in VERSIONED_BACKENDS if parts and k.name == parts[0]), None)
    if kind is None or len(parts) != 2:
        raise BadToken(f"unknown backend '{text}'", "expected cpu, metal, neuron, tpu, cuda-{M}.{m}, rocm-{M}.{m}, ...")
    backend = kind(version=dotted(parts[1], f"{kind.name} version", "12.8"), legacy=False)
    return backend


def dotted(text: str, what: str, example: str) -> Version:
    match = re.fullmatch(r"(\d+)\.(\d+)", text)
    if not match:
        raise BadToken(f"invalid {what} '{text}'", f"expected e.g. {example}")
    return Version(f"{match.group(1)}.{match.group(2)}")


def parse_python(parts: list[str]) -> Python:
    """``cpython-{M}.{m}-{abi}`` (three parts)."""
    if len(parts) != 3 or parts[0] != "cpython":
        raise BadToken(f"'{'-'.join(parts)}' is not cpython-{{M}}.{{m}}-{{abi}}", "e.g. cpython-3.12-abi3")
    version = dotted(parts[1], "Python version", "3.12")
    abi = parts[2]
    if abi not in PYTHON_ABIS:
        raise BadToken(f"unknown Python ABI '{abi}'", f"known: {', '.join(PYTHON_ABIS)}")
    if abi == "abi3t" and version < ABI3T_MIN_PYTHON:
        raise BadToken(f"abi3t needs Python {ABI3T_MIN_PYTHON} or later, not {version}")
    return Python(version=version, abi=abi, legacy=False)


def parse_system(parts: list[str]) -> System:
    cpu, os = parts
    if cpu not in CPUS:
        raise BadToken(f"unknown CPU '{cpu}'", f"known: {', '.join(CPUS)}")
    if os not in OSES:
        raise BadToken(f"unknown OS '{os}'", f"known: {', '.join(OSES)}")
    return System(cpu=cpu, os=os)


def describe_characters(name: str) -> str:
    """What is wrong with the characters of ``name``: one outside ``[a-z0-9_.-]``, or a dot outside a version."""
    bad = sorted(set(re.sub(r"[a-z0-9_.\-]", "", name)))
    if any(ch.isspace() for ch in bad):
        return "contains whitespace"
    if any(ch.isupper() for ch in bad) and all(ch.isalpha() for ch in bad):
        return "contains upper-case letters (variant names are lower-case)"
    if not bad:
        return (
            "a dot belongs only in the versions of kernels 0.19's names (torch-2.13-cuda-12.8-cpython-3.12-abi3-"
            "x86_64-linux); legacy names write versions without one (torch213, cu128)"
        )
    shown = ", ".join(repr(ch) for ch in bad[:5])
    return f"contains {shown} (a variant name has only lower-case letters, digits, '_', '-' and a version's '.')"
