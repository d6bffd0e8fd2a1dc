"""Environments: parsing, detection, `when` conditions, and variant choice equal to the kernels loader's."""

from __future__ import annotations

import itertools
import random

import pytest
from kernels.variants import parse_variant, resolve_variant
from packaging.version import Version

from kernlock.environment import Condition, Environment, detect
from kernlock.errors import EnvironmentStringError, SpecError

TORCHES = ["28", "29", "210", "211", "212", "213"]
BACKENDS = ["cpu", "cu118", "cu126", "cu128", "cu129", "cu130", "rocm63", "rocm64", "xpu20252", "xpu20253"]
ARCH_POOL = [
    f"torch{t}{abi}-{b}-{cpu}-linux"
    for t, abi, b, cpu in itertools.product(TORCHES, ["-cxx11", "-cxx98", ""], BACKENDS, ["x86_64", "aarch64"])
]
ARCH_POOL += [f"torch{t}-metal-aarch64-darwin" for t in TORCHES]
ARCH_POOL += [f"torch{t}-{b}-x86_64-windows" for t in TORCHES for b in ("cpu", "cu126", "cu128")]
ARCH_POOL += [f"torch-stable-abi{t}-{b}-x86_64-linux" for t in ("29", "210", "211") for b in ("cpu", "cu126", "cu130")]
NOARCH_POOL = ["torch-cpu", "torch-cuda", "torch-rocm", "torch-xpu", "torch-metal", "torch-universal"]
ENVIRONMENTS = [
    f"torch{t}-cxx11-{b}-x86_64-linux"
    for t in ("29", "210", "211", "213")
    for b in ("cpu", "cu126", "cu128", "cu129", "cu130", "rocm64", "xpu20253")
] + [
    "torch211-cxx98-cu128-x86_64-linux",
    "torch211-cxx11-cu130-aarch64-linux",
    "torch212-metal-aarch64-darwin",
    "torch210-cu128-x86_64-windows",
]


def _backend_facts(backend: str) -> tuple[str, Version | None]:
    for prefix, family in (("cu", "cuda"), ("rocm", "rocm"), ("xpu", "xpu")):
        if backend.startswith(prefix):
            digits = backend[len(prefix) :]
            return family, Version(f"{digits[:-1]}.{digits[-1]}")
    return backend, None


def oracle(env_name: str, names: list[str]) -> str | None:
    """The loader's rule as documented (reference/kernels-and-transformers.md), written independently."""
    env = env_name.split("-")
    torch = env[0][5:]
    abi = env[1] if env[1] in ("cxx11", "cxx98") else None
    backend, cpu, os = env[-3], env[-2], env[-1]
    family, version = _backend_facts(backend)
    ranked = []
    for name in names:
        parts = name.split("-")
        if parts[0] == "torch" and parts[1] != "stable":
            noarch = parts[1]
            if noarch in (family, "universal"):
                ranked.append(((2, 0, 0, 1 if noarch == "universal" else 0), name))
            continue
        v_backend, v_cpu, v_os = parts[-3], parts[-2], parts[-1]
        if (v_cpu, v_os) != (cpu, os):
            continue
        v_family, v_version = _backend_facts(v_backend)
        if name.startswith("torch-stable-abi"):
            abi_version = Version(f"{parts[2][3]}.{parts[2][4:]}")
            if abi_version > Version(f"{torch[0]}.{torch[1:]}"):
                continue
            order = (0, -abi_version.major, -abi_version.minor)
        else:
            v_torch = parts[0][5:]
            v_abi = parts[1] if parts[1] in ("cxx11", "cxx98") else None
            if v_torch != torch or (v_abi is not None and v_abi != abi):
                continue
            order = (1, 0, 1 if v_abi else 0)
        if family == "cuda" and v_family == "cuda":
            if v_version.major != version.major or v_version.minor > version.minor:
                continue
        elif v_backend != backend:
            continue
        minor = -v_version.minor if v_version is not None else 0
        ranked.append(((*order, minor), name))
    ranked.sort(key=lambda item: item[0])
    return ranked[0][1] if ranked else None


def _variant_sets(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    sets = []
    for _ in range(count):
        names = rng.sample(ARCH_POOL, rng.randint(1, 30)) + rng.sample(NOARCH_POOL, rng.randint(0, 2))
        sets.append(names)
    return sets


def test_choice_matches_loader_rule_over_generated_matrix() -> None:
    """Hundreds of (variant set x environment) cases: kernlock picks what the documented loader rule picks."""
    cases = 0
    hits = 0
    for names in _variant_sets(seed=7, count=60):
        for env_name in ENVIRONMENTS:
            expected = oracle(env_name, names)
            assert Environment.parse(env_name).select_variant(names) == expected, (env_name, names)
            cases += 1
            hits += expected is not None
    assert cases >= 1000
    assert hits >= 200  # the matrix really exercises acceptance, not only rejection


@pytest.mark.parametrize(
    ("env_name", "names", "expected"),
    [
        # CUDA minor fallback: a cu129 machine loads the highest cu12x build <= 12.9.
        (
            "torch211-cxx11-cu129-x86_64-linux",
            [
                "torch211-cxx11-cu126-x86_64-linux",
                "torch211-cxx11-cu128-x86_64-linux",
                "torch211-cxx11-cu130-x86_64-linux",
            ],
            "torch211-cxx11-cu128-x86_64-linux",
        ),
        # Stable ABI wins over a plain torch build, newest ABI first, but never newer than torch.
        (
            "torch211-cxx11-cu130-x86_64-linux",
            [
                "torch211-cxx11-cu130-x86_64-linux",
                "torch-stable-abi210-cu130-x86_64-linux",
                "torch-stable-abi212-cu130-x86_64-linux",
            ],
            "torch-stable-abi210-cu130-x86_64-linux",
        ),
        # noarch of the backend before universal; CPU machines do not take torch-cuda.
        ("torch213-cxx11-cpu-x86_64-linux", ["torch-cuda", "torch-universal", "torch-cpu"], "torch-cpu"),
        ("torch213-cxx11-cpu-x86_64-linux", ["torch-cuda", "torch-universal"], "torch-universal"),
        ("torch213-cxx11-cpu-x86_64-linux", ["torch-cuda", "torch212-cxx11-cpu-x86_64-linux"], None),
        (
            "torch212-metal-aarch64-darwin",
            ["torch212-metal-aarch64-darwin", "torch-metal"],
            "torch212-metal-aarch64-darwin",
        ),
    ],
)
def test_named_rules(env_name: str, names: list[str], expected: str | None) -> None:
    assert Environment.parse(env_name).select_variant(names) == expected


def test_this_machine_agrees_with_the_loader_itself() -> None:
    """On this machine, kernlock's choice equals kernels.resolve_variant's own (which probes the machine)."""
    env = detect()
    for names in [*_variant_sets(seed=11, count=150), [*ARCH_POOL, *NOARCH_POOL], ["torch213-cxx11-cpu-x86_64-linux"]]:
        loader_pick, _ = resolve_variant([parse_variant(n) for n in names])
        assert env.select_variant(names) == (loader_pick.variant_str if loader_pick else None)


def test_detect_names_this_machine() -> None:
    import platform

    import torch

    env = detect()
    major, minor = torch.__version__.split(".")[:2]
    assert str(env).startswith(f"torch{major}{minor}-cxx11-")
    assert str(env).endswith(f"-{platform.machine()}-linux")
    assert env.backend == ("cpu" if torch.version.cuda is None else f"cu{torch.version.cuda.replace('.', '')}")


@pytest.mark.parametrize(
    "text",
    [
        "torch213-cpu-x86_64-linux",
        "torch-cpu",
        "torch213-cxx11-cuda-x86_64-linux",
        "gpu",
        "torch-stable-abi210-cu128-x86_64-linux",
    ],
)
def test_bad_environment_strings_name_the_grammar(text: str) -> None:
    with pytest.raises(EnvironmentStringError) as err:
        Environment.parse(text)
    assert "torch213-cxx11-cpu-x86_64-linux" in str(err.value)


def test_when_conditions() -> None:
    cu128 = Environment.parse("torch211-cxx11-cu128-x86_64-linux")
    cpu = Environment.parse("torch213-cxx11-cpu-x86_64-linux")
    assert Condition.parse("cuda == 12.8").matches(cu128)
    assert not Condition.parse("cuda == 12.8").matches(cpu)
    assert Condition.parse("cuda != 12.8").matches(cpu)
    assert Condition.parse("torch >= 2.11 and os == linux and arch == x86_64").matches(cu128)
    assert not Condition.parse("torch < 2.11").matches(cu128)
    assert Condition.parse("torch>2.12").matches(cpu)
    for bad in ["cuda = 12.8", "gpu == 1", "os >= linux", "cuda == twelve", ""]:
        with pytest.raises(SpecError):
            Condition.parse(bad)


def test_detection_without_importing_torch_agrees_with_torch_itself() -> None:
    """The CLI reads torch/version.py instead of importing torch; both paths must name the same environment."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kernlock.environment import _detect_from_version_file, _detect_with_torch\n"
        "fast = _detect_from_version_file()\n"
        "assert 'torch' not in sys.modules, 'the fast path imported torch'\n"
        "print(fast, _detect_with_torch())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1] == str(detect())
