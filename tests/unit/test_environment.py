"""Environments: parsing, detection, `when` conditions, and variant choice equal to the kernels loader's."""

from __future__ import annotations

import importlib.metadata
import itertools
import random
import sys

import pytest
from kernels import backends as kernels_backends
from kernels import variants as kernels_variants
from kernels.variants import parse_variant, resolve_variant
from packaging.version import Version
from variant_cases import DIFF_NOARCH
from variant_cases import diff_pool as _diff_pool
from variant_cases import random_system as _random_system

from kernlock.environments.environment import Environment, detect
from kernlock.errors import EnvironmentStringError, SpecError
from kernlock.project.conditions import Condition
from kernlock.variants import grammar as variants
from kernlock.variants import rule as variant_rule
from kernlock.variants import types as variant_types

#: The rule of the installed loader, which the differential tests here compare with.
INSTALLED_RULE = variant_rule.rule_for_kernels(Version(importlib.metadata.version("kernels")))

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
            chosen = Environment.parse(env_name).select_variant(names, rule="kernels-0.17")
            assert chosen == expected, (env_name, names)
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


# -- kernlock's own rule (kernlock.variants.grammar) against the installed loader's ---------------------------------


def test_rule_equals_the_installed_loaders_rule_over_generated_cases(monkeypatch, caplog) -> None:
    """>= 2,000 seeded (variant set x system) cases: kernlock.variants.rule.accepted_variants returns exactly the
    ordered list of kernels' own `_resolve_variant_for_system` (stable ABI, tagless Linux names, tvm-ffi,
    noarch incl. universal, darwin/metal with macOS versions, CUDA minor fallback, free-threaded Python)."""
    import logging

    caplog.set_level(logging.ERROR, logger="kernels.variants")  # its free-threaded warning, once per case
    pool = _diff_pool()
    every = sorted({name for names in pool.values() for name in names} | set(DIFF_NOARCH))
    ours = {name: variants.parse_variant(name) for name in every}
    theirs = {name: kernels_variants.parse_variant(name) for name in every}
    assert all(theirs[name].variant_str == name for name in every)

    rng = random.Random(20260817)
    stats = dict.fromkeys(["cases", "accepted", "several", "stable", "tvm", "universal", "metal", "fallback"], 0)
    stats["free_threaded"] = stats["ties"] = 0
    while stats["cases"] < 2500:
        system = _random_system(rng)
        platform = pool[(system["cpu"], system["os"])]
        family = variants.parse_backend(system["backend"]).name
        versions = (system["torch_version"], system["tvm_ffi_version"])
        near = [v for v in platform if ours[v].framework.version in versions and ours[v].backend.name == family]
        names = rng.sample(platform, rng.randint(0, 20)) + rng.sample(near, rng.randint(0, min(12, len(near))))
        names += rng.sample(every, rng.randint(0, 6)) + rng.sample(DIFF_NOARCH, rng.randint(0, 3))
        names = list(dict.fromkeys(names))  # a repo's variant folders are distinct
        rng.shuffle(names)  # equal preference keeps input order in both rules
        monkeypatch.setattr(
            kernels_variants, "_is_unsupported_free_threaded_build", lambda s=system: s["free_threaded"]
        )
        expected, _trace = kernels_variants._resolve_variant_for_system(
            variants=[theirs[n] for n in names],
            selected_backend=kernels_backends.parse_backend(system["backend"]),
            cpu=system["cpu"],
            os=system["os"],
            torch_version=system["torch_version"],
            torch_cxx11_abi=system["torch_cxx11_abi"],
            tvm_ffi_version=system["tvm_ffi_version"],
            macos_version=system["macos_version"],
        )
        got = variant_rule.accepted_variants([ours[n] for n in names], rule=INSTALLED_RULE, **system)
        expected_names = [v.variant_str for v in expected]
        assert [v.variant_str for v in got] == expected_names, (system, names)

        stats["cases"] += 1
        stats["accepted"] += bool(got)
        stats["several"] += len(got) >= 2
        stats["stable"] += any(n.startswith("torch-stable-abi") for n in expected_names)
        stats["tvm"] += any(n.startswith("tvm-ffi") for n in expected_names)
        stats["universal"] += "torch-universal" in expected_names
        stats["metal"] += any(n.endswith("-metal-aarch64-darwin") for n in expected_names)
        stats["free_threaded"] += system["free_threaded"]
        keys = [variant_rule._preference(v, INSTALLED_RULE) for v in got]
        stats["ties"] += any(a == b for a, b in itertools.pairwise(keys))  # decided by input order
        stats["fallback"] += system["backend"].startswith("cu") and any(
            f"-{system['backend']}-" not in n and "-cu" in n for n in expected_names
        )
    # The matrix really exercises each part of the rule, not only rejection.
    assert stats["accepted"] >= 1500 and stats["several"] >= 800, stats
    assert min(stats["stable"], stats["tvm"], stats["universal"], stats["fallback"]) >= 100, stats
    assert stats["metal"] >= 10 and stats["free_threaded"] >= 100 and stats["ties"] >= 20, stats


def test_environment_choice_equals_the_installed_loaders_rule() -> None:
    """Environment.accepted_variants calls the rule with the environment's facts, as the loader would on it."""
    pool = _diff_pool()
    every = sorted({name for names in pool.values() for name in names} | set(DIFF_NOARCH))
    theirs = {name: kernels_variants.parse_variant(name) for name in every}
    envs = [
        *ENVIRONMENTS,
        "torch213-metal-aarch64-darwin",
        "torch213-cpu-aarch64-darwin",
        "torch212-cu129-x86_64-windows",
    ]
    rng = random.Random(5)
    cases = 0
    for env_name in envs:
        env = Environment.parse(env_name)
        for _ in range(12):
            names = rng.sample(pool[(env.cpu, env.os)], 25) + rng.sample(DIFF_NOARCH, 2)
            expected, _ = kernels_variants._resolve_variant_for_system(
                variants=[theirs[n] for n in names],
                selected_backend=kernels_backends.parse_backend(env.backend),
                cpu=env.cpu,
                os=env.os,
                torch_version=env.torch,
                torch_cxx11_abi=True if "-cxx11-" in env_name else (False if "-cxx98-" in env_name else None),
                tvm_ffi_version=None,
                macos_version=Version("26.0") if env.os == "darwin" else None,
            )
            chosen = env.accepted_variants(names, rule=INSTALLED_RULE)
            assert chosen == [v.variant_str for v in expected], (env_name, names)
            cases += 1
    assert cases >= 400


def test_rule_names_the_loader_generation_it_copies() -> None:
    """A new lock follows the newest rule; every rule is documented, and the installed loader's is one of them."""
    assert variants.RULE == variant_rule.RULES[-1] == "kernels-0.19"
    assert all(rule in (variant_rule.__doc__ or "") for rule in variant_rule.RULES)
    installed = Version(importlib.metadata.version("kernels"))
    assert variant_rule.rule_for_kernels(installed) == f"kernels-{installed.major}.{max(installed.minor, 17)}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cu128", Version("12.8")),
        ("cu130", Version("13.0")),
        ("cu118", Version("11.8")),
        ("rocm71", Version("7.1")),
        ("xpu20253", Version("2025.3")),
        ("xpu20260", Version("2026.0")),
        ("cann80", Version("8.0")),
    ],
)
def test_backend_versions_split_like_the_loader(name: str, expected: Version) -> None:
    assert variants.parse_backend(name).version == expected == kernels_backends.parse_backend(name).version
    assert variants.parse_backend(name).variant_str == name


def test_framework_versions_split_like_the_loader() -> None:
    for name in ["torch213-cpu-x86_64-linux", "torch-stable-abi210-cpu-x86_64-linux", "tvm-ffi01-cpu-x86_64-linux"]:
        assert variants.parse_variant(name).framework.version == kernels_variants.parse_variant(name).framework.version
    assert variants.parse_variant("tvm-ffi01-cu128-x86_64-linux").framework.version == Version("0.1")
    assert variants.parse_variant("torch28-cxx11-cu129-aarch64-linux").framework == variant_types.Torch(
        version=Version("2.8"), cxx11_abi=True
    )


REAL_HUB_NAMES = [
    "torch210-cu128-x86_64-linux",
    "torch211-cu126-x86_64-linux",
    "torch-stable-abi210-cu126-x86_64-linux",
    "torch-stable-abi210-rocm71-x86_64-linux",
    "torch-stable-abi29-cu130-x86_64-linux",
    "tvm-ffi01-cu128-x86_64-linux",
    "tvm-ffi01-cpu-aarch64-darwin",
    "torch212-cpu-aarch64-darwin",
    "torch213-metal-aarch64-darwin",
    "torch29-metal-aarch64-darwin",
    "torch210-cu128-x86_64-windows",
    "torch-cpu",
    "torch-cuda",
    "torch-metal",
    "torch-rocm",
    "torch-xpu",
    "torch-npu",
    "torch-neuron",
    "torch-tpu",
    "torch-universal",
    "torch211-cxx11-rocm71-x86_64-linux",
    "torch213-cxx11-rocm72-x86_64-linux",
    "torch212-cxx11-xpu20253-x86_64-linux",
    "torch213-cxx11-xpu20260-x86_64-linux",
    "torch28-cxx11-cu129-aarch64-linux",
    "torch213-cxx11-cu132-aarch64-linux",
    "torch213-cxx11-cpu-x86_64-linux",
    "torch211-cxx98-cu128-x86_64-linux",
]


@pytest.mark.parametrize("name", REAL_HUB_NAMES)
def test_check_variant_name_accepts_real_hub_names(name: str) -> None:
    assert variants.check_variant_name(name) == name
    assert variants.parse_variant(name).variant_str == name == kernels_variants.parse_variant(name).variant_str


@pytest.mark.parametrize(
    "name",
    [
        "torch999-bogus",
        "../x",
        "torch213-cxx11-cpu-x86_64-linux/..",
        "",
        "torch",
        "torch-",
        "torch-foo",
        "torch-cpu-x86_64-linux",
        "torch213-cxx11-cpu-x86_64-linuxx",  # the loader's own parser takes this one
        "torch213-cxx11-cpu-sparc-linux",
        "torch213-cxx11-cuda-x86_64-linux",
        "torch2013-cxx11-cpu-x86_64-linux",
        "torch213-cxx11-cu0128-x86_64-linux",
        "torch213-cxx12-cpu-x86_64-linux",
        "torch213-cxx11-cpu-x86_64-linux-extra",
        "Torch213-cxx11-cpu-x86_64-linux",
        "torch213-cxx11-cpu-x86_64-linux ",
        "tvm-ffi1-cpu-x86_64-linux",
        "torch-stable-abi2-cpu-x86_64-linux",
        ".",
        "build",
    ],
)
def test_check_variant_name_rejects_nonsense(name: str) -> None:
    with pytest.raises(ValueError) as err:
        variants.check_variant_name(name)
    assert "is not a build variant name" in str(err.value)
    assert isinstance(err.value, variants.VariantNameError) and err.value.reason


def test_names_only_the_lenient_loader_parses_are_never_selected() -> None:
    """kernels parses an unknown OS or noarch backend; kernlock refuses the name and ignores it in selection."""
    for name in ["torch213-cxx11-cpu-x86_64-linuxx", "torch-foo", "torch213-cxx11-cpu-sparc-linux"]:
        kernels_variants.parse_variant(name)
        with pytest.raises(ValueError):
            variants.parse_variant(name)
    env = Environment.parse("torch213-cxx11-cpu-x86_64-linux")
    assert env.accepted_variants(["torch213-cxx11-cpu-x86_64-linuxx", "../x", "torch-cpu"]) == ["torch-cpu"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # bad OS / CPU / backend
        ("torch213-cxx11-cpu-x86_64-linuxx", "unknown OS 'linuxx'"),
        ("torch213-cxx11-cpu-x86_64-solaris", "unknown OS 'solaris' (known: linux, darwin, windows)"),
        ("torch213-cxx11-cpu-sparc-linux", "unknown CPU 'sparc' (known: x86_64, aarch64)"),
        ("torch213-cxx11-cpu-x86_65-linux", "unknown CPU 'x86_65'"),
        ("torch213-cxx11-cuda-x86_64-linux", "unknown backend 'cuda'"),
        ("torch213-cxx11-gpu-x86_64-linux", "unknown backend 'gpu'"),
        ("torch213-cxx11-cu1-x86_64-linux", "unknown backend 'cu1'"),
        ("torch213-cxx11-cu0128-x86_64-linux", "backend 'cu0128' is not written canonically"),
        ("torch213-cxx12-cpu-x86_64-linux", "unknown ABI tag 'cxx12'"),
        # missing parts
        ("torch213-cxx11-cpu-x86_64", "missing the OS"),
        ("torch213-cxx11-x86_64-linux", "missing the backend"),
        ("torch213-cxx11-cpu-linux", "missing the CPU"),
        ("torch213-cxx11", "missing the backend, CPU and OS"),
        ("torch213-cpu-x86_64-linux", "names a Linux machine without its C++ ABI"),
        ("cpu-x86_64-linux", "unknown framework 'cpu'"),
        # torch version forms
        ("torch2-cxx11-cpu-x86_64-linux", "invalid torch version 'torch2'"),
        ("torch2.13-cxx11-cpu-x86_64-linux", "legacy names write versions without one"),
        ("torch2013-cxx11-cpu-x86_64-linux", "not written canonically"),
        ("torchx13-cxx11-cpu-x86_64-linux", "invalid torch version 'torchx13'"),
        ("pytorch213-cxx11-cpu-x86_64-linux", "unknown framework 'pytorch213'"),
        # not a machine
        ("torch-cpu", "a noarch build name, not a machine"),
        ("torch-stable-abi210-cu128-x86_64-linux", "a stable-ABI build name, not a machine"),
        ("tvm-ffi01-cu128-x86_64-linux", "a tvm-ffi build name, not a machine"),
        ("torch212-cxx11-cpu-aarch64-darwin", "only Linux machines have"),
        # trailing junk, empty, whitespace inside, odd characters
        ("torch213-cxx11-cpu-x86_64-linux-extra", "unexpected 'extra' after the OS"),
        ("torch213-cxx11-cpu-x86_64-linux-", "empty part"),
        ("torch213-cxx11-cpu-x86_64-linux/..", "contains '/'"),
        ("", "the name is empty"),
        ("   ", "the name is empty"),
        ("torch213-cxx11 -cpu-x86_64-linux", "contains whitespace"),
        ("torch213-cxx11-cpu-x86_64\tlinux", "contains whitespace"),
        ("TORCH213-CXX11-CPU-X86_64-LINUX", "upper-case"),
        ("gpu", "unknown framework 'gpu'"),
    ],
)
def test_malformed_environment_strings_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(EnvironmentStringError) as err:
        Environment.parse(text)
    message = str(err.value)
    assert message.startswith(f"'{text.strip()}' ") and fragment in message, message
    assert "did you mean" in message or "torch213-cxx11-cpu-x86_64-linux" in message  # a fix or the grammar


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("torch213-cxx11-cpu-x86_64-linuxx", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx11-cpu-x86_64-linx", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch212-cpu-aarch64-darwn", "torch212-cpu-aarch64-darwin"),
        ("torch212-cpu-arm64-macos", "torch212-cpu-aarch64-darwin"),
        ("torch210-cu128-x86_64-window", "torch210-cu128-x86_64-windows"),
        ("torch213-cxx11-cpu-amd64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx11-cpu-x86-64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx11-cpu-aarch46-linux", "torch213-cxx11-cpu-aarch64-linux"),
        ("torch213-cxx11-cpuu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch211-cxx11-cuda12.8-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux"),
        ("torch211-cxx11-cuda128-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux"),
        ("torch211-cxx11-cu12.8-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux"),
        ("torch211-cxx11-cu0128-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux"),
        ("torch213-cxx11-rocm7.1-x86_64-linux", "torch213-cxx11-rocm71-x86_64-linux"),
        ("torch213-cxx11-xpu2026.0-x86_64-linux", "torch213-cxx11-xpu20260-x86_64-linux"),
        ("torch212-mps-aarch64-darwin", "torch212-metal-aarch64-darwin"),
        ("torch2.13-cxx11-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch2013-cxx11-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx1-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx11-cpu-x86_64-linux-extra", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx11-cpu-x86_64-linux/..", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cxx11 -cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213 cxx11 cpu x86_64 linux", "torch213-cxx11-cpu-x86_64-linux"),
        ("TORCH213-CXX11-CPU-X86_64-LINUX", "torch213-cxx11-cpu-x86_64-linux"),
        ("torch213-cpu-x86_64-linuxx", "torch213-cxx11-cpu-x86_64-linux"),  # and the ABI tag Linux needs
        ("torch212-cxx11-cpu-aarch64-darwin", "torch212-cpu-aarch64-darwin"),  # no ABI tag off Linux
    ],
)
def test_did_you_mean_suggests_the_right_correction(text: str, suggestion: str) -> None:
    with pytest.raises(EnvironmentStringError) as err:
        Environment.parse(text)
    assert str(err.value).endswith(f"did you mean '{suggestion}'?"), str(err.value)
    Environment.parse(suggestion)  # every suggestion is itself valid


def test_did_you_mean_message_has_the_documented_form() -> None:
    with pytest.raises(EnvironmentStringError) as err:
        Environment.parse("torch213-cxx11-cpu-x86_64-linuxx")
    assert str(err.value) == (
        "'torch213-cxx11-cpu-x86_64-linuxx' is not an environment string: unknown OS 'linuxx'; "
        "did you mean 'torch213-cxx11-cpu-x86_64-linux'?"
    )


@pytest.mark.parametrize(
    "text",
    ["torch213-cxx11-cuda-x86_64-linux", "gpu", "torch213-cxx11-cpu-x86_64", "torch-stable-abi210-cu128-x86_64-linux"],
)
def test_no_suggestion_when_nothing_is_close(text: str) -> None:
    with pytest.raises(EnvironmentStringError) as err:
        Environment.parse(text)
    assert "did you mean" not in str(err.value)


def test_environment_parts() -> None:
    env = Environment.parse("  torch211-cxx11-cu129-aarch64-linux ")
    assert (env.name, str(env), env.torch, env.backend, env.cpu, env.os) == (
        "torch211-cxx11-cu129-aarch64-linux",
        "torch211-cxx11-cu129-aarch64-linux",
        Version("2.11"),
        "cu129",
        "aarch64",
        "linux",
    )
    assert env.facts() == {
        "torch": Version("2.11"),
        "cuda": Version("12.9"),
        "rocm": None,
        "os": "linux",
        "arch": "aarch64",
    }
    rocm = Environment.parse("torch213-cxx11-rocm71-x86_64-linux")
    assert rocm.facts()["rocm"] == Version("7.1") and rocm.facts()["cuda"] is None
    assert sorted([env, rocm]) == [env, rocm]
    assert Environment.parse("torch212-metal-aarch64-darwin").select_variant(["torch212-metal-aarch64-darwin"])


def test_python_fact_agrees_with_the_build_configuration():
    """The `python` fact reads the free-threaded `t` from sys.abiflags (no sysconfig import): the same answer as
    the build configuration gives."""
    import sysconfig

    from kernlock.environments import facts

    threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    assert facts.detect("cpu", "linux").python == f"{sys.version_info.major}.{sys.version_info.minor}{threaded}"


def test_an_environment_is_a_frozen_value_equal_by_name():
    """Equal, hashed and ordered by name (its facts left out), frozen, and the same after pickle and copy."""
    import copy
    import pickle
    from dataclasses import FrozenInstanceError

    from kernlock.environments import facts

    a = Environment.parse("torch213-cxx11-cpu-x86_64-linux")
    b = Environment(name=a.name, extras=facts.Facts(python="3.12"))
    c = Environment.parse("torch212-cxx11-cpu-x86_64-linux")
    assert a == b and hash(a) == hash(b) and a != c and len({a, b, c}) == 2
    assert sorted([a, c]) == [c, a] and c < a <= b and a > c and b >= a
    with pytest.raises(FrozenInstanceError):
        a.name = "x"  # type: ignore[misc]
    for again in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b), copy.copy(b)):
        assert again == b and again.extras == b.extras and again.backend == "cpu"
    assert repr(b) == f"Environment(name={b.name!r}, extras={b.extras!r})"
