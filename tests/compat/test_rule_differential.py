"""kernlock's own variant rule against the INSTALLED loader's rule, whatever kernels generation is installed.

Run by the compatibility matrix in every set (kernels 0.15.2, 0.16.2, 0.17.2): >= 1,000 generated (variant set x
system) cases each. The documented differences of older loaders are applied to the inputs, not hidden in the
comparison: names an older loader cannot parse (the `tpu` backend before 0.17) are left out, as that loader skips
them; and loaders without a macOS parameter (before 0.17) do not check Metal's macOS 26 floor, which is kernlock's
rule on a macOS 26 machine. On such a machine the lock's choice and the loader's choice are the same; elsewhere
activation loads the locked variant anyway (docs/troubleshooting.md).
"""

from __future__ import annotations

import inspect
import logging
import random

import pytest
from helpers import DIFF_NOARCH, diff_pool, random_system
from kernels import backends as kernels_backends
from kernels import variants as kernels_variants
from packaging.version import Version

from kernlock import variants

CASES = 1200


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
    ours: dict[str, variants.Variant] = {name: variants.parse_variant(name) for name in theirs}
    free_threaded_seam = hasattr(kernels_variants, "_is_unsupported_free_threaded_build")

    rng = random.Random(20261130)
    cases = accepted = 0
    while cases < CASES:
        system = random_system(rng)
        try:
            backend = kernels_backends.parse_backend(system["backend"])
        except ValueError:
            continue  # a backend this loader cannot run on
        if not free_threaded_seam:
            system["free_threaded"] = False
        if not knows_macos:
            system["macos_version"] = Version("26.0")  # no macOS floor for Metal before kernels 0.17
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
        got = variants.accepted_variants([ours[n] for n in names], **system)
        assert [v.variant_str for v in got] == [v.variant_str for v in expected], (system, names)
        cases += 1
        accepted += bool(got)
    assert accepted >= CASES // 2  # the cases exercise acceptance, not only rejection
