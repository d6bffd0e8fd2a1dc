"""kernlock's own variant rules and load-time checks against the INSTALLED loader's, whatever kernels generation.

Run by the compatibility matrix in every set (kernels 0.15.2, 0.16.2, 0.17.2, 0.18.3, 0.19.1): >= 5,000 generated
(variant set x system) cases each, over legacy names and kernels 0.19's (dotted versions, named backends, the Python
ABI, SDK and MLX builds, ``rocm714``). Each case is compared twice: the rule of the installed release
(:func:`kernlock.variants.rule.rule_for_kernels`) alone, with every parameter the loader's rule takes (backend, CPU,
OS, torch version and ABI, tvm-ffi version, macOS version, free-threaded Python; from 0.19 the Python version and
whether mlx is installed); and, where the system is a machine an environment string can name, the whole lock-time
decision of an environment declared with optional facts (`{ name, cuda-capabilities, python, tvm-ffi, kernels,
macos, mlx }`, its `kernels` a release of the installed generation, or none under 0.19, whose rule is the default):
the variant kernlock's Environment picks, then whether the loader would refuse that build (its metadata.json's CUDA
archs against the declared capabilities, its `kernels-minver` against the declared loader), each judged by the
loader's own code (archs, validate.MinverValidator, the Rust metadata parser) where the installed loader has it.
Under 0.19, an environment that declares no Python is checked on every Python torch runs on: kernlock's choice is
the loader's on each, or kernlock refuses to choose (and then the loader's choices really differ).

The documented differences of other loaders are applied to the inputs, not hidden in the comparison: names a loader
cannot parse (the `tpu` backend before 0.17, kernels 0.19's forms before 0.19) are left out, as that loader skips
them; loaders without a macOS parameter (before 0.17) do not check Metal's macOS 26 floor, which is kernlock's rule
on a macOS 26 machine.
"""

from __future__ import annotations

import collections
import importlib
import importlib.metadata
import inspect
import json
import logging
import random

import pytest
from packaging.version import Version
from variant_cases import (
    DIFF_NEW_GLOBAL,
    DIFF_NOARCH,
    DIFF_PYTHONS_0_19,
    catalog_names,
    diff_pool_0_19,
    random_declaration,
    random_metadata,
    random_system,
)

from kernlock.environments.environment import PYTHONS, Environment
from kernlock.errors import ResolutionError
from kernlock.resolve import eligibility
from kernlock.variants import grammar as variants
from kernlock.variants import rule as variant_rule
from kernlock.variants import types as variant_types

INSTALLED = Version(importlib.metadata.version("kernels"))
RULE = variant_rule.rule_for_kernels(INSTALLED)
NEW = RULE == "kernels-0.19"
_PACKAGE = "kernels._internals" if NEW else "kernels"  # 0.19 moved every module under kernels._internals
kernels_backends = importlib.import_module(f"{_PACKAGE}.backends")
kernels_variants = importlib.import_module(f"{_PACKAGE}.variants")

CASES = 5000

try:  # the loader's post-choice checks, where this generation has them (kernels 0.17+)
    kernels_validate = importlib.import_module(f"{_PACKAGE}.validate")
    Metadata = importlib.import_module("kernels._rust").Metadata
    _supports_cuda_capability = importlib.import_module(f"{_PACKAGE}.archs")._supports_cuda_capability
except (ImportError, AttributeError):  # pragma: no cover - older generations
    kernels_validate = None


def _their_backend(text: str):
    """The installed loader's backend for a legacy backend token (0.19 takes the parts of a name)."""
    return kernels_backends.parse_backend([text]) if NEW else kernels_backends.parse_backend(text)


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
    caplog.set_level(logging.ERROR, logger=kernels_variants.__name__)
    rule = kernels_variants._resolve_variant_for_system
    knows_macos = "macos_version" in inspect.signature(rule).parameters
    rng = random.Random(20261130)
    pool = diff_pool_0_19(random.Random(20261204))
    every = sorted(
        {name for names in pool.values() for name in names} | {*DIFF_NOARCH, *DIFF_NEW_GLOBAL, *catalog_names()}
    )
    theirs = {}
    for name in every:
        try:
            theirs[name] = kernels_variants.parse_variant(name)
        except ValueError:  # a name this loader cannot read: it skips such folders
            continue
    ours: dict[str, variant_types.Variant] = {name: variants.parse_variant(name) for name in theirs}
    free_threaded_seam = hasattr(kernels_variants, "_is_unsupported_free_threaded_build")

    seen: collections.Counter[str] = collections.Counter()
    cases = 0
    while cases < CASES:
        system = random_system(rng)
        try:
            backend = _their_backend(system["backend"])
        except ValueError:
            continue  # a backend this loader cannot run on
        if NEW:
            system["python_version"] = Version(rng.choice(DIFF_PYTHONS_0_19))
            system["free_threaded"] = rng.random() < 0.1
            system["has_mlx"] = rng.random() < 0.3
        table = random_declaration(rng, system, RULE) if rng.random() < 0.8 else None
        if not free_threaded_seam and not NEW:
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
        near = [
            n
            for n in platform
            if getattr(getattr(ours[n], "framework", None), "version", None) in versions
            and getattr(getattr(ours[n], "backend", None), "name", None) == family
        ]
        names = rng.sample(platform, min(len(platform), rng.randint(0, 20)))
        names += rng.sample(near, rng.randint(0, min(12, len(near))))
        names += rng.sample(sorted(theirs), rng.randint(0, 6))
        names = sorted(set(names))  # a repo's folders are distinct; sorted, as kernlock takes them
        expected_names = _loader_accepts(rule, names, theirs, backend, system, knows_macos, monkeypatch)
        got = variant_rule.accepted_variants([ours[n] for n in names], rule=RULE, **system)
        assert [v.variant_str for v in got] == expected_names, (system, names)
        cases += 1
        seen["accepted"] += bool(got)
        seen["new form chosen"] += bool(got) and not got[0].legacy
        if table is None or (not knows_macos and system["backend"] == "metal" and system["os"] != "darwin"):
            continue  # see test_named_metal_off_macos_case
        env = Environment.from_declared(table)
        if NEW and "python" not in table:
            expected_names = _every_python(env, names, rule, theirs, backend, system, knows_macos, monkeypatch, seen)
            if expected_names is None:
                continue
        else:
            assert env.accepted_variants(names) == expected_names, (table, names)
        seen["declared"] += 1
        seen["free-threaded"] += system["free_threaded"]
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
    print(f"{INSTALLED} ({RULE}): {cases} cases, {len(theirs)} names it reads of {len(every)}:", dict(seen))
    assert set(catalog_names()) <= set(theirs)  # every catalog and real-Hub name is one the loader reads
    assert seen["accepted"] >= CASES // 2  # the cases exercise acceptance, not only rejection
    assert seen["declared"] >= CASES // 2 and seen["free-threaded"] >= 100 and seen["tvm-ffi chosen"] >= 20, seen
    if NEW:
        assert seen["new form chosen"] >= 200 and seen["ambiguous Python"] >= 20 and seen["any Python"] >= 500, seen
    if kernels_validate is not None:
        assert min(seen["capability refused"], seen["minver refused"], seen["checked and loadable"]) >= 100, seen


def _loader_accepts(rule, names, theirs, backend, system, knows_macos, monkeypatch) -> list[str]:
    """The installed loader's ordered choice among ``names`` on ``system``."""
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
    if NEW:
        kwargs.update(
            python_version=system["python_version"], free_threaded=system["free_threaded"], has_mlx=system["has_mlx"]
        )
    elif hasattr(kernels_variants, "_is_unsupported_free_threaded_build"):
        monkeypatch.setattr(kernels_variants, "_is_unsupported_free_threaded_build", lambda: system["free_threaded"])
    expected, _trace = rule(**kwargs)
    return [v.variant_str for v in expected]


def _every_python(env, names, rule, theirs, backend, system, knows_macos, monkeypatch, seen) -> list[str] | None:
    """kernels 0.19, an environment without a declared Python: kernlock's first choice is the loader's on every
    Python in PYTHONS, or kernlock refuses and the loader's first choices really differ. The loader's list on the
    Python drawn (one of PYTHONS), or None when kernlock refused."""
    firsts = {}
    for python in PYTHONS:
        on = {**system, "python_version": Version(python), "free_threaded": False}
        found = _loader_accepts(rule, names, theirs, backend, on, knows_macos, monkeypatch)
        firsts[python] = found[0] if found else None
    try:
        mine = env.select_variant(names)
    except ResolutionError as err:
        assert len(set(firsts.values())) > 1, (env, names, firsts)
        assert "does not declare its Python" in str(err) and "python = " in str(err)
        seen["ambiguous Python"] += 1
        return None
    assert set(firsts.values()) == {mine}, (env, names, firsts)
    seen["any Python"] += 1
    system.update(python_version=Version(PYTHONS[-1]), free_threaded=False)
    return _loader_accepts(rule, names, theirs, backend, system, knows_macos, monkeypatch)


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
            selected_backend=_their_backend("metal"),
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
