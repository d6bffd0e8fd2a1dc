"""Hypothesis strategies for kernels.lock: valid locks and their building blocks (environments, variant names,
repos, refs, file paths, sizes and hashes), shared by tests/unit/test_fuzz.py and tests/functional/test_lock_io.py."""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

from kernlock.environments.environment import Environment
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant, environment_facts
from kernlock.util import names
from kernlock.variants import grammar as variants

# -- building blocks ---------------------------------------------------------------------------------------------

ENVS = (
    "torch213-cxx11-cpu-x86_64-linux",
    "torch213-cxx11-cu130-x86_64-linux",
    "torch212-cxx11-cu128-x86_64-linux",
    "torch212-cxx11-cu129-aarch64-linux",
    "torch211-cxx11-cu126-x86_64-linux",
    "torch29-cxx11-rocm63-x86_64-linux",
    "torch210-cxx11-xpu20253-x86_64-linux",
    "torch210-cxx11-cann81-aarch64-linux",
    "torch213-cxx98-cpu-x86_64-linux",
    "torch212-cpu-aarch64-darwin",
    "torch212-metal-aarch64-darwin",
    "torch213-cu128-x86_64-windows",
)
VARIANT_NAMES = tuple(
    sorted(
        {
            *ENVS,
            "torch213-cpu-x86_64-linux",
            "torch212-cu128-x86_64-linux",
            "torch212-cxx11-cu126-x86_64-linux",
            "torch-stable-abi210-cu126-x86_64-linux",
            "torch-stable-abi29-cpu-x86_64-linux",
            "torch-stable-abi212-metal-aarch64-darwin",
            "tvm-ffi01-cpu-x86_64-linux",
            *(f"torch-{backend}" for backend in variants.NOARCH_BACKENDS),
        }
    )
)
#: Valid repo ids, edge cases included (a case twin of the first, one-letter parts, 96-letter parts).
REPOS = (
    "kernels-community/activation",
    "Kernels-Community/Activation",
    "kernels-community/flash-attn3",
    "a/b",
    "0/9",
    "x_/y_",
    "my.org/kernel.v2",
    "A-b.C_d/e-F.g_H",
    "o" + "x" * 94 + "_/n",
)
REFS = ("v1", "v2", "main", "release/1.0", "feature/x_y-z", "v1.2+cu128", "0", "_x")
#: Valid path parts that are awkward for TOML, shells or file systems.
PATH_PARTS = (
    "__init__.py",
    "_ops.py",
    "layers",
    "torch_ext",
    "_activation_0e1f2a.abi3.so",
    "ünïcode.py",
    "日本語",
    "カーネル.so",
    "emoji🚀.py",
    "a b.py",
    'quote".py',
    "apos'.py",
    "back`tick",
    "...",
    ".hidden",
    "-dash",
    "nel\x85.py",
    "line\u2028sep",
    "bom\ufeff.py",
    "rtl\u202e.py",
    "x" * 255,
    "CON",
    "a:b",
    "*?<>|",
    "#hash",
    "[x]",
    "=eq",
    "{brace}",
    "environments = ",
    "content-hash = x",
)

hex40 = st.integers(0, 16**40 - 1).map(lambda n: f"{n:040x}")
hex64 = st.integers(0, 16**64 - 1).map(lambda n: f"{n:064x}")
path_part = st.one_of(
    st.sampled_from(PATH_PARTS),
    st.text(st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="/\\"), min_size=1, max_size=10).filter(
        lambda part: part not in (".", "..", names.PYCACHE)
    ),
)
file_path = st.lists(path_part, min_size=1, max_size=3).map("/".join)
file_size = st.one_of(st.sampled_from((0, 1, 2**31 - 1, 2**32, names.MAX_FILE_SIZE)), st.integers(0, 2**40))
file_hash = st.one_of(hex64.map("sha256:{}".format), hex40.map("git-sha1:{}".format))


@functools.lru_cache(maxsize=4096)
def ints(low: int, high: int) -> st.SearchStrategy[int]:
    """A cached strategy: building strategies inside a composite costs more than drawing from them."""
    return st.integers(low, high)


def pick(draw: st.DrawFn, values: tuple[str, ...] | list[str]) -> str:
    """One of ``values``, the first ones more often (hypothesis favours small numbers)."""
    return values[draw(ints(0, len(values) - 1))]


def draw_index(draw: st.DrawFn, size: int) -> int:
    """A position from 0 to ``size`` - 1, spread over the whole range: hypothesis draws 0 and other small numbers
    often, which would put most edits at the top of a document, so the number drawn is scrambled (an odd multiplier
    and an offset permute 0..2**16-1) before it is scaled."""
    return ((draw(ints(0, 2**16 - 1)) * 40503 + 21845) % 2**16) * size >> 16


@st.composite
def mostly(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], one_in: int) -> Any:
    """``bad`` one time in ``one_in``, else ``good`` (st.one_of would flatten ``junk`` and favour it 8 to 1)."""
    return draw(bad) if draw(ints(1, one_in)) == one_in else draw(good)


@st.composite
def _file_sets(draw: st.DrawFn, paths: st.SearchStrategy[list[str]]) -> tuple[LockedFile, ...]:
    """1-3 files with distinct paths (also in another letter case) and no file where another needs a folder."""
    kept: list[LockedFile] = []
    for path in draw(paths):
        key = path.casefold()
        clash = any(
            k == key or k.startswith(key + "/") or key.startswith(k + "/") for k in (f.path.casefold() for f in kept)
        )
        if not clash:
            kept.append(LockedFile(path=path, size=draw(file_size), hash=draw(file_hash)))
    return tuple(kept)


file_sets = _file_sets(st.lists(file_path, min_size=1, max_size=3))
#: Cheaper: paths of pool parts only (the mutations bring the rest).
pool_file_sets = _file_sets(
    st.lists(st.lists(st.sampled_from(PATH_PARTS), min_size=1, max_size=3).map("/".join), min_size=1, max_size=3)
)


@functools.cache
def _loadable(env: str) -> tuple[str, ...]:
    """The names of VARIANT_NAMES that environment ``env`` loads."""
    return tuple(Environment.parse(env).accepted_variants(VARIANT_NAMES))


@functools.cache
def _select(env: str, candidates: frozenset[str]) -> str | None:
    return Environment.parse(env).select_variant(candidates)


env_lists = st.lists(st.sampled_from(ENVS), unique=True, min_size=1, max_size=4)
repo_lists = st.lists(st.sampled_from(REPOS), min_size=1, max_size=3)
other_repos = st.lists(st.sampled_from(REPOS), unique=True, max_size=2)
extra_candidates = st.lists(st.sampled_from(VARIANT_NAMES), max_size=2)


@st.composite
def valid_locks(draw: st.DrawFn, files: st.SearchStrategy[tuple[LockedFile, ...]] = file_sets) -> Lock:
    """A consistent Lock: each environment of an entry gets the variant the loader picks among candidate names
    (one name per environment that it loads, plus 0-2 names drawn from all)."""
    lock_envs = draw(env_lists)
    kernels = []
    claimed: dict[str, set[str]] = {}  # entries of one repo (any letter case) cover disjoint environments
    for repo in draw(repo_lists):
        free = [env for env in lock_envs if env not in claimed.get(repo.casefold(), set())]
        if not free:
            continue
        mask = draw(ints(1, 2 ** len(free) - 1))
        envs = [env for i, env in enumerate(free) if mask >> i & 1]
        claimed.setdefault(repo.casefold(), set()).update(envs)
        candidates = {pick(draw, _loadable(env)) for env in envs}.union(draw(extra_candidates))
        by_variant: dict[str, list[str]] = {}
        for env in envs:
            by_variant.setdefault(_select(env, frozenset(candidates)), []).append(env)
        commit = draw(hex40)
        refs = (*REFS, commit)
        kernels.append(
            LockedKernel(
                repo=repo,
                requested=pick(draw, refs),
                ref=pick(draw, refs),
                commit=commit,
                environments=tuple(envs),
                variants=tuple(
                    LockedVariant(name=name, environments=tuple(es), files=draw(files))
                    for name, es in by_variant.items()
                ),
                required_by=tuple(r for r in draw(other_repos) if r != repo),
            )
        )
    declared = [_with_facts(draw, env) for env in lock_envs if draw(ints(1, 3)) == 3]
    return Lock(
        requires_hash=f"sha256:{draw(hex64)}",
        environments=tuple(lock_envs),
        kernels=tuple(kernels),
        facts=environment_facts(declared),
    )


def _with_facts(draw: st.DrawFn, env: str) -> Environment:
    """``env`` with optional facts that do not change which variant it loads (so the lock stays consistent)."""
    table: dict[str, Any] = {"name": env}
    if "-cu" in env and draw(ints(0, 1)):
        table["cuda-capabilities"] = draw(st.sampled_from([["9.0"], ["8.0", "10.0"], ["12.0"]]))
    if draw(ints(0, 1)):
        table["python"] = pick(draw, ("3.12", "3.13", "3.11"))  # legacy names: the same build on each
    if draw(ints(0, 1)) or len(table) == 1:
        table["kernels"] = pick(draw, ("0.19.1", "0.19.0rc1", "0.20.0"))  # the newest rule, as undeclared
    if env.endswith("darwin") and draw(ints(0, 1)):
        table["macos"] = "26.1"
    return Environment.from_declared(table)
