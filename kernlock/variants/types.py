"""The value types of build variant names (:mod:`kernlock.variants.grammar` parses names into them): backends,
frameworks, the Python ABI, and arch, noarch and SDK variants. Frozen, hashable values; ``variant_str`` writes each
back, in the form it was written: the legacy form (``torch213``, ``cu128``) or kernels 0.19's (``torch-2.13``,
``cuda-12.8``, ``cpython-3.12-abi3``). The form takes no part in equality, as in the loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from packaging.version import Version

__all__ = [
    "CANN",
    "CPU",
    "CUDA",
    "FIXED_BACKENDS",
    "LEGACY_PYTHON",
    "LEGACY_PYTHON_VERSION",
    "TPU",
    "VERSIONED_BACKENDS",
    "XPU",
    "ArchVariant",
    "Backend",
    "Framework",
    "Metal",
    "Neuron",
    "NoarchVariant",
    "Python",
    "ROCm",
    "SdkVariant",
    "System",
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
    """A frozen value written ``{prefix}{major}{minor}`` in the legacy form (the loader's greedy regexes: the last
    digit is the minor), e.g. ``cu128`` or ``torch-stable-abi210``, or ``{name}-{major}.{minor}`` in kernels 0.19's
    (``cuda-12.8``, ``torch-stable-abi-2.10``); ``legacy`` says which, and takes no part in equality."""

    name: ClassVar[str]
    prefix: ClassVar[str]
    version: Version
    legacy: bool = field(default=True, compare=False)

    def __init_subclass__(cls, *, name: str, prefix: str | None = None) -> None:
        cls.name = name
        cls.prefix = name if prefix is None else prefix

    @property
    def variant_str(self) -> str:
        if self.legacy:
            return f"{self.prefix}{self.version.major}{self.version.minor}"
        return f"{self.name}-{self.version.major}.{self.version.minor}"


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
    """ROCm ``rocm{M}{m}``: ``rocm71`` is ROCm 7.1, and ``rocm714`` ROCm 7.14 (kernels 0.19; before, 71.4)."""

    __slots__ = ()

    @property
    def legacy_reading(self) -> Version:
        """The version kernels before 0.19 read from the legacy name (``rocm714``: 71.4, the last digit the minor)."""
        if not self.legacy:
            return self.version
        digits = f"{self.version.major}{self.version.minor}"
        return Version(f"{digits[:-1]}.{digits[-1]}")


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
    """A torch version, ``torch{M}{m}`` (``torch-{M}.{m}``: not ``legacy``), with an optional C++ ABI tag
    (``cxx11_abi`` None when untagged)."""

    version: Version
    cxx11_abi: bool | None = None
    legacy: bool = field(default=True, compare=False)

    @property
    def variant_str(self) -> str:
        v = self.version
        base = f"torch{v.major}{v.minor}" if self.legacy else f"torch-{v.major}.{v.minor}"
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


# -- the Python ABI and the system -------------------------------------------------------------------------

#: The Python a legacy name implies: CPython 3.9 or later, stable ABI (``cpython-3.9-abi3``).
LEGACY_PYTHON_VERSION = Version("3.9")


@dataclass(frozen=True, slots=True, kw_only=True)
class Python:
    """The Python a build's compiled parts need (kernels 0.19): ``cpython-{M}.{m}-{abi}``, CPython ``version`` or
    later, ``abi3`` (the stable ABI, GIL builds) or ``abi3t`` (free-threaded too, Python 3.15 or later). A legacy
    name has none written: it is ``cpython-3.9-abi3``."""

    version: Version = LEGACY_PYTHON_VERSION
    abi: str = "abi3"
    legacy: bool = field(default=True, compare=False)

    @property
    def variant_str(self) -> str:
        """``cpython-3.12-abi3``; empty for a legacy name."""
        return "" if self.legacy else f"cpython-{self.version.major}.{self.version.minor}-{self.abi}"


LEGACY_PYTHON = Python()


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    """The CPU and OS a build runs on (``x86_64-linux``)."""

    cpu: str
    os: str

    @property
    def variant_str(self) -> str:
        return f"{self.cpu}-{self.os}"


# -- variants ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchVariant:
    """A compiled build for one framework version, backend, Python ABI (kernels 0.19's names), CPU and OS."""

    framework: Framework
    backend: Backend
    cpu: str
    os: str
    python: Python = LEGACY_PYTHON

    @property
    def legacy(self) -> bool:
        """Written in the legacy form, which every kernels release parses (kernels 0.19's form: False)."""
        return self.python.legacy

    @property
    def variant_str(self) -> str:
        python = "" if self.python.legacy else f"-{self.python.variant_str}"
        return f"{self.framework.variant_str}-{self.backend.variant_str}{python}-{self.cpu}-{self.os}"

    def __str__(self) -> str:
        return self.variant_str


@dataclass(frozen=True, slots=True, kw_only=True)
class NoarchVariant:
    """A pure-Python build, ``torch-{backend}`` (``torch-universal`` loads everywhere), or ``mlx-{backend}`` (an
    MLX build, kernels 0.19: ``mlx-metal``, loaded only where mlx is installed)."""

    backend_name: str
    mlx: bool = False

    @property
    def framework(self) -> TorchNoarch:
        return TorchNoarch()

    @property
    def legacy(self) -> bool:
        return not self.mlx

    @property
    def variant_str(self) -> str:
        return f"{'mlx' if self.mlx else 'torch'}-{self.backend_name}"

    def __str__(self) -> str:
        return self.variant_str


@dataclass(frozen=True, slots=True, kw_only=True)
class SdkVariant:
    """An SDK build (kernels 0.19): ``sdk`` (any backend, nothing compiled), ``sdk-{backend}`` (``backend_name``: one
    backend, nothing compiled), or ``sdk-[{backend}-]cpython-{M}.{m}-{abi}-{cpu}-{os}`` (compiled: ``backend`` None
    for any backend)."""

    backend: Backend | None = None
    backend_name: str | None = None
    python: Python | None = None
    system: System | None = None

    @property
    def legacy(self) -> bool:
        return False

    @property
    def variant_str(self) -> str:
        parts = ["sdk"]
        if self.backend is not None:
            parts.append(self.backend.variant_str)
        elif self.backend_name is not None:
            parts.append(self.backend_name)
        if self.python is not None and self.system is not None:
            parts += [self.python.variant_str, self.system.variant_str]
        return "-".join(parts)

    def __str__(self) -> str:
        return self.variant_str


Variant = ArchVariant | NoarchVariant | SdkVariant
