"""The Hub's build-variant grammar, as kernlock's own copy (the loader's selection rule is
:mod:`kernlock.variants.rule`), with a did-you-mean for a misspelled name.

A kernel commit holds one folder per build variant under ``build/``: arch builds such as
``torch213-cxx11-cu128-x86_64-linux``, ``torch-stable-abi210-cu126-x86_64-linux`` or
``tvm-ffi01-cpu-aarch64-darwin``, and noarch builds such as ``torch-cpu`` or ``torch-universal``. kernels 0.19 also
reads a second form, with dotted versions, named backends and the Python ABI (``torch-2.13-cuda-12.8-cpython-3.12-
abi3-x86_64-linux``, ``torch-stable-abi-2.11-...``, ``tvm-ffi-0.1-...``), SDK builds (``sdk``, ``sdk-cuda``,
``sdk-[{backend}-]cpython-{M}.{m}-{abi}-{cpu}-{os}``) and MLX builds (``mlx-metal``); every name parses here, and
:func:`legacy` tells the names older loaders can read from those only 0.19 reads.

This is kernels 0.19's grammar (``kernels._internals.variants.parse_variant`` and the backend parsers of
``kernels._internals.backends``); the rules of every generation (:mod:`kernlock.variants.rule`) take its values. It
is copied so that a lock does not depend on which ``kernels`` is installed where it is made, and so that local
commands need not import ``kernels`` at all. Differential tests check it against each loader's own function.

The grammar here is stricter than the loader's parser: it accepts every name the Hub publishes and the loader
understands, and refuses anything else (an unknown OS, CPU or backend, a non-canonical version, stray
characters). A name only the loader's lenient parser accepts could never be selected on a real machine anyway.

Only the standard library and ``packaging`` are used here: never import kernels, huggingface_hub or torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cached_property

from kernlock.variants import RULE
from kernlock.variants.tokens import (
    ABI3T_MIN_PYTHON,
    ABI_TAGS,
    CPUS,
    MAX_NAME,
    METAL_MIN_MACOS,
    MLX_BACKENDS,
    NOARCH_BACKENDS,
    OSES,
    PYTHON_ABIS,
    BadToken,
    describe_characters,
    dotted,
    parse_backend,
    parse_new_backend,
    parse_python,
    parse_system,
    token_kind,
    version_pair,
)
from kernlock.variants.types import (
    FIXED_BACKENDS,
    ArchVariant,
    Framework,
    NoarchVariant,
    SdkVariant,
    Torch,
    TorchStableAbi,
    TvmFfi,
    Variant,
)

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
    "RULE",
    "VariantNameError",
    "check_variant_name",
    "describe_characters",
    "legacy",
    "parse_backend",
    "parse_variant",
    "suggest_variant_name",
    "token_kind",
]

_GRAMMAR = (
    "torch{M}{m}[-cxx11|-cxx98]-{backend}-{cpu}-{os}, torch-stable-abi{M}{m}-{backend}-{cpu}-{os}, "
    "tvm-ffi{M}{m}-{backend}-{cpu}-{os}, torch-{backend}, kernels 0.19's "
    "torch-{M}.{m}-{backend}[-{M}.{m}]-cpython-{M}.{m}-abi3-{cpu}-{os}, or sdk[-...]"
)


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
        raise BadToken(
            f"'{'-'.join(parts)}' after '{prefix}' is not {{backend}}-{{cpu}}-{{os}}",
            "e.g. cpu-x86_64-linux or cu128-x86_64-linux",
        )
    backend = parse_backend(parts[0])
    system = parse_system(parts[1:])
    return ArchVariant(framework=framework, backend=backend, cpu=system.cpu, os=system.os)


def _parse_new_arch(parts: list[str], framework: Framework, prefix: str) -> ArchVariant:
    """What follows a kernels 0.19 framework: ``{backend}[-{M}.{m}]-cpython-{M}.{m}-{abi}-{cpu}-{os}``."""
    if "cpython" not in parts:
        raise BadToken(f"missing the Python ABI after '{prefix}'", "kernels 0.19's names carry one: cpython-3.9-abi3")
    at = parts.index("cpython")
    if at == 0:
        raise ValueError(f"missing the backend after '{prefix}'")
    if len(parts) != at + 5:
        raise BadToken(
            f"'{'-'.join(parts[at:])}' is not cpython-{{M}}.{{m}}-{{abi}}-{{cpu}}-{{os}}",
            "e.g. cpython-3.12-abi3-x86_64-linux",
        )
    backend = parse_new_backend(parts[:at])
    python = parse_python(parts[at : at + 3])
    system = parse_system(parts[at + 3 :])
    return ArchVariant(framework=framework, backend=backend, cpu=system.cpu, os=system.os, python=python)


def _parse_sdk(parts: list[str]) -> SdkVariant:
    """``sdk``, ``sdk-{backend}``, ``sdk-[{backend}-{M}.{m}-]cpython-{M}.{m}-{abi}-{cpu}-{os}`` (kernels 0.19)."""
    rest = parts[1:]
    if "cpython" in rest:
        at = rest.index("cpython")
        if len(rest) != at + 5:
            raise BadToken(f"'{'-'.join(rest[at:])}' is not cpython-{{M}}.{{m}}-{{abi}}-{{cpu}}-{{os}}")
        python, system = parse_python(rest[at : at + 3]), parse_system(rest[at + 3 :])
        backend = parse_new_backend(rest[:at]) if at else None
        return SdkVariant(backend=backend, python=python, system=system)
    if not rest:
        return SdkVariant()
    if len(rest) != 1 or rest[0] not in NOARCH_BACKENDS or rest[0] == "universal":
        raise BadToken(f"unknown SDK backend '{'-'.join(rest)}'", f"known: {', '.join(NOARCH_BACKENDS[:-1])}")
    return SdkVariant(backend_name=rest[0])


def _parse(name: str) -> Variant:
    """The structure of ``kernels._internals.variants.parse_variant`` (0.19), with kernlock's strict tokens."""
    if not name:
        raise ValueError("the name is empty")
    if len(name) > MAX_NAME:
        raise ValueError(f"the name is {len(name)} characters long (at most {MAX_NAME})")
    if re.fullmatch(r"[a-z0-9_.\-]+", name) is None:
        raise ValueError(describe_characters(name))
    parts = name.split("-")
    if "" in parts:
        raise ValueError("has an empty part (a leading, trailing or doubled '-')")
    if "." in name and not any(re.fullmatch(r"\d+\.\d+", part) for part in parts if "." in part):
        raise ValueError(describe_characters(name))
    if parts[0] == "sdk":
        return _parse_sdk(parts)
    if name.startswith("torch-stable-abi"):
        if len(parts) > 3 and parts[2] == "abi":
            version = dotted(parts[3], "stable ABI version", "torch-stable-abi-2.10")
            token = "-".join(parts[:4])
            return _parse_new_arch(parts[4:], TorchStableAbi(version=version, legacy=False), token)
        token = "-".join(parts[0:3])
        version = version_pair(token, r"torch-stable-abi(\d)(\d+)", "stable ABI version", "torch-stable-abi210")
        return _parse_arch(parts[3:], TorchStableAbi(version=version), token)
    if parts[0] == "torch" and len(parts) >= 2 and parts[1][:1].isdigit():
        version = dotted(parts[1], "torch version", "torch-2.13")
        abi = parts[2] == "cxx11" if len(parts) > 2 and parts[2] in ABI_TAGS else None
        n = 2 if abi is None else 3
        framework = Torch(version=version, cxx11_abi=abi, legacy=False)
        return _parse_new_arch(parts[n:], framework, "-".join(parts[:n]))
    if parts[0] == "torch":
        backend_name = "-".join(parts[1:])
        if not backend_name:
            raise BadToken("missing the backend of a noarch build", "e.g. torch-cpu, torch-cuda, torch-universal")
        if backend_name not in NOARCH_BACKENDS:
            if len(parts) == 4 and token_kind(parts[1]) == "backend":
                raise ValueError("missing the torch version: arch builds are torch{M}{m}-{backend}-{cpu}-{os}")
            raise BadToken(f"unknown noarch backend '{backend_name}'", f"known: {', '.join(NOARCH_BACKENDS)}")
        return NoarchVariant(backend_name=backend_name)
    if parts[0] == "mlx" and len(parts) >= 2 and not parts[1][:1].isdigit():
        backend_name = "-".join(parts[1:])
        if backend_name not in MLX_BACKENDS:
            raise BadToken(f"unknown MLX backend '{backend_name}'", f"known: {', '.join(MLX_BACKENDS)}")
        return NoarchVariant(backend_name=backend_name, mlx=True)
    if parts[0].startswith("torch"):
        if len(parts) >= 2 and parts[1] in ABI_TAGS:
            token, abi, rest = f"{parts[0]}-{parts[1]}", parts[1] == "cxx11", parts[2:]
        else:
            token, abi, rest = parts[0], None, parts[1:]
        version = version_pair(parts[0], r"torch(\d)(\d+)", "torch version", "torch213 for torch 2.13")
        if abi is None and len(rest) == 4 and [token_kind(p) for p in rest[1:]] == ["backend", "CPU", "OS"]:
            raise BadToken(f"unknown ABI tag '{rest[0]}'", "expected cxx11, cxx98 or none")
        return _parse_arch(rest, Torch(version=version, cxx11_abi=abi), token)
    if parts[0] == "tvm" and len(parts) >= 2 and parts[1].startswith("ffi"):
        if parts[1] == "ffi" and len(parts) > 2:
            version = dotted(parts[2], "tvm-ffi version", "tvm-ffi-0.1")
            return _parse_new_arch(parts[3:], TvmFfi(version=version, legacy=False), "-".join(parts[:3]))
        token = f"tvm-{parts[1]}"
        version = version_pair(token, r"tvm-ffi(\d+?)(\d+)", "tvm-ffi version", "tvm-ffi01 for tvm-ffi 0.1")
        return _parse_arch(parts[2:], TvmFfi(version=version), token)
    raise BadToken(f"unknown framework '{parts[0]}'")


def parse_variant(name: str) -> Variant:
    """Parse a build variant name; raise :class:`VariantNameError` (a ValueError) with the reason.

    Accepts exactly the names written canonically in the grammar (every name the real Hub publishes):
    ``parse_variant(name).variant_str == name`` for every accepted name.
    """
    if not isinstance(name, str):
        raise VariantNameError(name, f"expected a string, not {type(name).__name__}")
    try:
        variant = _parse(name)
    except BadToken as err:
        raise VariantNameError(name, err.reason, err.hint) from None
    except ValueError as err:
        raise VariantNameError(name, str(err)) from None
    if variant.variant_str != name:
        raise VariantNameError(name, "not written canonically", f"the loader reads it as '{variant.variant_str}'")
    return variant


def legacy(variant: Variant) -> bool:
    """Whether ``variant`` is written in the legacy form, which loaders before kernels 0.19 parse (they skip a name
    in kernels 0.19's form, an SDK or an MLX build, as a folder they cannot read)."""
    return variant.legacy


def check_variant_name(name: str) -> str:
    """Return ``name`` if it is a valid build variant name (safe as a folder name), else raise ValueError."""
    parse_variant(name)
    return name


# -- did you mean (only a refused name needs it) -----------------------------------------------------------


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
