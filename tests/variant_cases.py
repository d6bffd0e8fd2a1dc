"""Generated (variant set x system) cases for the differential tests of kernlock's variant rule."""

from __future__ import annotations

import random

from packaging.version import Version

from kernlock.variants import grammar as variants
from kernlock.variants import types as variant_types

DIFF_TORCHES = ["28", "29", "210", "211", "212", "213"]
DIFF_BACKENDS = [
    *["cpu", "metal", "neuron", "tpu"],
    *["cu118", "cu120", "cu126", "cu128", "cu129", "cu130", "cu132"],
    *["rocm63", "rocm64", "rocm71", "xpu20253", "xpu20260", "cann80", "cann81"],
]
DIFF_PLATFORMS = [("x86_64", "linux"), ("aarch64", "linux"), ("aarch64", "darwin"), ("x86_64", "windows")]
DIFF_NOARCH = [f"torch-{b}" for b in variants.NOARCH_BACKENDS]


def diff_pool() -> dict[tuple[str, str], list[str]]:
    """Every arch name form (torch tagged and tagless, stable ABI, tvm-ffi) per (cpu, os)."""
    pool: dict[tuple[str, str], list[str]] = {}
    for cpu, os in DIFF_PLATFORMS:
        arch = [f"{b}-{cpu}-{os}" for b in DIFF_BACKENDS]
        names = [f"torch{t}{abi}-{a}" for t in DIFF_TORCHES for abi in ("-cxx11", "-cxx98", "") for a in arch]
        names += [f"torch-stable-abi{t}-{a}" for t in DIFF_TORCHES for a in arch]
        names += [f"tvm-ffi{v}-{a}" for v in ("01", "02", "10") for a in arch]
        pool[(cpu, os)] = names
    return pool


def random_system(rng: random.Random) -> dict:
    cpu, os = rng.choice(DIFF_PLATFORMS)
    # The loader passes no ABI off Linux; once in a while the facts are odd anyway.
    abi = rng.choice([True, True, False]) if os == "linux" else rng.choice([None] * 9 + [True])
    return {
        "backend": rng.choice(
            ["metal", "metal", "cpu", *DIFF_BACKENDS]
            if os == "darwin"
            else [*DIFF_BACKENDS, "cu129", "cu129", "cu130", "cpu", "cann80"]
        ),
        "cpu": cpu,
        "os": os,
        "torch_version": rng.choice([*(Version(f"{t[0]}.{t[1:]}") for t in DIFF_TORCHES), None]),
        "torch_cxx11_abi": abi,
        "tvm_ffi_version": rng.choice([None, None, Version("0.1"), Version("0.2"), Version("1.0")]),
        "macos_version": rng.choice([None, Version("15.5"), Version("26.0"), Version("26.1")]),
        "free_threaded": rng.random() < 0.08,
    }


#: Declared facts the generated environments draw from (kernlock.environments.facts): interpreters (t: free-threaded;
#: 3.15t loads arch builds), loader versions around real kernels-minver values, GPU capabilities.
DIFF_PYTHONS = ["3.11", "3.12", "3.13", "3.13t", "3.14t", "3.15t"]
#: Loader releases per rule (an environment's declared `kernels` picks its rule: the tests declare the installed one's).
DIFF_LOADERS = {
    "kernels-0.17": ["0.12.0", "0.15.2", "0.16.2", "0.17.2"],
    "kernels-0.18": ["0.18.0rc1", "0.18.1", "0.18.3"],
    "kernels-0.19": ["0.19.0rc1", "0.19.1", "0.19.3"],
}
DIFF_CAPABILITIES = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"]
#: metadata.json `backend.archs` lists: real ones, architecture- (a) and family-specific (f), PTX, unknown forms.
DIFF_ARCHS = [
    ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0+PTX"],
    ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
    ["8.0", "8.6"],
    ["9.0a"],
    ["9.0a", "10.0a"],
    ["10.0f", "12.0f"],
    ["8.0+PTX"],
    ["sm_90", "gfx942"],
    ["8.0", "sm_90"],
    ["12.0", "10.0a+PTX"],
    [],
]
DIFF_MINVERS = [None, None, "0.12.0", "0.16.0", "0.17.2", "0.17.3", "0.18.0", "0.18.2", "0.19.1", "0.19.2", "0.20.0"]


def random_declaration(rng: random.Random, system: dict, rule: str) -> dict | None:
    """An environment table (``{name, <facts>}``) for ``system``, drawing its optional facts at random, its `kernels`
    a release of ``rule`` (or, for the newest rule, sometimes none); None when the system is not a machine an
    environment string can name (no torch, an ABI off Linux, a backend with no arch-build machine form). ``system``
    is updated to the facts the loader sees on that machine."""
    if system["torch_version"] is None or (system["torch_cxx11_abi"] is None) != (system["os"] != "linux"):
        return None
    abi = {True: "-cxx11", False: "-cxx98", None: ""}[system["torch_cxx11_abi"]]
    torch = system["torch_version"]
    table: dict = {"name": f"torch{torch.major}{torch.minor}{abi}-{system['backend']}-{system['cpu']}-{system['os']}"}
    new = rule == "kernels-0.19"
    if new and rng.random() < 0.6:
        python = system["python_version"]
        table["python"] = f"{python.major}.{python.minor}{'t' if system['free_threaded'] else ''}"
    elif not new and rng.random() < 0.5:
        table["python"] = rng.choice(DIFF_PYTHONS)
    if system["tvm_ffi_version"] is not None:
        table["tvm-ffi"] = f"{system['tvm_ffi_version']}.{rng.randint(0, 3)}"
    if rng.random() < 0.5 or not new:
        table["kernels"] = rng.choice(DIFF_LOADERS[rule])
    if system.get("has_mlx"):
        table["mlx"] = "0.29.1"
    if system["backend"].startswith("cu") and rng.random() < 0.7:
        table["cuda-capabilities"] = sorted(
            set(rng.sample(DIFF_CAPABILITIES, rng.randint(1, 2))), key=lambda c: tuple(map(int, c.split(".")))
        )
    if system["os"] == "darwin" and system["macos_version"] is not None:
        table["macos"] = str(system["macos_version"])
    elif system["os"] == "darwin":
        system["macos_version"] = variants.METAL_MIN_MACOS  # an undeclared macOS runs the Metal builds it names
    else:
        system["macos_version"] = None
    if not new:
        python = table.get("python", "3.11")
        system["free_threaded"] = python.endswith("t") and Version(python[:-1]) < Version("3.15")
    return table


def random_metadata(rng: random.Random, variant: variant_types.Variant) -> dict:
    """A metadata.json for a build: its backend type, CUDA archs drawn from DIFF_ARCHS, maybe a kernels-minver."""
    if isinstance(variant, variant_types.NoarchVariant):
        backend = {"npu": "cann", "universal": "cuda"}.get(variant.backend_name, variant.backend_name)
    elif isinstance(variant, variant_types.SdkVariant):
        backend = variant.backend.name if variant.backend is not None else variant.backend_name or "cpu"
    else:
        backend = variant.backend.name
    metadata: dict = {
        "name": "my-kernel",
        "id": "_my_kernel_0",
        "version": 1,
        "license": "MIT",
        "python-depends": [],
        "backend": {"type": backend},
    }
    archs = rng.choice(DIFF_ARCHS)
    if backend == "cuda" and archs:
        metadata["backend"]["archs"] = archs
    if minver := rng.choice(DIFF_MINVERS):
        metadata["kernels-minver"] = minver
    return metadata


# -- kernels 0.19's names ------------------------------------------------------------------------------------------

DIFF_PYTHONS_0_19 = ["3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]
#: Names only kernels 0.19 reads, beside the legacy ones: SDK and MLX builds, the CANN noarch name, ROCm 7.14.
DIFF_NEW_GLOBAL = ["sdk", "sdk-cuda", "sdk-cpu", "sdk-rocm", "sdk-metal", "mlx-metal", "torch-cann"]


def new_backend(legacy: str) -> str:
    """A legacy backend token in kernels 0.19's form (``cu128`` -> ``cuda-12.8``, ``cpu`` -> ``cpu``)."""
    backend = variants.parse_backend(legacy)
    if isinstance(backend, variant_types.VERSIONED_BACKENDS):
        return type(backend)(version=backend.version, legacy=False).variant_str
    return backend.variant_str


def diff_pool_0_19(rng: random.Random) -> dict[tuple[str, str], list[str]]:
    """:func:`diff_pool` plus names in kernels 0.19's form (dotted versions, named backends, the Python ABI, SDK
    builds), a sample of each form per (cpu, os), and legacy ``rocm714`` builds."""
    pool = diff_pool()
    for (cpu, os), names in pool.items():
        system = f"{cpu}-{os}"
        for _ in range(400):
            torch = rng.choice(DIFF_TORCHES)
            dotted = f"{torch[0]}.{torch[1:]}"
            backend = new_backend(rng.choice(DIFF_BACKENDS))
            python = rng.choice(DIFF_PYTHONS_0_19)
            abi = rng.choice(["abi3", "abi3", "abi3t"]) if python == "3.15" else "abi3"
            tail = f"{backend}-cpython-{python}-{abi}-{system}"
            form = rng.randrange(6)
            if form == 0:
                names.append(f"torch-{dotted}-{rng.choice(['cxx11-', 'cxx98-', ''])}{tail}")
            elif form == 1:
                names.append(f"torch-{dotted}-{tail}")
            elif form == 2:
                names.append(f"torch-stable-abi-{dotted}-{tail}")
            elif form == 3:
                names.append(f"tvm-ffi-{rng.choice(['0.1', '0.2', '1.0'])}-{tail}")
            elif form == 4:
                names.append(f"sdk-{tail}")
            else:
                names.append(f"sdk-cpython-{python}-{abi}-{system}")
        names += [f"torch{t}-cxx11-rocm714-{system}" for t in DIFF_TORCHES[-2:]]
        names += [n for n in catalog_names() if n.endswith(f"-{system}")]
        pool[(cpu, os)] = sorted(set(names))
    return pool


def catalog_names() -> list[str]:
    """Every build name of the sample catalog and of the real Hub's matrix (``HUB_MATRIX``: real-variants.md)."""
    from kernlock.testing import catalog_matrix, hub_variants

    names = set(hub_variants())
    for branches in catalog_matrix().values():
        for built in branches.values():
            names.update(built)
    return sorted(names)
