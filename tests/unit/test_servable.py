"""What kernlock.runtime.servable tells from a name and a version alone: the names only kernels 0.19 reads (as the
variant grammar's ``legacy`` does, without importing it on the load path) and the loaders that read them."""

from __future__ import annotations

import random

import pytest
from variant_cases import DIFF_NEW_GLOBAL, diff_pool_0_19

from kernlock.runtime.servable import new_name, reads_0_19_builds
from kernlock.testing import hub_variants
from kernlock.variants.grammar import parse_variant


def test_new_form_names_are_those_the_grammar_calls_not_legacy() -> None:
    names = {
        *hub_variants(),
        *DIFF_NEW_GLOBAL,
        *(n for pool in diff_pool_0_19(random.Random(0)).values() for n in pool),
    }
    names |= {
        "torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux",
        "torch-stable-abi-2.11-cuda-12.8-cpython-3.9-abi3-x86_64-linux",
    }
    wrong = sorted(n for n in names if new_name(n) == parse_variant(n).legacy)
    assert not wrong, wrong[:10]
    assert sum(map(new_name, names)) > 100 and sum(not new_name(n) for n in names) > 100  # both kinds, many


@pytest.mark.parametrize(
    ("version", "reads"),
    [
        ("0.15.2", False),
        ("0.17.2", False),
        ("0.18.3", False),
        ("0.18.9rc1", False),
        ("0.19.0", True),
        ("0.19.1", True),
        ("0.20.0.dev0", True),
        ("1.0", True),
        (None, True),
        ("unknown", True),
    ],
)
def test_the_loaders_that_read_zip_builds_and_new_names(version: str | None, reads: bool) -> None:
    assert reads_0_19_builds(version) is reads
