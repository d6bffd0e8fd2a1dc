"""The value types of build variant names (:mod:`kernlock.variants.grammar` parses names into them): backends,
frameworks, and arch and noarch variants. Frozen, hashable values; ``variant_str`` writes each back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from packaging.version import Version

__all__ = [
    "CANN",
    "CPU",
    "CUDA",
    "FIXED_BACKENDS",
    "TPU",
    "VERSIONED_BACKENDS",
    "XPU",
    "ArchVariant",
    "Backend",
    "Framework",
    "Metal",
    "Neuron",
    "NoarchVariant",
    "ROCm",
    "Torch",
    "TorchNoarch",
    "TorchStableAbi",
    "TvmFfi",
    "Variant",
]


# -- backends ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fixed:
    """A value written as its name alone (a backend without a version, or noarch's bare ``torch``): one value
    per class (equal to every other instance of its class)."""

    name: ClassVar[str]

    def __init_subclass__(cls, *, name: str) -> None:
        cls.name = name

    @property
    def variant_str(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class _Versioned:
    """A frozen value written ``{prefix}{major}{minor}`` (the loader's greedy regexes: the last digit is the minor),
    e.g. ``cu128`` or ``torch-stable-abi210``."""

    name: ClassVar[str]
    prefix: ClassVar[str]
    version: Version

    def __init_subclass__(cls, *, name: str, prefix: str | None = None) -> None:
        cls.name = name
        cls.prefix = name if prefix is None else prefix

    @property
    def variant_str(self) -> str:
        return f"{self.prefix}{self.version.major}{self.version.minor}"


class CPU(_Fixed, name="cpu"):
    """No accelerator."""

    __slots__ = ()


class Metal(_Fixed, name="metal"):
    """Apple GPUs through Metal (macOS)."""

    __slots__ = ()


class Neuron(_Fixed, name="neuron"):
    """AWS Neuron."""

    __slots__ = ()


class TPU(_Fixed, name="tpu"):
    """Google TPU."""

    __slots__ = ()


class CUDA(_Versioned, name="cuda", prefix="cu"):
    """CUDA ``cu{M}{m}``: ``cu128`` is CUDA 12.8."""

    __slots__ = ()


class ROCm(_Versioned, name="rocm"):
    """ROCm ``rocm{M}{m}``: ``rocm71`` is ROCm 7.1."""

    __slots__ = ()


class XPU(_Versioned, name="xpu"):
    """Intel XPU ``xpu{YYYY}{m}``: ``xpu20253`` is oneAPI 2025.3."""

    __slots__ = ()


class CANN(_Versioned, name="cann"):
    """Huawei Ascend CANN ``cann{M}{m}`` (its noarch builds are ``torch-npu``)."""

    __slots__ = ()


Backend = CPU | Metal | Neuron | TPU | CUDA | ROCm | XPU | CANN
FIXED_BACKENDS: dict[str, Backend] = {"cpu": CPU(), "metal": Metal(), "neuron": Neuron(), "tpu": TPU()}
VERSIONED_BACKENDS = (CUDA, ROCm, XPU, CANN)


# -- frameworks --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Torch:
    """A torch version, ``torch{M}{m}``, with an optional C++ ABI tag (``cxx11_abi`` None when untagged)."""

    version: Version
    cxx11_abi: bool | None = None

    @property
    def variant_str(self) -> str:
        base = f"torch{self.version.major}{self.version.minor}"
        if self.cxx11_abi is None:
            return base
        return f"{base}-{'cxx11' if self.cxx11_abi else 'cxx98'}"


class TorchStableAbi(_Versioned, name="torch-stable-abi"):
    """torch's stable ABI, ``torch-stable-abi{M}{m}``: loads on that torch version and every newer one."""

    __slots__ = ()


class TvmFfi(_Versioned, name="tvm-ffi"):
    """apache-tvm-ffi, ``tvm-ffi{M}{m}`` (``tvm-ffi01`` is 0.1): loads only on that tvm-ffi version."""

    __slots__ = ()


class TorchNoarch(_Fixed, name="torch"):
    """The versionless torch framework of noarch variants."""

    __slots__ = ()


Framework = Torch | TorchStableAbi | TvmFfi


# -- variants ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchVariant:
    """A compiled build for one framework version, backend, CPU and OS."""

    framework: Framework
    backend: Backend
    cpu: str
    os: str

    @property
    def variant_str(self) -> str:
        return f"{self.framework.variant_str}-{self.backend.variant_str}-{self.cpu}-{self.os}"

    def __str__(self) -> str:
        return self.variant_str


@dataclass(frozen=True, slots=True, kw_only=True)
class NoarchVariant:
    """A pure-Python build, ``torch-{backend}`` (``torch-universal`` loads everywhere)."""

    backend_name: str

    @property
    def framework(self) -> TorchNoarch:
        return TorchNoarch()

    @property
    def variant_str(self) -> str:
        return f"torch-{self.backend_name}"

    def __str__(self) -> str:
        return self.variant_str


Variant = ArchVariant | NoarchVariant
