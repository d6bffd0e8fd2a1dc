"""kernlock's own variant rule and load-time checks against the INSTALLED loader's, whatever kernels generation.

Run by the compatibility matrix in every set (kernels 0.15.2, 0.16.2, 0.17.2): >= 5,000 generated (variant set x
environment) cases each. Each case is compared twice: the rule alone, with every parameter the loader's rule takes
(backend, CPU, OS, torch version and ABI, tvm-ffi version, macOS version, free-threaded Python); and, where the
system is a machine an environment string can name, the whole lock-time decision of an environment declared with
optional facts (`{ name, cuda-capabilities, python, tvm-ffi, kernels, macos }`): the variant kernlock's
Environment picks, then whether the loader would refuse that build (its metadata.json's CUDA archs against the
declared capabilities, its `kernels-minver` against the declared loader), each judged by the loader's own code
(kernels.archs, kernels.validate.MinverValidator, the Rust metadata parser) where the installed loader has it.

The documented differences of other loaders are applied to the inputs, not hidden in the comparison: names an older
loader cannot parse (the `tpu` backend before 0.17) are left out, as that loader skips them; loaders without a
macOS parameter (before 0.17) do not check Metal's macOS 26 floor, which is kernlock's rule on a macOS 26 machine;
kernels 0.18 accepts ROCm builds of an older minor release (kernlock's rule, 0.17's, an exact match), so ROCm
machines are left out there; kernels 0.19's new rule is not compared at all (the module skips): a lock records the
kernels-0.17 rule's choice (its `variant-rule`) and activation loads exactly that build under 0.18 and 0.19 too.
On such a machine the lock's choice and the loader's choice are the same; elsewhere activation loads the locked
variant anyway (docs/troubleshooting.md).
"""

from __future__ import annotations

import collections
import importlib
import inspect
import json
import logging
import random

import pytest
from packaging.version import Version
from variant_cases import DIFF_NOARCH, diff_pool, random_declaration, random_metadata, random_system

from kernlock.environments.environment import Environment
from kernlock.resolve import eligibility
from kernlock.runtime import loaders
from kernlock.variants import grammar as variants
from kernlock.variants import rule as variant_rule
from kernlock.variants import types as variant_types

GENERATION = loaders.probe().generation
if GENERATION == "kernels-0.19":  # pragma: no cover - the matrix's set G
    pytest.skip(
        "kernels 0.19 chooses by a new rule (new-format names, the Python ABI, new ranks): kernlock's rule is still "
        "kernels-0.17's, so a lock records that rule's choice and activation loads exactly it (issue 42 follows 0.19)",
        allow_module_level=True,
    )
kernels_backends = importlib.import_module("kernels.backends")
kernels_variants = importlib.import_module("kernels.variants")

CASES = 5000

try:  # the loader's post-choice checks, where this generation has them (kernels 0.17)
    from kernels import validate as kernels_validate
    from kernels._rust import Metadata
    from kernels.archs import _supports_cuda_capability
except ImportError:  # pragma: no cover - older generations
    kernels_validate = None


def _loader_refuses(metadata: dict, name: str, table: dict, monkeypatch: pytest.MonkeyPatch) -> bool | None:
    """Whether the installed loader refuses build ``name`` on the declared machine (None: it has no such checks)."""
    if kernels_validate is None:
        return None
    parsed = Metadata.from_bytes(json.dumps(metadata).encode())
    archs = parsed.backend.archs
    if archs and str(parsed.backend.backend_type).lower() == "cuda":
        for capability in table.get("cuda-capabilities", []):
            major, minor = capability.split(".")
            if not _supports_cuda_capability(archs, (int(major), int(minor))):
                return True  # ArchValidator raises on a device of this capability
    if "kernels" in table:
        release = ".".join(map(str, Version(table["kernels"]).release))
        monkeypatch.setattr(kernels_validate, "_installed_version", lambda: kernels_validate.Version.from_str(release))
        try:
            kernels_validate.MinverValidator().validate_metadata(metadata=parsed, variant=name)
        except RuntimeError:
            return True
    return False


@pytest.mark.slow
def test_kernlock_rule_equals_the_installed_loaders_rule(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="kernels.variants")
    rule = kernels_variants._resolve_variant_for_system
    knows_macos = "macos_version" in inspect.signature(rule).parameters
    pool = diff_pool()
    every = sorted({name for names in pool.values() for name in names} | set(DIFF_NOARCH))
    theirs = {}
    for name in every:
        try:
            theirs[name] = kernels_variants.parse_variant(name)
        except ValueError:  # a backend this loader does not know: it skips such folders
            continue
    ours: dict[str, variant_types.Variant] = {name: variants.parse_variant(name) for name in theirs}
    free_threaded_seam = hasattr(kernels_variants, "_is_unsupported_free_threaded_build")

    rng = random.Random(20261130)
    seen: collections.Counter[str] = collections.Counter()
    cases = 0
    while cases < CASES:
        system = random_system(rng)
        try:
            backend = kernels_backends.parse_backend(system["backend"])
        except ValueError:
            continue  # a backend this loader cannot run on
        if GENERATION == "kernels-0.18" and system["backend"].startswith("rocm"):
            continue  # kernels 0.18 loads ROCm builds of an older minor too; kernlock's rule is 0.17's exact match
        table = random_declaration(rng, system) if rng.random() < 0.8 else None
        if not free_threaded_seam:
            system["free_threaded"] = False
            if table:
                table.pop("python", None)
        if not knows_macos:
            system["macos_version"] = Version("26.0")  # no macOS floor for Metal before kernels 0.17
            if table:
                table.pop("macos", None)
        platform = [n for n in pool[(system["cpu"], system["os"])] if n in theirs]
        family = variants.parse_backend(system["backend"]).name
        versions = (system["torch_version"], system["tvm_ffi_version"])
        near = [n for n in platform if ours[n].framework.version in versions and ours[n].backend.name == family]
        names = rng.sample(platform, min(len(platform), rng.randint(0, 20)))
        names += rng.sample(near, rng.randint(0, min(12, len(near))))
        names += rng.sample(sorted(theirs), rng.randint(0, 6))
        names = sorted(set(names))  # a repo's folders are distinct; sorted, as kernlock takes them
        if free_threaded_seam:
            monkeypatch.setattr(
                kernels_variants, "_is_unsupported_free_threaded_build", lambda s=system: s["free_threaded"]
            )
        kwargs = {
            "variants": [theirs[n] for n in names],
            "selected_backend": backend,
            "cpu": system["cpu"],
            "os": system["os"],
            "torch_version": system["torch_version"],
            "torch_cxx11_abi": system["torch_cxx11_abi"],
            "tvm_ffi_version": system["tvm_ffi_version"],
        }
        if knows_macos:
            kwargs["macos_version"] = system["macos_version"]
        expected, _trace = rule(**kwargs)
        expected_names = [v.variant_str for v in expected]
        got = variant_rule.accepted_variants([ours[n] for n in names], **system)
        assert [v.variant_str for v in got] == expected_names, (system, names)
        cases += 1
        seen["accepted"] += bool(got)
        if table is None or (not knows_macos and system["backend"] == "metal" and system["os"] != "darwin"):
            continue  # see test_named_metal_off_macos_case
        env = Environment.from_declared(table)
        assert env.accepted_variants(names) == expected_names, (table, names)
        seen["declared"] += 1
        seen["free-threaded"] += env.extras.free_threaded
        seen["tvm-ffi chosen"] += bool(expected_names) and expected_names[0].startswith("tvm-ffi")
        if not expected_names:
            continue
        metadata = random_metadata(rng, ours[expected_names[0]])
        theirs_refuse = _loader_refuses(metadata, expected_names[0], table, monkeypatch)
        if theirs_refuse is None:
            continue
        mine = eligibility.refusal(env, expected_names[0], metadata, "metadata.json")
        assert (mine is not None) == theirs_refuse, (table, expected_names[0], metadata, mine)
        if mine:
            seen["capability refused" if "capability" in mine else "minver refused"] += 1
        else:
            seen["checked and loadable"] += 1
    assert seen["accepted"] >= CASES // 2  # the cases exercise acceptance, not only rejection
    assert seen["declared"] >= CASES // 2 and seen["free-threaded"] >= 100 and seen["tvm-ffi chosen"] >= 20, seen
    if kernels_validate is not None:
        assert min(seen["capability refused"], seen["minver refused"], seen["checked and loadable"]) >= 100, seen


def test_named_metal_off_macos_case() -> None:
    """Found by the differential test under kernels 0.15.2: a Metal environment off macOS (a machine that does not
    exist) loads no Metal build in kernlock, as in kernels 0.17 (no macOS version, no Metal); loaders before 0.17
    have no macOS floor and would take it. The generated cases leave this machine out for those loaders."""
    env = Environment.from_declared({"name": "torch210-cxx98-metal-aarch64-linux", "tvm-ffi": "0.1.1"})
    names = ["torch210-metal-aarch64-linux", "torch-stable-abi210-metal-aarch64-linux", "torch-metal"]
    assert env.accepted_variants(names) == ["torch-metal"]
    rule = kernels_variants._resolve_variant_for_system
    if "macos_version" in inspect.signature(rule).parameters:
        theirs, _ = rule(
            variants=[kernels_variants.parse_variant(n) for n in sorted(names)],
            selected_backend=kernels_backends.parse_backend("metal"),
            cpu="aarch64",
            os="linux",
            torch_version=Version("2.10"),
            torch_cxx11_abi=False,
            tvm_ffi_version=Version("0.1"),
            macos_version=None,
        )
        assert [v.variant_str for v in theirs] == ["torch-metal"]


@pytest.mark.parametrize(
    ("archs", "capability", "loads"),
    [
        (["9.0a"], (9, 0), True),  # architecture-specific: exactly that GPU
        (["9.0a"], (10, 0), False),
        (["10.0f"], (10, 3), True),  # family-specific: same major, newer minor
        (["10.0f"], (12, 0), False),
        (["8.0+PTX"], (12, 0), True),  # PTX: any newer GPU
        (["9.0a+PTX"], (10, 0), False),  # the suffix wins over +PTX
        (["8.0", "8.6"], (9, 0), False),  # base builds: same major only
        (["sm_90", "gfx942"], (9, 0), True),  # nothing readable: cannot be judged, the loader lets it load
        (["8.0", "sm_90"], (9, 0), False),  # one readable arch decides
    ],
)
def test_named_capability_cases(archs: list[str], capability: tuple[int, int], loads: bool) -> None:
    """Regression cases of the capability rule (each a form the differential test draws), against the loader."""
    assert eligibility.supports_capability(archs, capability) is loads
    if kernels_validate is not None:
        assert _supports_cuda_capability(archs, capability) is loads
