"""The kernels loader's variant-selection rule (kernels 0.17: ``_check_variants`` + ``_sort_variants``), as
kernlock's own copy: which build variants a machine loads, most preferred first (see
:mod:`kernlock.variants.grammar`)."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import Version

from kernlock.variants.grammar import METAL_MIN_MACOS, parse_backend
from kernlock.variants.types import (
    CUDA,
    VERSIONED_BACKENDS,
    ArchVariant,
    Backend,
    Metal,
    NoarchVariant,
    Torch,
    TorchStableAbi,
    Variant,
)

__all__ = ["accepted_variants"]


def _accepts(
    variant: Variant,
    backend: Backend,
    cpu: str,
    os: str,
    torch_version: Version | None,
    torch_cxx11_abi: bool | None,
    tvm_ffi_version: Version | None,
    macos_version: Version | None,
) -> bool:
    if isinstance(variant, NoarchVariant):
        noarch_name = "npu" if backend.name == "cann" else backend.name
        return variant.backend_name in (noarch_name, "universal")
    if variant.cpu != cpu or variant.os != os:
        return False
    framework = variant.framework
    if isinstance(framework, Torch):
        if framework.version != torch_version:
            return False
        if framework.cxx11_abi is not None and framework.cxx11_abi != torch_cxx11_abi:
            return False
    elif isinstance(framework, TorchStableAbi):
        if torch_version is None or framework.version > torch_version:
            return False
    elif framework.version != tvm_ffi_version:
        return False
    # A CUDA x.y system loads CUDA x.z builds with z <= y; other backends must match exactly.
    if isinstance(backend, CUDA) and isinstance(variant.backend, CUDA):
        return (
            variant.backend.version.major == backend.version.major
            and variant.backend.version.minor <= backend.version.minor
        )
    if variant.backend.variant_str != backend.variant_str:
        return False
    return not (isinstance(variant.backend, Metal) and (macos_version is None or macos_version < METAL_MIN_MACOS))


def _preference(variant: Variant) -> tuple[int, ...]:
    """The loader's sort key (without its accepted-first part): stable ABI (newest first), then torch
    (untagged before tagged), then tvm-ffi, each with the highest backend minor version first; then
    ``torch-<backend>``, then ``torch-universal``. Equal keys keep their input order (a stable sort)."""
    if isinstance(variant, NoarchVariant):
        return (2, 0, 0, 1 if variant.backend_name == "universal" else 0)
    framework = variant.framework
    if isinstance(framework, TorchStableAbi):
        order: tuple[int, ...] = (0, -framework.version.major, -framework.version.minor)
    elif isinstance(framework, Torch):
        order = (1, 0, 1 if framework.cxx11_abi is not None else 0)
    else:
        order = (2, 0, 0)
    backend = variant.backend
    backend_order = -backend.version.minor if isinstance(backend, VERSIONED_BACKENDS) else 0
    return (*order, backend_order)


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
) -> list[Variant]:
    """The variants a machine loads, most preferred first: the rule of :data:`RULE`.

    ``backend`` is the machine's backend (``cu129`` may load ``cu128`` builds), ``torch_version`` and
    ``tvm_ffi_version`` are major.minor versions (None when not installed), ``torch_cxx11_abi`` is None off
    Linux, ``macos_version`` gates Metal builds, and ``free_threaded`` (CPython < 3.15 without the GIL) drops
    every arch build. Variants with equal preference keep their order in ``variants``, as in the loader.
    """
    selected = parse_backend(backend) if isinstance(backend, str) else backend
    candidates = [v for v in variants if not (free_threaded and isinstance(v, ArchVariant))]
    accepted = [
        v
        for v in candidates
        if _accepts(v, selected, cpu, os, torch_version, torch_cxx11_abi, tvm_ffi_version, macos_version)
    ]
    return sorted(accepted, key=_preference)
