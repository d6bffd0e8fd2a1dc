"""The kernels loader's variant-selection rules, as kernlock's own copies: which build variants a machine loads,
most preferred first, under each loader generation's rule (see :mod:`kernlock.variants.grammar`).

- ``kernels-0.17`` (kernels 0.15 - 0.17): legacy names only; CUDA builds of an older minor release load, other
  backends must match exactly; CANN machines load the ``torch-npu`` noarch build; stable ABI > torch (untagged
  first) > tvm-ffi and ``torch-<backend>`` > ``torch-universal``; a free-threaded CPython < 3.15 loads no arch build.
- ``kernels-0.18``: the same, and ROCm builds of an older minor release load too (as CUDA's).
- ``kernels-0.19``: kernels 0.19's names as well (``cpython-{M}.{m}-{abi}``: that Python or later; ``abi3`` never on
  a free-threaded build, ``abi3t`` from 3.15; legacy names count as ``cpython-3.9-abi3``), SDK and MLX builds; legacy
  ``rocm714`` is ROCm 7.14 (71.4 before); no CANN alias; ranks stable ABI, torch, tvm-ffi, SDK arch, torch noarch,
  SDK backend, SDK, then abi3 before abi3t and the newest Python first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import Version

from kernlock.variants import RULES
from kernlock.variants.grammar import ABI3T_MIN_PYTHON, METAL_MIN_MACOS, legacy, parse_backend
from kernlock.variants.types import (
    CUDA,
    VERSIONED_BACKENDS,
    ArchVariant,
    Backend,
    Metal,
    NoarchVariant,
    Python,
    ROCm,
    SdkVariant,
    Torch,
    TorchStableAbi,
    Variant,
)

__all__ = ["RULES", "accepted_variants", "rule_for_kernels"]


def rule_for_kernels(kernels: Version) -> str:
    """The rule of kernels release ``kernels`` (a release newer than every rule follows the newest)."""
    if kernels < Version("0.18.0.dev0"):
        return "kernels-0.17"
    if kernels < Version("0.19.0.dev0"):
        return "kernels-0.18"
    return "kernels-0.19"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Facts:
    """The machine facts a rule decides on besides backend, CPU and OS."""

    rule: str
    torch: Version | None
    cxx11_abi: bool | None
    tvm_ffi: Version | None
    macos: Version | None
    python: Version
    free_threaded: bool
    has_mlx: bool


def _minor_compatible(build: Version, system: Version) -> bool:
    """A system of release x.y loads builds of x.z with z <= y (CUDA; ROCm from kernels 0.18)."""
    return build.major == system.major and build.minor <= system.minor


def _build_version(backend: Backend, rule: str) -> Version:
    """A build's backend version as ``rule``'s loader reads its name (``rocm714``: 71.4 before kernels 0.19)."""
    assert isinstance(backend, VERSIONED_BACKENDS)
    return backend.legacy_reading if isinstance(backend, ROCm) and rule != "kernels-0.19" else backend.version


def _backend_loads(build: Backend, system: Backend, rule: str, macos: Version | None) -> bool:
    if isinstance(system, CUDA) and isinstance(build, CUDA):
        return _minor_compatible(build.version, system.version)
    if rule != "kernels-0.17" and isinstance(system, ROCm) and isinstance(build, ROCm):
        return _minor_compatible(_build_version(build, rule), system.version)
    if (build != system) if rule == "kernels-0.19" else (build.variant_str != system.variant_str):
        return False
    return not (isinstance(build, Metal) and (macos is None or macos < METAL_MIN_MACOS))


def _python_loads(python: Python, version: Version, free_threaded: bool) -> bool:
    """kernels 0.19: ``abi3`` never loads on a free-threaded build; the build's Python must not be newer."""
    return not (python.abi == "abi3" and free_threaded) and version >= python.version


def _arch_loads(v: ArchVariant, system: Backend, cpu: str, os: str, facts: _Facts) -> bool:
    if facts.rule == "kernels-0.19" and not _python_loads(v.python, facts.python, facts.free_threaded):
        return False
    if v.cpu != cpu or v.os != os:
        return False
    framework = v.framework
    if isinstance(framework, Torch):
        if framework.version != facts.torch or (
            framework.cxx11_abi is not None and framework.cxx11_abi != facts.cxx11_abi
        ):
            return False
    elif isinstance(framework, TorchStableAbi):
        if facts.torch is None or framework.version > facts.torch:
            return False
    elif framework.version != facts.tvm_ffi:
        return False
    return _backend_loads(v.backend, system, facts.rule, facts.macos)


def _loads(v: Variant, system: Backend, cpu: str, os: str, facts: _Facts) -> bool:
    if isinstance(v, ArchVariant):
        return _arch_loads(v, system, cpu, os, facts)
    if isinstance(v, NoarchVariant):
        if v.mlx and not facts.has_mlx:
            return False
        name = "npu" if system.name == "cann" and facts.rule != "kernels-0.19" else system.name
        return v.backend_name in (name, "universal")
    if v.python is not None and not _python_loads(v.python, facts.python, facts.free_threaded):
        return False
    if v.system is not None and (v.system.cpu != cpu or v.system.os != os):
        return False
    if v.backend is not None:
        return _backend_loads(v.backend, system, facts.rule, facts.macos)
    return v.backend_name is None or v.backend_name == system.name


def _python_order(python: Python) -> tuple[int, int, int]:
    return (0 if python.abi == "abi3" else 1, -python.version.major, -python.version.minor)


def _backend_order(backend: Backend | None, rule: str) -> int:
    return -_build_version(backend, rule).minor if isinstance(backend, VERSIONED_BACKENDS) else 0


def _preference(variant: Variant, rule: str) -> tuple[int, ...]:
    """The loader's sort key (without its accepted-first part). Equal keys keep their input order (a stable sort)."""
    if isinstance(variant, SdkVariant):
        if variant.python is not None:
            backend = 1 if variant.backend is None else _backend_order(variant.backend, rule)
            return (3, 0, 0, backend, *_python_order(variant.python))
        return (5 if variant.backend_name is not None else 6, 0, 0, 0, 0, 0, 0)
    if isinstance(variant, NoarchVariant):
        universal = 1 if variant.backend_name == "universal" else 0
        return (4, 0, 0, universal, 0, 0) if rule == "kernels-0.19" else (2, 0, 0, universal)
    framework = variant.framework
    if isinstance(framework, TorchStableAbi):
        order: tuple[int, ...] = (0, -framework.version.major, -framework.version.minor)
    elif isinstance(framework, Torch):
        order = (1, 0, 1 if framework.cxx11_abi is not None else 0)
    else:
        order = (2, 0, 0)
    backend = _backend_order(variant.backend, rule)
    return (*order, backend, *_python_order(variant.python)) if rule == "kernels-0.19" else (*order, backend)


def accepted_variants(
    variants: Iterable[Variant],
    *,
    backend: Backend | str,
    cpu: str,
    os: str,
    torch_version: Version | None,
    torch_cxx11_abi: bool | None,
    tvm_ffi_version: Version | None = None,
    macos_version: Version | None = None,
    free_threaded: bool = False,
    python_version: Version | None = None,
    has_mlx: bool = False,
    rule: str = RULES[-1],
) -> list[Variant]:
    """The variants a machine loads under ``rule``, most preferred first.

    ``backend`` is the machine's backend (``cu129`` may load ``cu128`` builds), ``torch_version`` and
    ``tvm_ffi_version`` are major.minor versions (None when not installed), ``torch_cxx11_abi`` is None off
    Linux, ``macos_version`` gates Metal builds, ``free_threaded`` is a CPython without the GIL and
    ``python_version`` its major.minor (None: kernels 0.19's default, 3.15; before 0.19 a free-threaded CPython
    is taken to be older than 3.15, which drops every arch build), ``has_mlx`` whether mlx is installed. Names a
    rule's loader cannot parse (kernels 0.19's forms, before 0.19) are skipped, as that loader skips them. Variants
    with equal preference keep their order in ``variants``, as in the loader.
    """
    if rule not in RULES:
        raise ValueError(f"unknown variant rule {rule!r} (known: {', '.join(RULES)})")
    selected = parse_backend(backend) if isinstance(backend, str) else backend
    python = python_version or ABI3T_MIN_PYTHON
    facts = _Facts(
        rule=rule,
        torch=torch_version,
        cxx11_abi=torch_cxx11_abi,
        tvm_ffi=tvm_ffi_version,
        macos=macos_version,
        python=python,
        free_threaded=free_threaded,
        has_mlx=has_mlx,
    )
    if rule == "kernels-0.19":
        candidates = list(variants)
    else:
        drop_arch = free_threaded and (python_version is None or python_version < ABI3T_MIN_PYTHON)
        candidates = [v for v in variants if legacy(v) and not (drop_arch and isinstance(v, ArchVariant))]
    accepted = [v for v in candidates if _loads(v, selected, cpu, os, facts)]
    return sorted(accepted, key=lambda v: _preference(v, rule))
