"""The Hub's build-variant grammar, as kernlock's own copy (the loader's selection rule is
:mod:`kernlock.variants.rule`), with a did-you-mean for a misspelled name.

A kernel commit holds one folder per build variant under ``build/``: arch builds such as
``torch213-cxx11-cu128-x86_64-linux``, ``torch-stable-abi210-cu126-x86_64-linux`` or
``tvm-ffi01-cpu-aarch64-darwin``, and noarch builds such as ``torch-cpu`` or ``torch-universal``.

These modules follow the rule of the loader generation named by :data:`RULE` (``kernels-0.17``, i.e. kernels 0.17.x:
``kernels.variants.parse_variant``, ``_check_variants`` and ``_sort_variants``, and the backend regexes of
``kernels.backends``), copied so that a lock does not depend on which ``kernels`` is installed where it is made,
and so that local commands need not import ``kernels`` at all. A differential test checks it against the
installed loader's own function. When a new loader generation changes the rule, add a new rule beside this one
and bump :data:`RULE`.

The grammar here is stricter than the loader's parser: it accepts every name the Hub publishes and the loader
understands, and refuses anything else (an unknown OS, CPU or backend, a non-canonical version, stray
characters). A name only the loader's lenient parser accepts could never be selected on a real machine anyway.

Only the standard library and ``packaging`` are used here: never import kernels, huggingface_hub or torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cached_property

from packaging.version import Version

from kernlock.variants import RULE
from kernlock.variants.types import (
    FIXED_BACKENDS,
    VERSIONED_BACKENDS,
    ArchVariant,
    Backend,
    Framework,
    NoarchVariant,
    Torch,
    TorchStableAbi,
    TvmFfi,
    Variant,
)

__all__ = [
    "ABI_TAGS",
    "CPUS",
    "MAX_NAME",
    "METAL_MIN_MACOS",
    "NOARCH_BACKENDS",
    "OSES",
    "RULE",
    "VariantNameError",
    "check_variant_name",
    "describe_characters",
    "parse_backend",
    "parse_variant",
    "suggest_variant_name",
    "token_kind",
]


#: Metal builds use ``-std=metal4.0``, which needs macOS 26 or later (kernels' ``_METAL_MIN_MACOS_VERSION``).
METAL_MIN_MACOS = Version("26.0")

#: The operating systems and CPUs that variant names use.
OSES = ("linux", "darwin", "windows")
CPUS = ("x86_64", "aarch64")
#: The backends a noarch variant ``torch-<backend>`` may name (``npu`` is the noarch name of CANN).
NOARCH_BACKENDS = ("cpu", "cuda", "metal", "rocm", "xpu", "npu", "neuron", "tpu", "universal")
#: The ABI tags of Torch arch variants (Linux builds; the loader prefers names without one).
ABI_TAGS = ("cxx11", "cxx98")

#: The longest variant name (also the longest build folder name kernlock accepts, ``names.check_variant_folder``).
MAX_NAME = 128

_GRAMMAR = (
    "torch{M}{m}[-cxx11|-cxx98]-{backend}-{cpu}-{os}, torch-stable-abi{M}{m}-{backend}-{cpu}-{os}, "
    "tvm-ffi{M}{m}-{backend}-{cpu}-{os} or torch-{backend}"
)
_BACKENDS_TEXT = "cpu, metal, neuron, tpu, cu{M}{m}, rocm{M}{m}, xpu{YYYY}{m} or cann{M}{m}"


def parse_backend(text: str) -> Backend:
    """Parse a backend as written in a variant (``cpu``, ``cu128``, ``rocm71``, ``xpu20253``...).

    Versions split like the loader's greedy regexes (``cu(\\d+)(\\d+)``: ``cu128`` -> 12.8, ``xpu20253`` ->
    2025.3); a version not written canonically (``cu0128``) is refused. Raises ValueError with the reason.
    """
    if text in FIXED_BACKENDS:
        return FIXED_BACKENDS[text]
    for kind in VERSIONED_BACKENDS:
        match = re.fullmatch(rf"{kind.prefix}(\d+)(\d)", text)
        if match:
            backend = kind(version=Version(f"{match.group(1)}.{match.group(2)}"))
            if backend.variant_str != text:
                raise _Bad(
                    f"backend '{text}' is not written canonically", f"the loader reads it as '{backend.variant_str}'"
                )
            return backend
    raise _Bad(f"unknown backend '{text}'", f"expected {_BACKENDS_TEXT}")


class VariantNameError(ValueError):
    """A name outside the build-variant grammar.

    ``reason`` says what is wrong (``unknown OS 'linuxx'``), ``hint`` what was expected there (or None), and
    ``suggestion`` is a close valid name (or None), computed when first asked for.
    """

    def __init__(self, name: str, reason: str, hint: str | None = None) -> None:
        super().__init__(name, reason, hint)
        self.name = name
        self.reason = reason
        self.hint = hint

    @cached_property
    def suggestion(self) -> str | None:
        return suggest_variant_name(self.name) if isinstance(self.name, str) else None

    def __str__(self) -> str:
        text = f"{self.name!r} is not a build variant name: {self.reason}"
        if self.suggestion:
            return f"{text}; did you mean '{self.suggestion}'?"
        return f"{text} ({self.hint or f'expected {_GRAMMAR}'})"


class _Bad(ValueError):
    """A parse failure inside a name: what is wrong, and what was expected there."""

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason if hint is None else f"{reason} ({hint})")
        self.reason = reason
        self.hint = hint


def _version_pair(text: str, pattern: str, what: str, example: str) -> Version:
    match = re.fullmatch(pattern, text)
    if not match:
        raise _Bad(f"invalid {what} '{text}'", f"expected e.g. {example}")
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


def _parse_arch(parts: list[str], framework: Framework, prefix: str) -> ArchVariant:
    if len(parts) != 3:
        kinds = [token_kind(part) for part in parts]
        if len(parts) < 3:
            missing = [kind for kind in ("backend", "CPU", "OS") if kind not in kinds]
            if len(missing) == 3 - len(parts):
                listed = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
                raise ValueError(f"missing the {listed} after '{prefix}'")
        elif kinds[:3] == ["backend", "CPU", "OS"]:
            raise ValueError(f"unexpected '{'-'.join(parts[3:])}' after the OS")
        raise _Bad(
            f"'{'-'.join(parts)}' after '{prefix}' is not {{backend}}-{{cpu}}-{{os}}",
            "e.g. cpu-x86_64-linux or cu128-x86_64-linux",
        )
    backend_text, cpu, os = parts
    backend = parse_backend(backend_text)
    if cpu not in CPUS:
        raise _Bad(f"unknown CPU '{cpu}'", f"known: {', '.join(CPUS)}")
    if os not in OSES:
        raise _Bad(f"unknown OS '{os}'", f"known: {', '.join(OSES)}")
    return ArchVariant(framework=framework, backend=backend, cpu=cpu, os=os)


def _parse(name: str) -> Variant:
    """The structure of ``kernels.variants.parse_variant``, with kernlock's strict tokens."""
    if not name:
        raise ValueError("the name is empty")
    if len(name) > MAX_NAME:
        raise ValueError(f"the name is {len(name)} characters long (at most {MAX_NAME})")
    if re.fullmatch(r"[a-z0-9_\-]+", name) is None:
        raise ValueError(describe_characters(name))
    parts = name.split("-")
    if "" in parts:
        raise ValueError("has an empty part (a leading, trailing or doubled '-')")
    if name.startswith("torch-stable-abi"):
        token = "-".join(parts[0:3])
        version = _version_pair(token, r"torch-stable-abi(\d)(\d+)", "stable ABI version", "torch-stable-abi210")
        return _parse_arch(parts[3:], TorchStableAbi(version=version), token)
    if parts[0] == "torch":
        backend_name = "-".join(parts[1:])
        if not backend_name:
            raise _Bad("missing the backend of a noarch build", "e.g. torch-cpu, torch-cuda, torch-universal")
        if backend_name not in NOARCH_BACKENDS:
            if len(parts) == 4 and token_kind(parts[1]) == "backend":
                raise ValueError("missing the torch version: arch builds are torch{M}{m}-{backend}-{cpu}-{os}")
            raise _Bad(f"unknown noarch backend '{backend_name}'", f"known: {', '.join(NOARCH_BACKENDS)}")
        return NoarchVariant(backend_name=backend_name)
    if parts[0].startswith("torch"):
        if len(parts) >= 2 and parts[1] in ABI_TAGS:
            token, abi, rest = f"{parts[0]}-{parts[1]}", parts[1] == "cxx11", parts[2:]
        else:
            token, abi, rest = parts[0], None, parts[1:]
        version = _version_pair(parts[0], r"torch(\d)(\d+)", "torch version", "torch213 for torch 2.13")
        if abi is None and len(rest) == 4 and [token_kind(p) for p in rest[1:]] == ["backend", "CPU", "OS"]:
            raise _Bad(f"unknown ABI tag '{rest[0]}'", "expected cxx11, cxx98 or none")
        return _parse_arch(rest, Torch(version=version, cxx11_abi=abi), token)
    if parts[0] == "tvm" and len(parts) >= 2 and parts[1].startswith("ffi"):
        token = f"tvm-{parts[1]}"
        version = _version_pair(token, r"tvm-ffi(\d+?)(\d+)", "tvm-ffi version", "tvm-ffi01 for tvm-ffi 0.1")
        return _parse_arch(parts[2:], TvmFfi(version=version), token)
    raise _Bad(f"unknown framework '{parts[0]}'")


def parse_variant(name: str) -> Variant:
    """Parse a build variant name; raise :class:`VariantNameError` (a ValueError) with the reason.

    Accepts exactly the names written canonically in the grammar (every name the real Hub publishes):
    ``parse_variant(name).variant_str == name`` for every accepted name.
    """
    if not isinstance(name, str):
        raise VariantNameError(name, f"expected a string, not {type(name).__name__}")
    try:
        variant = _parse(name)
    except _Bad as err:
        raise VariantNameError(name, err.reason, err.hint) from None
    except ValueError as err:
        raise VariantNameError(name, str(err)) from None
    if variant.variant_str != name:
        raise VariantNameError(name, "not written canonically", f"the loader reads it as '{variant.variant_str}'")
    return variant


def check_variant_name(name: str) -> str:
    """Return ``name`` if it is a valid build variant name (safe as a folder name), else raise ValueError."""
    parse_variant(name)
    return name


# -- did you mean (only a refused name needs it) -----------------------------------------------------------


def describe_characters(name: str) -> str:
    """What is wrong with the characters of ``name``, a name with a character outside ``[a-z0-9_-]``."""
    bad = sorted(set(re.sub(r"[a-z0-9_\-]", "", name)))
    if any(ch.isspace() for ch in bad):
        return "contains whitespace"
    if any(ch.isupper() for ch in bad) and all(ch.isalpha() for ch in bad):
        return "contains upper-case letters (variant names are lower-case)"
    if bad == ["."] and re.search(r"\d\.\d", name):
        return "versions are written without a dot (torch213 for torch 2.13, cu128 for CUDA 12.8)"
    shown = ", ".join(repr(ch) for ch in bad[:5])
    return f"contains {shown} (a variant name has only lower-case letters, digits, '_' and '-')"


_OS_ALIASES = {"macos": "darwin", "osx": "darwin", "mac": "darwin", "win": "windows", "win32": "windows"}
_CPU_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "x8664": "x86_64", "arm64": "aarch64"}
_BACKEND_ALIASES = {"mps": "metal"}
_NOARCH_ALIASES = {"cann": "npu", "mps": "metal", "gpu": "cuda"}
_COMMON_BACKENDS = (
    *FIXED_BACKENDS,
    *(f"cu{v}" for v in ("118", "121", "124", "126", "128", "129", "130", "132")),
    *(f"rocm{v}" for v in ("61", "62", "63", "64", "70", "71", "72")),
    *(f"xpu{v}" for v in ("20250", "20251", "20252", "20253", "20260")),
)
_VERSIONED_FORM = r"(cuda|cu|rocm|xpu|cann)v?(\d+)\.?(\d*)"


def _closest(token: str, known: Iterable[str], aliases: dict[str, str]) -> str | None:
    if token in aliases:
        return aliases[token]
    candidates = list(known)
    if token in candidates:
        return token
    import difflib  # ~4 ms at import: only a misspelled name needs it

    best, best_score = None, 0.6
    for candidate in candidates:  # first of equals wins: the lists are in order of preference
        score = difflib.SequenceMatcher(None, token, candidate).ratio()
        if score > best_score:
            best, best_score = candidate, score
    return best


_MIN_DIGITS = {"cu": 3, "rocm": 2, "xpu": 5, "cann": 2}


def _fix_backend(token: str) -> str | None:
    if token_kind(token) == "backend":
        return token
    match = re.fullmatch(_VERSIONED_FORM, token)
    if match:
        family, major, minor = match.groups()
        prefix = "cu" if family == "cuda" else family
        if minor:
            fixed = f"{prefix}{int(major)}{int(minor)}"
        elif len(major) >= _MIN_DIGITS[prefix]:
            fixed = f"{prefix}{int(major[:-1])}{major[-1]}"
        else:
            fixed = None
        if fixed and token_kind(fixed) == "backend":
            return fixed
    return _closest(token, _COMMON_BACKENDS, _BACKEND_ALIASES)


def _fix_arch(parts: list[str]) -> list[str] | None:
    if len(parts) < 3:
        return None
    backend = _fix_backend(parts[0])
    cpu = _closest(parts[1], CPUS, _CPU_ALIASES)
    os = _closest(parts[2], OSES, _OS_ALIASES)
    if backend is None or cpu is None or os is None:
        return None
    return [backend, cpu, os]  # anything after the OS is dropped


def _fix_framework(parts: list[str]) -> tuple[list[str], list[str]] | None:
    """Split corrected framework tokens from the arch tokens that follow them."""
    head = parts[0]
    if head == "torch" and len(parts) >= 2 and parts[1] == "stable" and len(parts) >= 3:
        match = re.fullmatch(r"abi(\d)(\d+)", parts[2])
        if match:
            return [f"torch-stable-abi{match.group(1)}{int(match.group(2))}"], parts[3:]
        return None
    if head == "tvm" and len(parts) >= 2:
        match = re.fullmatch(r"ffi(\d+?)(\d+)", parts[1])
        return ([f"tvm-ffi{int(match.group(1))}{int(match.group(2))}"], parts[2:]) if match else None
    match = re.fullmatch(r"(?:py)?torch[_v]?(\d)(\d+)", head)
    if not match:
        return None
    framework = [f"torch{match.group(1)}{int(match.group(2))}"]
    rest = parts[1:]
    if rest and token_kind(rest[0]) is None and len(rest) > 3:
        tag = _closest(rest[0], ABI_TAGS, {})
        if tag is None:
            return None
        framework.append(tag)
        rest = rest[1:]
    elif rest and rest[0] in ABI_TAGS:
        framework.append(rest[0])
        rest = rest[1:]
    return framework, rest


def suggest_variant_name(text: str) -> str | None:
    """A valid variant name close to ``text`` (typos, case, spacing, dotted versions, aliases), or None.

    Tokens are corrected one by one against the known OS, CPU, backend and ABI tokens (difflib), and the
    result is returned only when it parses and differs from ``text``. Text far longer than any name gets no
    suggestion (and no int() of a digit run past Python's 4300-digit limit).
    """
    if not isinstance(text, str) or len(text) > 2 * MAX_NAME:
        return None
    clean = text.strip().lower()
    clean = re.sub(r"\s*-\s*", "-", clean)
    clean = re.sub(r"\s+", "-", clean)
    clean = clean.replace("x86-64", "x86_64").replace("tvm_ffi", "tvm-ffi").replace("stable_abi", "stable-abi")
    clean = re.sub(r"^(?:py)?torch[-_]?v?(\d)\.(\d+)", r"torch\1\2", clean)
    clean = re.sub(r"(\d)\.(\d)", r"\1\2", clean)
    clean = re.sub(r"[^a-z0-9_\-]", "", clean)
    parts = [part for part in clean.split("-") if part]
    if not parts:
        return None
    if parts[0] == "torch" and (len(parts) == 2 or (len(parts) > 2 and parts[1] != "stable")):
        backend = _closest("-".join(parts[1:]), NOARCH_BACKENDS, _NOARCH_ALIASES)
        candidate = f"torch-{backend}" if backend else None
    else:
        split = _fix_framework(parts)
        arch = _fix_arch(split[1]) if split else None
        candidate = "-".join([*split[0], *arch]) if split and arch else None
    if candidate is None or candidate == text:
        return None
    try:
        parse_variant(candidate)
    except ValueError:
        return None
    return candidate
