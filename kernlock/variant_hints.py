"""Did-you-mean for build variant names: a valid name close to a misspelled one (only an error path imports it)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kernlock.variant_types import FIXED_BACKENDS
from kernlock.variants import (
    ABI_TAGS,
    CPUS,
    MAX_NAME,
    NOARCH_BACKENDS,
    OSES,
    parse_variant,
    token_kind,
)

__all__ = ["describe_characters", "suggest_variant_name"]


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
_VERSIONED_FORM = re.compile(r"(cuda|cu|rocm|xpu|cann)v?(\d+)\.?(\d*)")


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
    match = _VERSIONED_FORM.fullmatch(token)
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
