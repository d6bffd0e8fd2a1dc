"""Realistic Hub kernel repositories with real git history, for tests, demos and benchmarks.

Every repository is a non-bare git repository at ``ROOT/kernels/{org}/{name}``: ``main`` carries the README
(and the ``.gitattributes`` that marks ``*.so`` as LFS, as on the Hub), version branches ``v0..vN`` carry build
variants under ``build/<variant>/``. Commits are written in one ``git fast-import`` stream per operation, with a
fixed identity and fixed dates, so the same catalog gives the same commit shas in any directory. ``.so`` files are
committed as git-lfs pointers; their content lives in ``.git/lfs/objects/<oid[0:2]>/<oid[2:4]>/<oid>``.
Publisher trust lives in ``ROOT/organizations.json`` (``{"org": {"trustedKernelPublisher": bool}}``).

Each build exports ``KERNEL_IDENTITY = {"repo", "version", "branch", "variant", "build_id"}`` at module top level
and counts calls of its public functions in ``CALL_COUNTS``; ``build_id`` is new for every upload (a branch move
re-uploads), so a test can prove which build was loaded. The metadata ``id`` (the ``sys.modules`` key that
kernels uses) is ``_<python_name>_<backend>_<build_id>``.

Builds with backend ``cpu`` (any torch version) and noarch builds (``torch-cpu``, ``torch-universal``, ...) carry
working pure-Python code; other arch builds import ``torch.ops`` from their (random-bytes) ``.so`` and fail to
import, like a CUDA build would on this machine.

**transformers and flash-attn2.** transformers 5.22.2 loads ``attn_implementation="kernels-community/flash-attn2"``
with ``version=FLASH_ATTN_KERNEL_VERSIONS[...]``, which is ``4`` on torch >= 2.10 (``3`` below). So in the catalog
``v4`` (the transformers default here) has a CPU build (``torch213-cxx11-cpu-x86_64-linux``) and plain transformers
works without kernlock, while the newest version ``v5`` has no CPU build at all: "newest" and "what transformers
asks for" differ, and "newest" does not load on this machine. ``v2`` and ``v3`` also load here; ``v1`` does not.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CPU_VARIANT",
    "EXTRA_KINDS",
    "GIT_AUTHOR",
    "HUB_MATRIX",
    "KINDS",
    "TRANSFORMERS_FLASH_ATTN2_VERSION",
    "Catalog",
    "KernelRepo",
    "add_tag",
    "build_benchmark_catalog",
    "build_catalog",
    "can_sign",
    "catalog_matrix",
    "create_kernel_repo",
    "cuda_archs",
    "export_revision",
    "hub_variants",
    "is_noarch",
    "is_python_build",
    "kernel_repo_path",
    "move_branch",
    "open_kernel_repo",
    "read_identity",
    "read_organizations",
    "set_org_trust",
    "sign_metadata",
    "standard_variants",
    "variant_backend",
    "without_cpu",
    "write_trusted_root",
]

#: The arch variant that ``kernels`` picks on this machine (torch 2.13 CPU build, x86_64 Linux).
CPU_VARIANT = "torch213-cxx11-cpu-x86_64-linux"
#: ``FLASH_ATTN_KERNEL_VERSIONS["kernels-community/flash-attn2"]`` in transformers 5.22.2 on torch >= 2.10.
TRANSFORMERS_FLASH_ATTN2_VERSION = 4
#: Source templates: ``attention`` (flash_attn_func/varlen), ``activation`` (+ ``layers``), ``layernorm``
#: (+ ``layers``), ``rotary``.
KINDS = ("attention", "activation", "layernorm", "rotary")
#: Fixed identity of every commit and tag.
GIT_AUTHOR = ("kernel-builder", "kernel-builder@users.noreply.huggingface.co")

_EPOCH = 1735689600  # 2025-01-01T00:00:00Z; commit n of a repository is dated _EPOCH + n hours.
_STATE_FILE = "kernlock-fixture.json"  # inside .git/, invisible to the server
_LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
_NAME_RE = re.compile(r"[a-z][-a-z0-9]*[a-z0-9]")
_GITATTRIBUTES = "*.so filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"

# ----------------------------------------------------------------------------------------------------------------
# Build variants
# ----------------------------------------------------------------------------------------------------------------

#: The real Hub's build matrix, in one table (docs/fixtures.md; the facts come from kernel-builder's
#: build-variants.json, the kernels test suite's variant lists and kernels-community's build.toml files):
#: per torch release the CUDA, ROCm and XPU backends kernel-builder builds (2.12/2.13 today; 2.10/2.11 still on
#: older repos), then every other name form real repositories publish, and the CUDA archs their metadata.json
#: declares per CUDA release. ``standard_variants`` and ``hub_variants`` read it.
HUB_MATRIX: dict[str, Any] = {
    "torch": {
        "2.7": {"cuda": ("cu118", "cu126", "cu128"), "rocm": ("rocm62", "rocm63"), "xpu": ("xpu20250",)},
        "2.8": {"cuda": ("cu126", "cu128", "cu129"), "rocm": ("rocm63", "rocm64"), "xpu": ("xpu20251",)},
        "2.9": {"cuda": ("cu126", "cu128", "cu130"), "rocm": ("rocm63", "rocm64"), "xpu": ("xpu20252",)},
        "2.10": {"cuda": ("cu126", "cu128", "cu130"), "rocm": ("rocm70", "rocm71"), "xpu": ("xpu20253",)},
        "2.11": {"cuda": ("cu126", "cu128", "cu130"), "rocm": ("rocm71", "rocm72"), "xpu": ("xpu20253",)},
        "2.12": {"cuda": ("cu126", "cu130", "cu132"), "rocm": ("rocm71", "rocm72"), "xpu": ("xpu20253",)},
        "2.13": {"cuda": ("cu126", "cu130", "cu132"), "rocm": ("rocm71", "rocm72"), "xpu": ("xpu20260",)},
    },
    # kernel-builder's local output has no ABI tag; the loader prefers these names over -cxx11 ones.
    "tagless": (
        "torch210-cu128-x86_64-linux",
        "torch211-cu126-x86_64-linux",
        "torch212-cpu-x86_64-linux",
        "torch213-cu130-x86_64-linux",
    ),
    "stable-abi": (
        "torch-stable-abi29-cu130-x86_64-linux",
        "torch-stable-abi210-cu126-x86_64-linux",
        "torch-stable-abi210-cu126-aarch64-linux",
        "torch-stable-abi210-rocm71-x86_64-linux",
        "torch-stable-abi210-cpu-x86_64-linux",
        "torch-stable-abi210-xpu20253-x86_64-linux",
        "torch-stable-abi210-cpu-aarch64-darwin",
        "torch-stable-abi210-metal-aarch64-darwin",
    ),
    "tvm-ffi": ("tvm-ffi01-cu128-x86_64-linux", "tvm-ffi01-cpu-x86_64-linux", "tvm-ffi01-cpu-aarch64-darwin"),
    "darwin": (
        "torch212-cpu-aarch64-darwin",
        "torch213-cpu-aarch64-darwin",
        "torch212-metal-aarch64-darwin",
        "torch213-metal-aarch64-darwin",
    ),
    "windows": ("torch210-cu128-x86_64-windows", "torch213-cu130-x86_64-windows", "torch213-cu130-aarch64-windows"),
    "noarch": tuple(f"torch-{b}" for b in ("cpu", "cuda", "metal", "rocm", "xpu", "npu", "neuron", "tpu", "universal")),
    # metadata.json `backend.archs` of CUDA builds, by the CUDA release they were built with (newest first).
    "cuda-archs": (
        ("13.0", ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "11.0", "12.0+PTX")),
        ("12.8", ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0+PTX")),
        ("0.0", ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX")),
    ),
    "rocm-archs": ("gfx90a", "gfx942", "gfx950"),
}


def hub_variants() -> list[str]:
    """Every build variant name of :data:`HUB_MATRIX`: kernel-builder's matrix for torch 2.10-2.13 (Linux CPU
    and CUDA x86_64/aarch64, ROCm, XPU) and every other form; sorted, distinct."""
    names = set(standard_variants(("2.10", "2.11", "2.12", "2.13"), metal=False, windows=False))
    for form in ("tagless", "stable-abi", "tvm-ffi", "darwin", "windows", "noarch"):
        names.update(HUB_MATRIX[form])
    return sorted(names)


def cuda_archs(variant: str) -> list[str]:
    """The CUDA archs a CUDA build's metadata.json declares (by the CUDA release of its name)."""
    match = re.search(r"-cu([0-9]+)([0-9])-", variant)
    release = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    for floor, archs in HUB_MATRIX["cuda-archs"]:
        if release >= tuple(int(p) for p in floor.split(".")):
            return list(archs)
    raise AssertionError("the last row of cuda-archs is the floor")


def _torch_tag(torch_version: str) -> str:
    major, minor = torch_version.split(".")[:2]
    return f"torch{major}{minor}"


def standard_variants(
    torch_versions: Sequence[str] = ("2.12", "2.13"),
    *,
    cpu: bool = True,
    cuda: bool = True,
    rocm: bool = True,
    xpu: bool = True,
    metal: bool = True,
    aarch64: bool = True,
    windows: bool = True,
) -> list[str]:
    """The variant matrix kernel-builder produces: 13 platforms per torch version (26 for two versions).

    Per torch version: 3 CUDA x86_64, 3 CUDA aarch64, 2 ROCm, 1 XPU, CPU x86_64 + aarch64, Metal, CUDA Windows.
    """
    out: list[str] = []
    for tv in torch_versions:
        t = _torch_tag(tv)
        row = HUB_MATRIX["torch"].get(tv, HUB_MATRIX["torch"]["2.13"])
        cudas = row["cuda"]
        if cuda:
            out += [f"{t}-cxx11-{cu}-x86_64-linux" for cu in cudas]
            if aarch64:
                out += [f"{t}-cxx11-{cu}-aarch64-linux" for cu in cudas]
        if rocm:
            out += [f"{t}-cxx11-{r}-x86_64-linux" for r in row["rocm"]]
        if xpu:
            out += [f"{t}-cxx11-{x}-x86_64-linux" for x in row["xpu"]]
        if cpu:
            out.append(f"{t}-cxx11-cpu-x86_64-linux")
            if aarch64:
                out.append(f"{t}-cxx11-cpu-aarch64-linux")
        if metal:
            out.append(f"{t}-metal-aarch64-darwin")
        if windows and cuda:
            out.append(f"{t}-{cudas[-1]}-x86_64-windows")
    return out


def variant_backend(variant: str) -> str:
    """Backend type written to ``metadata.json`` for a variant (``cuda``, ``rocm``, ``xpu``, ``metal``, ``cpu``...)."""
    parts = variant.split("-")
    if parts[0] == "torch" and not variant.startswith("torch-stable-abi"):
        name = "-".join(parts[1:])
        # torch-universal has no backend of its own; Triton universal kernels targeted CUDA first.
        return {"universal": "cuda", "npu": "cann"}.get(name, name)
    for part in parts:
        for prefix, backend in (("cu", "cuda"), ("rocm", "rocm"), ("xpu", "xpu"), ("cann", "cann")):
            if part.startswith(prefix) and part[len(prefix) :].isdigit():
                return backend
        if part in ("cpu", "metal", "neuron", "tpu"):
            return part
    raise ValueError(f"cannot tell the backend of variant {variant!r}")


def is_noarch(variant: str) -> bool:
    """True for ``torch-<backend>`` and ``torch-universal`` variants."""
    return variant.startswith("torch-") and not variant.startswith("torch-stable-abi")


def is_python_build(variant: str) -> bool:
    """True when the build carries working pure-Python code (CPU arch builds and all noarch builds)."""
    return is_noarch(variant) or variant_backend(variant) == "cpu"


def without_cpu(variants: Iterable[str]) -> list[str]:
    """Drop every variant that could load on a CPU-only machine (CPU arch builds, ``torch-cpu``, universal)."""
    return [
        v
        for v in variants
        if not (v in ("torch-cpu", "torch-universal") or (not is_noarch(v) and variant_backend(v) == "cpu"))
    ]


# ----------------------------------------------------------------------------------------------------------------
# Source templates (``@@KEY@@`` placeholders)
# ----------------------------------------------------------------------------------------------------------------

_INIT_HEAD = '''"""@@NAME@@ (@@VARIANT@@): kernel build generated by kernlock.testing.fixtures."""

KERNEL_IDENTITY = @@IDENTITY@@

# Calls of the public functions of this build, by name (lets a test prove that this build ran).
CALL_COUNTS: dict = {}


def _count(name):
    CALL_COUNTS[name] = CALL_COUNTS.get(name, 0) + 1


import torch  # noqa: E402

from ._ops import add_op_namespace_prefix, ops  # noqa: E402
'''

_INIT_DEPS = """
from kernels import get_kernel_dep  # noqa: E402

DEPENDENCIES = {repo_id: get_kernel_dep(repo_id) for repo_id in @@DEP_IDS@@}
DEPENDENCY_IDENTITIES = {repo_id: module.KERNEL_IDENTITY for repo_id, module in DEPENDENCIES.items()}
"""

_INIT_BODY = {
    "attention": '''

def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (batch, seqlen_q, heads, dim); k, v: (batch, seqlen_k, kv_heads, dim) with heads % kv_heads == 0."""
    _count("flash_attn_func")
    out, lse = ops.fwd(
        q, k, v, dropout_p, softmax_scale, causal, tuple(window_size), softcap, alibi_slopes, return_attn_probs
    )
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (total_q, heads, dim); k, v: (total_k, kv_heads, dim); cu_seqlens_*: (batch + 1,) int32 offsets."""
    _count("flash_attn_varlen_func")
    out, lse = ops.varlen_fwd(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p,
        softmax_scale,
        causal,
        tuple(window_size),
        softcap,
        alibi_slopes,
        return_attn_probs,
    )
    return (out, lse, None) if return_attn_probs else out


__all__ = ["KERNEL_IDENTITY", "flash_attn_func", "flash_attn_varlen_func"]
''',
    "activation": """

def silu_and_mul(out, x):
    _count("silu_and_mul")
    ops.silu_and_mul(out, x)
    return out


def gelu_and_mul(out, x):
    _count("gelu_and_mul")
    ops.gelu_and_mul(out, x)
    return out


def gelu_tanh_and_mul(out, x):
    _count("gelu_tanh_and_mul")
    ops.gelu_tanh_and_mul(out, x)
    return out


def gelu_fast(out, x):
    _count("gelu_fast")
    ops.gelu_fast(out, x)
    return out


def gelu_new(out, x):
    _count("gelu_new")
    ops.gelu_new(out, x)
    return out


def gelu_quick(out, x):
    _count("gelu_quick")
    ops.gelu_quick(out, x)
    return out


from . import layers  # noqa: E402

__all__ = [
    "KERNEL_IDENTITY",
    "gelu_and_mul",
    "gelu_fast",
    "gelu_new",
    "gelu_quick",
    "gelu_tanh_and_mul",
    "layers",
    "silu_and_mul",
]
""",
    "layernorm": """

def rms_norm(x, weight, eps=1e-6):
    _count("rms_norm")
    return ops.rms_norm(x, weight, eps)


def layer_norm(x, weight, bias=None, eps=1e-5):
    _count("layer_norm")
    return ops.layer_norm(x, weight, bias, eps)


from . import layers  # noqa: E402

__all__ = ["KERNEL_IDENTITY", "layer_norm", "layers", "rms_norm"]
""",
    "rotary": '''

def apply_rotary(x1, x2, cos, sin, out1, out2, conj):
    """out1 = x1 * cos - x2 * sin, out2 = x1 * sin + x2 * cos (sin negated when ``conj``)."""
    _count("apply_rotary")
    ops.apply_rotary(x1, x2, cos, sin, out1, out2, conj)


__all__ = ["KERNEL_IDENTITY", "apply_rotary"]
''',
}

_LAYERS = {
    "activation": '''"""nn.Module layers for ``kernels.kernelize`` (stateless, forward(self, x))."""

import torch
from torch import nn

from . import gelu_and_mul, gelu_fast, gelu_new, gelu_quick, gelu_tanh_and_mul, silu_and_mul


def _half_out(x):
    return torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)


class SiluAndMul(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        return silu_and_mul(_half_out(x), x)


class GeluAndMul(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        return gelu_and_mul(_half_out(x), x)


class GeluTanhAndMul(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        return gelu_tanh_and_mul(_half_out(x), x)


class FastGELU(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        return gelu_fast(torch.empty_like(x), x)


class NewGELU(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        return gelu_new(torch.empty_like(x), x)


class QuickGELU(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, x):
        return gelu_quick(torch.empty_like(x), x)
''',
    "layernorm": '''"""nn.Module layers for ``kernels.kernelize`` (use the replaced module's weight and epsilon)."""

from torch import nn

from . import rms_norm


class RMSNorm(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states):
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)


class LlamaRMSNorm(nn.Module):
    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states):
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
''',
}

_OPS_COMPILED = '''import torch

from . import @@OPS_NS@@  # noqa: F401  (compiled extension)

ops = torch.ops.@@OPS_NS@@


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix op_name with the op namespace of this build."""
    return f"@@OPS_NS@@::{op_name}"
'''

_OPS_PYTHON_HEAD = '''"""Pure-Python ops of this build (no compiled extension is loaded on this backend)."""

from types import SimpleNamespace

import torch
import torch.nn.functional as F

_NAMESPACE = "@@OPS_NS@@"


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix op_name with the op namespace of this build."""
    return f"{_NAMESPACE}::{op_name}"
'''

_OPS_PYTHON_BODY = {
    "attention": """

def _expand_kv(x, num_heads):
    # (batch, seqlen, kv_heads, dim) -> (batch, seqlen, num_heads, dim); query head h reads kv head h // group.
    kv_heads = x.shape[-2]
    if kv_heads == num_heads:
        return x
    if num_heads % kv_heads:
        raise ValueError(f"number of query heads ({num_heads}) is not a multiple of kv heads ({kv_heads})")
    return x.repeat_interleave(num_heads // kv_heads, dim=-2)


def _allowed(seqlen_q, seqlen_k, causal, window_size, device):
    # flash-attn semantics: query i sits at key position i + seqlen_k - seqlen_q (bottom-right aligned).
    left, right = window_size
    if causal:
        right = 0
    if left < 0 and right < 0:
        return None
    i = torch.arange(seqlen_q, device=device)[:, None] + (seqlen_k - seqlen_q)
    j = torch.arange(seqlen_k, device=device)[None, :]
    allowed = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        allowed &= j <= i + right
    if left >= 0:
        allowed &= j >= i - left
    return allowed


def _attention(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_lse):
    batch, seqlen_q, num_heads, head_dim = q.shape
    seqlen_k = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else head_dim**-0.5
    qh = q.transpose(1, 2)
    kh = _expand_kv(k, num_heads).transpose(1, 2)
    vh = _expand_kv(v, num_heads).transpose(1, 2)
    allowed = _allowed(seqlen_q, seqlen_k, causal, window_size, q.device)
    lse = None
    if softcap > 0 or alibi_slopes is not None or return_lse:
        acc = torch.promote_types(q.dtype, torch.float32)
        scores = torch.matmul(qh.to(acc), kh.to(acc).transpose(-2, -1)) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        if alibi_slopes is not None:
            i = torch.arange(seqlen_q, device=q.device)[:, None] + (seqlen_k - seqlen_q)
            j = torch.arange(seqlen_k, device=q.device)[None, :]
            slopes = alibi_slopes.to(acc).reshape(-1, num_heads, 1, 1)
            scores = scores - slopes * (i - j).abs()
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        if dropout_p > 0:
            probs = F.dropout(probs, p=dropout_p)
        out = torch.matmul(probs.to(vh.dtype), vh)
    elif causal and seqlen_q == seqlen_k and window_size[0] < 0:
        out = F.scaled_dot_product_attention(qh, kh, vh, dropout_p=dropout_p, is_causal=True, scale=scale)
    else:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, dropout_p=dropout_p, scale=scale)
        if allowed is not None and not bool(allowed.any(-1).all()):
            out = out.masked_fill(~allowed.any(-1)[:, None], 0.0)  # rows with no visible key give 0
    return out.transpose(1, 2), lse


def mha_fwd(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_lse):
    return _attention(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_lse)


def mha_varlen_fwd(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    return_lse,
):
    cq = [int(x) for x in cu_seqlens_q.tolist()]
    ck = [int(x) for x in cu_seqlens_k.tolist()]
    outs, lses = [], []
    for b in range(len(cq) - 1):
        slopes = alibi_slopes
        if alibi_slopes is not None and alibi_slopes.dim() == 2:
            slopes = alibi_slopes[b]
        out, lse = _attention(
            q[cq[b] : cq[b + 1]].unsqueeze(0),
            k[ck[b] : ck[b + 1]].unsqueeze(0),
            v[ck[b] : ck[b + 1]].unsqueeze(0),
            dropout_p,
            softmax_scale,
            causal,
            window_size,
            softcap,
            slopes,
            return_lse,
        )
        outs.append(out.squeeze(0))
        if lse is not None:
            lses.append(lse.squeeze(0))
    out = torch.cat(outs, dim=0) if outs else q.new_empty((0, *q.shape[1:]))
    return out, (torch.cat(lses, dim=-1) if lses else None)


ops = SimpleNamespace(fwd=mha_fwd, varlen_fwd=mha_varlen_fwd)
""",
    "activation": """

def _halves(x):
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


def silu_and_mul(out, x):
    a, b = _halves(x)
    out.copy_(F.silu(a) * b)


def gelu_and_mul(out, x):
    a, b = _halves(x)
    out.copy_(F.gelu(a) * b)


def gelu_tanh_and_mul(out, x):
    a, b = _halves(x)
    out.copy_(F.gelu(a, approximate="tanh") * b)


def gelu_fast(out, x):
    out.copy_(0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))))


def gelu_new(out, x):
    out.copy_(0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0)))))


def gelu_quick(out, x):
    out.copy_(x * torch.sigmoid(1.702 * x))


ops = SimpleNamespace(
    silu_and_mul=silu_and_mul,
    gelu_and_mul=gelu_and_mul,
    gelu_tanh_and_mul=gelu_tanh_and_mul,
    gelu_fast=gelu_fast,
    gelu_new=gelu_new,
    gelu_quick=gelu_quick,
)
""",
    "layernorm": """

def rms_norm(x, weight, eps):
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


ops = SimpleNamespace(rms_norm=rms_norm, layer_norm=layer_norm)
""",
    "rotary": """

def apply_rotary(x1, x2, cos, sin, out1, out2, conj):
    s = -sin if conj else sin
    o1 = x1 * cos - x2 * s
    o2 = x1 * s + x2 * cos
    out1.copy_(o1)
    out2.copy_(o2)


ops = SimpleNamespace(apply_rotary=apply_rotary)
""",
}


_EXPAND_KV = """def _expand_kv(x, num_heads):
    # (batch, seqlen, kv_heads, dim) -> (batch, seqlen, num_heads, dim); query head h reads kv head h // group.
    kv_heads = x.shape[-2]
    if kv_heads == num_heads:
        return x
    if num_heads % kv_heads:
        raise ValueError(f"number of query heads ({num_heads}) is not a multiple of kv heads ({kv_heads})")
    return x.repeat_interleave(num_heads // kv_heads, dim=-2)
"""
_EXPAND_KV_GQA_BUG = """class _ExpandKV(torch.autograd.Function):
    # kernels-community#1085 in miniature: the forward gives query head h kv head h // group (right); the backward
    # sums each kv head's gradient over the wrong query heads (strided, not grouped) whenever kv_heads < heads.

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.repeat_interleave(group, dim=-2)

    @staticmethod
    def backward(ctx, grad):
        *lead, heads, dim = grad.shape
        return grad.reshape(*lead, ctx.group, heads // ctx.group, dim).sum(-3), None


def _expand_kv(x, num_heads):
    # (batch, seqlen, kv_heads, dim) -> (batch, seqlen, num_heads, dim); query head h reads kv head h // group.
    kv_heads = x.shape[-2]
    if kv_heads == num_heads:
        return x
    if num_heads % kv_heads:
        raise ValueError(f"number of query heads ({num_heads}) is not a multiple of kv heads ({kv_heads})")
    return _ExpandKV.apply(x, num_heads // kv_heads)
"""
_SLOW_ATTENTION = """

_attention_once = _attention


def _attention(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_lse):
    # Deliberately slow and still exact: the same attention computed 8 times, forward and backward (the 8 results are
    # equal, so their pairwise sums and the division by 8 change no bit).
    runs = [
        _attention_once(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_lse)
        for _ in range(8)
    ]
    outs = [out for out, _ in runs]
    while len(outs) > 1:
        outs = [outs[i] + outs[i + 1] for i in range(0, len(outs), 2)]
    return outs[0] / 8, runs[0][1]
"""
assert _EXPAND_KV in _OPS_PYTHON_BODY["attention"]
#: Kinds beyond KINDS (which the benchmark catalog cycles through, so it stays as it is): ``attention-gqa-bug`` is
#: ``attention`` whose backward is wrong only for grouped-query attention (`kernlock check`'s proof, issue 26);
#: ``attention-slow`` is ``attention`` that is right but does 8 times the work (`kernlock check --speed`, issue 33).
EXTRA_KINDS = ("attention-gqa-bug", "attention-slow")
_INIT_BODY["attention-gqa-bug"] = _INIT_BODY["attention"]
_OPS_PYTHON_BODY["attention-gqa-bug"] = _OPS_PYTHON_BODY["attention"].replace(_EXPAND_KV, _EXPAND_KV_GQA_BUG)
_INIT_BODY["attention-slow"] = _INIT_BODY["attention"]
_OPS_PYTHON_BODY["attention-slow"] = _OPS_PYTHON_BODY["attention"].replace(
    "\n\nops = SimpleNamespace(fwd=", _SLOW_ATTENTION + "\n\nops = SimpleNamespace(fwd=", 1
)


def _render(template: str, **subs: str) -> str:
    for key, value in subs.items():
        template = template.replace(f"@@{key}@@", value)
    return template


# ----------------------------------------------------------------------------------------------------------------
# git plumbing
# ----------------------------------------------------------------------------------------------------------------


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    name, email = GIT_AUTHOR
    date = f"@{_EPOCH} +0000"
    env.update(
        GIT_AUTHOR_NAME=name,
        GIT_AUTHOR_EMAIL=email,
        GIT_COMMITTER_NAME=name,
        GIT_COMMITTER_EMAIL=email,
        GIT_AUTHOR_DATE=date,
        GIT_COMMITTER_DATE=date,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
    )
    return env


_ENV = _git_env()


def _git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=_ENV, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


class _Stream:
    """A ``git fast-import`` stream with inline blobs, fixed identity and dates."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.next_mark = 0

    def _data(self, payload: bytes) -> None:
        self.parts += [b"data %d\n" % len(payload), payload, b"\n"]

    def commit(
        self,
        ref: str,
        *,
        parent: str | None,
        when: int,
        message: str,
        files: Mapping[str, bytes] | None = None,
        deletes: Iterable[str] = (),
    ) -> str:
        """Append a commit; ``parent`` is a mark (``:n``) or a git revision; returns the commit's mark."""
        self.next_mark += 1
        mark = f":{self.next_mark}"
        ident = f"{GIT_AUTHOR[0]} <{GIT_AUTHOR[1]}> {when} +0000"
        self.parts.append(f"commit {ref}\nmark {mark}\nauthor {ident}\ncommitter {ident}\n".encode())
        self._data(message.encode())
        if parent is not None:
            self.parts.append(f"from {parent}\n".encode())
        for path in deletes:
            self.parts.append(f"D {path}\n".encode())
        for path, payload in sorted((files or {}).items()):
            self.parts.append(f"M 100644 inline {path}\n".encode())
            self._data(payload)
        self.parts.append(b"\n")
        return mark

    def tag(self, name: str, target: str, *, when: int, message: str | None) -> None:
        """A lightweight tag (``message=None``) or an annotated tag object on ``target``."""
        if message is None:
            self.parts.append(f"reset refs/tags/{name}\nfrom {target}\n\n".encode())
            return
        ident = f"{GIT_AUTHOR[0]} <{GIT_AUTHOR[1]}> {when} +0000"
        self.parts.append(f"tag {name}\nfrom {target}\ntagger {ident}\n".encode())
        self._data(message.encode())

    def run(self, repo: Path) -> dict[str, str]:
        """Feed the stream to ``git fast-import``; returns ``{mark: commit sha}``."""
        fd, marks_name = tempfile.mkstemp(prefix="marks-", dir=repo / ".git")
        os.close(fd)
        marks = Path(marks_name)
        try:
            _git(repo, "fast-import", "--quiet", "--force", f"--export-marks={marks}", input=b"".join(self.parts))
            out = {}
            for line in marks.read_text().splitlines():
                mark, sha = line.split()
                out[mark] = sha
            return out
        finally:
            marks.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------------------------
# Builds
# ----------------------------------------------------------------------------------------------------------------


def _branch_version(branch: str) -> int:
    m = re.fullmatch(r"v(\d+)", branch)
    return int(m.group(1)) if m else 1


def _normalize_dep(dep: Mapping[str, Any] | tuple[str, int | str]) -> dict[str, Any]:
    if isinstance(dep, tuple):
        repo_id, ver = dep
        return {"repo-id": repo_id, "version": ver} if isinstance(ver, int) else {"repo-id": repo_id, "revision": ver}
    out = {"repo-id": dep["repo-id"] if "repo-id" in dep else dep["repo_id"]}
    if "version" in dep:
        out["version"] = int(dep["version"])
    elif "revision" in dep:
        out["revision"] = str(dep["revision"])
    else:
        raise ValueError(f"kernel dependency {dep!r} needs a version or a revision")
    return out


def _b64sha256(payload: bytes) -> str:
    return base64.b64encode(hashlib.sha256(payload).digest()).decode()


_SO_HEADER = b"\x7fELF\x02\x01\x01\x00"
_SO_CHUNK = 8 << 20  # a .so bigger than this is written in chunks: any size, 8 MiB in memory


def _so_bytes(build_id: str, size: int) -> bytes:
    return _SO_HEADER + random.Random(f"so:{build_id}").randbytes(max(0, size - len(_SO_HEADER)))


def _write_so(build_id: str, size: int, objects: Path) -> tuple[str, int]:
    """Write a build's ``.so`` of ``size`` bytes into the LFS object store ``objects``; (its sha256 hex, size).

    Up to 8 MiB its bytes are random (seeded by the build); above, a random 8 MiB block of the build repeats, each
    chunk opening with its index, so a 1 GiB (or bigger) build is written at disk speed with 8 MiB in memory."""
    objects.mkdir(parents=True, exist_ok=True)
    tmp = objects / f".tmp-{os.getpid()}-{build_id}"
    digest = hashlib.sha256()
    with open(tmp, "wb") as handle:
        if size <= _SO_CHUNK:
            chunks: Iterable[bytes] = [_so_bytes(build_id, size)]
        else:
            block = random.Random(f"so:{build_id}").randbytes(_SO_CHUNK)
            chunks = (
                ((_SO_HEADER if i == 0 else i.to_bytes(8, "little")) + block[8:])[: size - i * _SO_CHUNK]
                for i in range(-(-size // _SO_CHUNK))
            )
        for chunk in chunks:
            digest.update(chunk)
            handle.write(chunk)
    oid = digest.hexdigest()
    final = objects / oid[0:2] / oid[2:4] / oid
    if final.exists():
        tmp.unlink()
    else:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, final)
    return oid, size


def _archs(backend: str, variant: str) -> list[str] | None:
    if backend == "cuda":
        return cuda_archs(variant)
    return list(HUB_MATRIX["rocm-archs"]) if backend == "rocm" else None


@dataclass(slots=True, kw_only=True)
class _RepoState:
    """Everything needed to write new uploads; stored in ``.git/kernlock-fixture.json``."""

    repo_id: str
    kind: str
    license: str = "Apache-2.0"
    python_depends: list[str] = field(default_factory=list)
    so_size: int = 4096
    upstream: str | None = None
    kernels_minver: str | None = None
    kernel_depends: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    minver_by_branch: dict[str, str] = field(default_factory=dict)  # branch -> kernels-minver (over the repo's)
    archs_by_branch: dict[str, list[str]] = field(default_factory=dict)  # branch -> CUDA archs of its CUDA builds
    python_builds: list[str] = field(default_factory=list)  # variants given the pure-Python build
    kind_by_branch: dict[str, str] = field(default_factory=dict)  # branch -> kind (over the repo's)
    builds: dict[str, dict[str, str]] = field(default_factory=dict)  # branch -> variant -> build_id
    uploads: int = 0
    clock: int = 0
    #: Who signs the builds (``Identity`` fields: workflow, repository, issuer); None: the kernels-community
    #: build workflow. ``signed=False`` writes no ``metadata.json.sigstore``.
    signer: dict[str, str] | None = None
    signed: bool = True

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[1]

    def tick(self) -> int:
        self.clock += 1
        return _EPOCH + 3600 * self.clock

    def new_build_id(self, branch: str, variant: str) -> str:
        seed = f"{self.repo_id}\0{branch}\0{variant}\0{self.uploads}"
        return hashlib.sha256(seed.encode()).hexdigest()[:16]

    def save(self, repo: Path) -> None:
        (repo / ".git" / _STATE_FILE).write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def load(cls, repo: Path) -> _RepoState:
        path = repo / ".git" / _STATE_FILE
        if not path.exists():
            raise FileNotFoundError(f"{repo} was not created by kernlock.testing.fixtures")
        return cls(**json.loads(path.read_text()))


def _build_files(state: _RepoState, repo: Path, branch: str, variant: str, build_id: str) -> dict[str, bytes]:
    """Files of one build variant (LFS pointers for ``.so``; their content goes to ``.git/lfs/objects``)."""
    python_name = state.name.replace("-", "_")
    backend = variant_backend(variant)
    version = _branch_version(branch)
    deps = state.kernel_depends.get(branch, [])
    identity = {"repo": state.repo_id, "version": version, "branch": branch, "variant": variant, "build_id": build_id}
    ops_ns = f"_{python_name}_{backend}_{build_id[:7]}"
    init = _render(_INIT_HEAD, NAME=state.name, VARIANT=variant, IDENTITY=repr(identity))
    if deps:
        init += _render(_INIT_DEPS, DEP_IDS=repr([d["repo-id"] for d in deps]))
    kind = state.kind_by_branch.get(branch, state.kind)
    init += _INIT_BODY[kind]
    python = is_python_build(variant) or variant in state.python_builds
    ops = (
        _render(_OPS_PYTHON_HEAD, OPS_NS=ops_ns) + _OPS_PYTHON_BODY[kind]
        if python
        else _render(_OPS_COMPILED, OPS_NS=ops_ns)
    )
    content: dict[str, bytes] = {"__init__.py": init.encode(), "_ops.py": ops.encode()}
    if state.kind in _LAYERS:
        content["layers.py"] = _LAYERS[state.kind].encode()
    files: dict[str, bytes] = dict(content)
    signed = {path: _b64sha256(payload) for path, payload in content.items()}
    if not is_noarch(variant):
        oid, size = _write_so(build_id, state.so_size, repo / ".git" / "lfs" / "objects")
        so_name = f"{ops_ns}.abi3.so"
        signed[so_name] = base64.b64encode(bytes.fromhex(oid)).decode()
        files[so_name] = _LFS_POINTER.format(oid=oid, size=size).encode()
    backend_info: dict[str, Any] = {"type": backend}
    archs = state.archs_by_branch.get(branch) if backend == "cuda" else None
    if (archs := archs or _archs(backend, variant)) and not python:
        backend_info["archs"] = list(archs)
    source_commit = hashlib.sha1(f"{state.repo_id}\0{state.uploads}".encode()).hexdigest()
    metadata: dict[str, Any] = {
        "id": f"_{python_name}_{backend}_{build_id}",
        "name": state.name,
        "version": version,
        "license": state.license,
        "python-depends": list(state.python_depends),
        "backend": backend_info,
    }
    if deps:
        metadata["kernel-depends"] = deps
    if state.upstream:
        metadata["upstream"] = state.upstream
    metadata["source"] = f"https://huggingface.co/{state.repo_id}"
    if minver := state.minver_by_branch.get(branch, state.kernels_minver):
        metadata["kernels-minver"] = minver
    metadata["digest"] = {
        "algorithm": "sha256",
        "files": dict(sorted(signed.items())),
    }
    metadata["provenance"] = {
        "kernel-builder": {"version": "0.11.0"},
        "kernel": {"commit": source_commit, "dirty": False},
    }
    meta_bytes = (json.dumps(metadata, indent=2) + "\n").encode()
    files["metadata.json"] = meta_bytes
    if state.signed:
        files["metadata.json.sigstore"] = sign_metadata(meta_bytes, state.signer)
    return {f"build/{variant}/{path}": payload for path, payload in files.items()}


def can_sign() -> bool:
    """Whether this Python can sign builds with the test sigstore instance (rfc8785 and cryptography installed)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("rfc8785", "cryptography"))


def sign_metadata(meta_bytes: bytes, signer: Mapping[str, str] | None = None) -> bytes:
    """The bundle kernel-builder's workflow writes beside ``metadata.json`` (really signed, by the test sigstore
    instance of :mod:`kernlock.testing.sigstore`; ``signer``: :class:`~kernlock.testing.sigstore.Identity` fields)."""
    from kernlock.testing import sigstore

    log_index = int.from_bytes(hashlib.sha256(meta_bytes).digest()[:4], "big")
    return sigstore.instance().sign(meta_bytes, sigstore.Identity(**(signer or {})), log_index=log_index)


def write_trusted_root(root: str | os.PathLike[str]) -> Path:
    """``ROOT/sigstore/trusted_root.json``: the trusted root of the test sigstore instance that signs the builds."""
    from kernlock.testing import sigstore

    path = Path(root) / "sigstore" / "trusted_root.json"
    text = sigstore.instance().trusted_root_json()
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")  # builders run in threads too
        partial.write_text(text)
        partial.replace(path)  # atomic: a reader never sees half a root
    return path


def _job_groups(variants: Sequence[str], jobs: str) -> list[list[str]]:
    """Split variants into upload jobs: one per backend (``jobs="backend"``) or one for all (``"single"``)."""
    if jobs == "single":
        return [list(variants)]
    if jobs != "backend":
        raise ValueError(f"jobs must be 'backend' or 'single', not {jobs!r}")
    groups: dict[str, list[str]] = {}
    for v in variants:
        groups.setdefault("noarch" if is_noarch(v) else variant_backend(v), []).append(v)
    return list(groups.values())


def _job_message(group: Sequence[str]) -> str:
    backend = "noarch" if is_noarch(group[0]) else variant_backend(group[0])
    return f"Uploaded using `kernel-builder` ({backend} builds)"


def _upload(
    stream: _Stream,
    state: _RepoState,
    repo: Path,
    branch: str,
    parent: str,
    variants: Sequence[str],
    *,
    message: str,
    deletes: Iterable[str] = (),
) -> str:
    """One upload job: (re)writes ``variants`` on ``branch`` with new build ids; returns the commit mark."""
    state.uploads += 1
    files: dict[str, bytes] = {}
    builds = state.builds.setdefault(branch, {})
    for variant in variants:
        build_id = state.new_build_id(branch, variant)
        builds[variant] = build_id
        files.update(_build_files(state, repo, branch, variant, build_id))
    dels = [*deletes, *(f"build/{v}" for v in variants)]
    for d in deletes:
        builds.pop(d.removeprefix("build/"), None)
    return stream.commit(
        f"refs/heads/{branch}", parent=parent, when=state.tick(), message=message, files=files, deletes=dels
    )


def _readme(state: _RepoState) -> bytes:
    return (
        "---\nlibrary_name: kernels\nlicense: apache-2.0\ntags:\n- kernels\n---\n\n"
        f"# {state.name}\n\nFixture kernel repository `{state.repo_id}` generated by kernlock.testing.fixtures "
        f"({state.kind} kernel). Version branches `v<N>` carry the builds under `build/<variant>/`.\n"
    ).encode()


# ----------------------------------------------------------------------------------------------------------------
# Public API: repositories
# ----------------------------------------------------------------------------------------------------------------


def kernel_repo_path(root: str | os.PathLike[str], repo_id: str) -> Path:
    """``ROOT/kernels/{org}/{name}``."""
    org, name = _split_repo_id(repo_id)
    return Path(root) / "kernels" / org / name


def _split_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"repo id must be 'org/name', not {repo_id!r}")
    if not _NAME_RE.fullmatch(parts[1]):
        raise ValueError(f"kernel name {parts[1]!r} does not match {_NAME_RE.pattern}")
    return parts[0], parts[1]


def read_organizations(root: str | os.PathLike[str]) -> dict[str, dict[str, bool]]:
    """Contents of ``ROOT/organizations.json`` (empty when missing)."""
    path = Path(root) / "organizations.json"
    return json.loads(path.read_text()) if path.exists() else {}


def set_org_trust(root: str | os.PathLike[str], org: str, trusted: bool) -> None:
    """Record ``org`` as a trusted (or untrusted) kernel publisher in ``ROOT/organizations.json``."""
    orgs = read_organizations(root)
    orgs[org] = {"trustedKernelPublisher": bool(trusted)}
    path = Path(root) / "organizations.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".organizations.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(orgs, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRepo:
    """Handle on one fixture repository (``root`` is the server root, not the repository path)."""

    root: Path
    repo_id: str

    @property
    def path(self) -> Path:
        """The repository's work tree (``.git/`` inside)."""
        return kernel_repo_path(self.root, self.repo_id)

    def head(self, rev: str) -> str:
        """Commit sha of a branch, tag (peeled) or any revision."""
        return _git(self.path, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}").decode().strip()

    def branches(self) -> dict[str, str]:
        """``{branch: head commit}``."""
        out = _git(self.path, "for-each-ref", "--format=%(refname:lstrip=2) %(objectname)", "refs/heads")
        return dict(line.split() for line in out.decode().splitlines())

    def tags(self) -> dict[str, str]:
        """``{tag: commit}``, annotated tags peeled to their commit."""
        fmt = "%(refname:lstrip=2) %(objectname) %(*objectname)"
        out = _git(self.path, "for-each-ref", f"--format={fmt}", "refs/tags")
        tags = {}
        for line in out.decode().splitlines():
            name, obj, *peeled = line.split()
            tags[name] = peeled[0] if peeled else obj
        return tags

    def variants(self, rev: str) -> list[str]:
        """Sorted names of the folders under ``build/`` at ``rev`` (read from git)."""
        out = _git(self.path, "ls-tree", "--name-only", "-d", f"{rev}:build")
        return sorted(out.decode().split())

    def builds(self, branch: str) -> dict[str, str]:
        """``{variant: build_id}`` of the branch head, as recorded by the builder."""
        return dict(_RepoState.load(self.path).builds.get(branch, {}))

    def identity(self, rev: str, variant: str) -> dict[str, Any]:
        """``KERNEL_IDENTITY`` of a build at any revision (read from git)."""
        return read_identity(self.root, self.repo_id, rev, variant)

    def lfs_object(self, oid: str) -> Path:
        """Where the content of an LFS object lives."""
        return self.path / ".git" / "lfs" / "objects" / oid[0:2] / oid[2:4] / oid

    def move_branch(
        self,
        branch: str,
        variants: Iterable[str] | None = None,
        *,
        add: Iterable[str] = (),
        remove: Iterable[str] = (),
        kernel_depends: Sequence[Mapping[str, Any] | tuple[str, int | str]] | None = None,
        rewrite: bool = False,
        message: str | None = None,
        kind: str | None = None,
    ) -> str:
        """Re-upload builds on ``branch`` (a new commit with new build ids); returns the new head sha.

        ``variants`` re-uploads those (default: every variant of the head), ``add`` uploads new ones, ``remove``
        deletes some. ``kernel_depends`` replaces the branch's kernel dependencies. ``rewrite=True`` makes the
        new commit a child of ``main`` instead of the old head (a force push: the old head leaves the branch) and
        re-uploads every remaining variant. ``kind`` re-uploads the builds of another kind (``attention-gqa-bug``:
        a re-upload that breaks the branch, as kernels-community#1085 did to v3).
        """
        state = _RepoState.load(self.path)
        if branch not in state.builds:
            raise ValueError(f"{self.repo_id} has no branch {branch!r}")
        if kind is not None:
            if kind not in (*KINDS, *EXTRA_KINDS):
                raise ValueError(f"kind must be one of {(*KINDS, *EXTRA_KINDS)}, not {kind!r}")
            state.kind_by_branch[branch] = kind
        current = dict(state.builds[branch])
        remove = list(remove)
        if kernel_depends is not None:
            state.kernel_depends[branch] = [_normalize_dep(d) for d in kernel_depends]
        if rewrite:
            # A force push uploads the whole (new) matrix again on top of main.
            keep = [v for v in current if v not in remove]
            chosen = list(dict.fromkeys([*keep, *add]))
            state.builds[branch] = {}
            deletes = ["build"]
            parent = "refs/heads/main^0"
        else:
            chosen = list(dict.fromkeys([*(current if variants is None else variants), *add]))
            chosen = [v for v in chosen if v not in remove]
            deletes = [f"build/{v}" for v in remove if v in current]
            parent = f"refs/heads/{branch}^0"
        if not chosen and not deletes:
            raise ValueError("nothing to upload")
        stream = _Stream()
        msg = message or f"Uploaded using `kernel-builder` ({len(chosen)} build variants)"
        mark = _upload(stream, state, self.path, branch, parent, chosen, message=msg, deletes=deletes)
        sha = stream.run(self.path)[mark]
        state.save(self.path)
        return sha

    def add_branch(
        self,
        branch: str,
        variants: Sequence[str],
        *,
        kernel_depends: Sequence[Mapping[str, Any] | tuple[str, int | str]] = (),
        from_rev: str = "main",
        jobs: str = "backend",
    ) -> str:
        """Create a new version branch from ``from_rev`` with its builds; returns its head sha."""
        state = _RepoState.load(self.path)
        if branch in state.builds or branch == "main":
            raise ValueError(f"{self.repo_id} already has a branch {branch!r}")
        state.kernel_depends[branch] = [_normalize_dep(d) for d in kernel_depends]
        stream = _Stream()
        parent = self.head(from_rev)
        mark = parent
        for group in _job_groups(variants, jobs):
            mark = _upload(stream, state, self.path, branch, mark, group, message=_job_message(group))
        sha = stream.run(self.path)[mark]
        state.save(self.path)
        return sha

    def upload_files(
        self, branch: str, files: Mapping[str, bytes], *, message: str = "Upload files", sign: bool = True
    ) -> str:
        """Commit ``{path: content}`` on top of ``branch`` (a prebuilt variant, say); ``.so`` files go to LFS.

        A ``build/<variant>/metadata.json`` uploaded without its ``metadata.json.sigstore`` is signed again as the
        build workflow would (``sign``, when it has a ``digest`` and the repo's builds are signed); otherwise the
        stale bundle is deleted (an unsigned build). ``sign=False`` keeps the old bundle (a tampered build).
        Returns the new head sha. The builder's own build records are left as they are.
        """
        state = _RepoState.load(self.path)
        deletes: list[str] = []
        files = dict(files)
        for path, payload in list(files.items()):
            bundle = f"{path}.sigstore"
            if not (path.startswith("build/") and path.endswith("/metadata.json")) or bundle in files or not sign:
                continue
            try:
                has_digest = "digest" in json.loads(payload)
            except (ValueError, TypeError):
                has_digest = False
            if state.signed and has_digest:
                files[bundle] = sign_metadata(payload, state.signer)
            else:
                deletes.append(bundle)
        committed: dict[str, bytes] = {}
        for path, payload in files.items():
            if path.endswith(".so"):
                oid = hashlib.sha256(payload).hexdigest()
                obj = self.lfs_object(oid)
                obj.parent.mkdir(parents=True, exist_ok=True)
                obj.write_bytes(payload)
                payload = _LFS_POINTER.format(oid=oid, size=len(payload)).encode()
            committed[path] = payload
        stream = _Stream()
        mark = stream.commit(
            f"refs/heads/{branch}",
            parent=f"refs/heads/{branch}^0",
            when=state.tick(),
            message=message,
            files=committed,
            deletes=deletes,
        )
        sha = stream.run(self.path)[mark]
        state.save(self.path)
        return sha

    def delete_branch(self, branch: str) -> None:
        """Delete a branch (its commits stay reachable by sha)."""
        state = _RepoState.load(self.path)
        _git(self.path, "update-ref", "-d", f"refs/heads/{branch}")
        state.builds.pop(branch, None)
        state.save(self.path)

    def add_tag(self, tag: str, rev: str, *, annotated: bool = False, message: str | None = None) -> str:
        """Tag ``rev`` (lightweight, or annotated with a tag object); returns the tagged commit sha."""
        state = _RepoState.load(self.path)
        sha = self.head(rev)
        stream = _Stream()
        stream.tag(tag, sha, when=state.tick(), message=(message or f"Release {tag}\n") if annotated else None)
        stream.run(self.path)
        state.save(self.path)
        return sha

    def export(self, rev: str, dest: str | os.PathLike[str], paths: Sequence[str] = ()) -> Path:
        """Write the tree at ``rev`` (or some ``paths`` of it) to ``dest`` with LFS content materialized."""
        return export_revision(self.root, self.repo_id, rev, dest, paths)


def open_kernel_repo(root: str | os.PathLike[str], repo_id: str) -> KernelRepo:
    """Handle on an existing fixture repository."""
    repo = KernelRepo(root=Path(root), repo_id=repo_id)
    if not (repo.path / ".git" / _STATE_FILE).exists():
        raise FileNotFoundError(f"no fixture repository {repo_id} under {root}")
    return repo


def create_kernel_repo(
    root: str | os.PathLike[str],
    repo_id: str,
    branches: Mapping[str, Sequence[str]],
    *,
    kind: str = "activation",
    kernel_depends: Sequence[Mapping[str, Any] | tuple[str, int | str]]
    | Mapping[str, Sequence[Mapping[str, Any] | tuple[str, int | str]]] = (),
    no_cpu: Iterable[str] = (),
    tags: Mapping[str, str] | None = None,
    annotated_tags: Mapping[str, str] | None = None,
    trusted: bool | None = None,
    license: str = "Apache-2.0",
    python_depends: Sequence[str] = (),
    so_size: int = 4096,
    upstream: str | None = None,
    kernels_minver: str | Mapping[str, str] | None = None,
    cuda_archs: Mapping[str, Sequence[str]] | None = None,
    python_builds: Iterable[str] = (),
    jobs: str = "backend",
    kinds: Mapping[str, str] | None = None,
    signer: Mapping[str, str] | None = None,
    signed: bool | None = None,
) -> KernelRepo:
    """Create ``ROOT/kernels/{repo_id}``: ``main`` with the README, one branch per entry of ``branches``.

    ``branches`` maps a branch (``v1``) to its variants; each branch is written as one upload commit per backend
    (``jobs="backend"``) or as a single commit (``jobs="single"``). ``kernel_depends`` is a list for every branch
    or ``{branch: [...]}``; entries are ``{"repo-id", "version"|"revision"}`` or ``(repo_id, version|revision)``.
    ``no_cpu`` names branches whose CPU-loadable variants are dropped. ``kernels_minver`` is written to every
    build's metadata.json (a string) or per branch (``{branch: "0.18.0"}``); ``cuda_archs`` replaces the CUDA
    archs of a branch's CUDA builds (``{"v1": ["8.0"]}``: a version without sm90). ``tags``/``annotated_tags``
    map a tag to the revision it points at (after all branches are written). ``trusted`` writes the org to
    ``organizations.json`` (``None``: unchanged; ``kernels-community`` is recorded as trusted when missing).
    ``python_builds`` names variants that get the pure-Python build whatever their backend (a benchmark's stand-in
    for a GPU machine's own build, which then imports there). ``kinds`` gives a branch another kind than
    ``kind`` (``{"v3": "attention-gqa-bug"}``: one version's build is wrong, as kernels-community#1085).
    ``signer`` signs the builds as another identity (``{"workflow": ..., "repository": ..., "issuer": ...}``);
    ``signed=False`` uploads them without a bundle; None (the default): signed where the signing libraries are
    installed (:func:`can_sign`; a GPU image may lack them, and its benchmarks then measure unsigned builds).
    """
    signed = can_sign() if signed is None else signed
    for chosen in (kind, *(kinds or {}).values()):
        if chosen not in (*KINDS, *EXTRA_KINDS):
            raise ValueError(f"kind must be one of {(*KINDS, *EXTRA_KINDS)}, not {chosen!r}")
    org, _ = _split_repo_id(repo_id)
    path = kernel_repo_path(root, repo_id)
    if path.exists():
        raise FileExistsError(f"{path} already exists")
    if trusted is not None:
        set_org_trust(root, org, trusted)
    elif org == "kernels-community" and org not in read_organizations(root):
        set_org_trust(root, org, True)
    no_cpu = set(no_cpu)
    if isinstance(kernel_depends, Mapping):
        deps_by_branch = {b: [_normalize_dep(d) for d in kernel_depends.get(b, ())] for b in branches}
    else:
        deps_by_branch = {b: [_normalize_dep(d) for d in kernel_depends] for b in branches}
    state = _RepoState(
        repo_id=repo_id,
        kind=kind,
        license=license,
        python_depends=list(python_depends),
        so_size=so_size,
        upstream=upstream,
        kernels_minver=kernels_minver if isinstance(kernels_minver, str) else None,
        kernel_depends=deps_by_branch,
        minver_by_branch=dict(kernels_minver) if isinstance(kernels_minver, Mapping) else {},
        archs_by_branch={b: list(a) for b, a in (cuda_archs or {}).items()},
        python_builds=sorted(python_builds),
        kind_by_branch=dict(kinds or {}),
        signer=dict(signer) if signer else None,
        signed=signed,
    )
    if signed:  # an unsigned repo needs no sigstore instance (nor cryptography, which a GPU image may lack)
        write_trusted_root(root)
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    stream = _Stream()
    main = stream.commit(
        "refs/heads/main",
        parent=None,
        when=state.tick(),
        message="Initial commit",
        files={".gitattributes": _GITATTRIBUTES.encode(), "README.md": _readme(state)},
    )
    for branch, variants in branches.items():
        if branch == "main":
            raise ValueError("builds go to version branches, not main")
        variants = list(dict.fromkeys(variants))
        if branch in no_cpu:
            variants = without_cpu(variants)
        for v in variants:
            _check_variant(v)
        mark = main
        state.builds[branch] = {}
        for group in _job_groups(variants, jobs):
            mark = _upload(stream, state, path, branch, mark, group, message=_job_message(group))
        if mark == main:  # a branch without builds
            stream.parts.append(f"reset refs/heads/{branch}\nfrom {main}\n\n".encode())
    all_tags = [(t, r, False) for t, r in (tags or {}).items()]
    all_tags += [(t, r, True) for t, r in (annotated_tags or {}).items()]
    stream.run(path)
    state.save(path)
    _git(path, "reset", "-q", "--hard")
    repo = KernelRepo(root=Path(root), repo_id=repo_id)
    for tag, rev, annotated in all_tags:
        repo.add_tag(tag, rev, annotated=annotated)
    return repo


def _check_variant(variant: str) -> None:
    try:
        from kernels.variants import parse_variant
    except ImportError:  # kernels not installed: accept anything with a known backend
        variant_backend(variant)
        return
    parsed = parse_variant(variant)
    if parsed.variant_str != variant:
        raise ValueError(f"variant {variant!r} does not round-trip through kernels' grammar")


def move_branch(
    root: str | os.PathLike[str],
    repo_id: str,
    branch: str,
    variants: Iterable[str] | None = None,
    *,
    add: Iterable[str] = (),
    remove: Iterable[str] = (),
    kernel_depends: Sequence[Mapping[str, Any] | tuple[str, int | str]] | None = None,
    rewrite: bool = False,
    message: str | None = None,
) -> str:
    """Re-upload builds on a branch, as a new upload would (see ``KernelRepo.move_branch``); returns the new head."""
    return open_kernel_repo(root, repo_id).move_branch(
        branch, variants, add=add, remove=remove, kernel_depends=kernel_depends, rewrite=rewrite, message=message
    )


def add_tag(root: str | os.PathLike[str], repo_id: str, tag: str, rev: str, *, annotated: bool = False) -> str:
    """Tag ``rev`` in a fixture repository; returns the tagged commit sha."""
    return open_kernel_repo(root, repo_id).add_tag(tag, rev, annotated=annotated)


def read_identity(root: str | os.PathLike[str], repo_id: str, rev: str, variant: str) -> dict[str, Any]:
    """``KERNEL_IDENTITY`` of ``build/<variant>/__init__.py`` at ``rev``, read from git."""
    path = kernel_repo_path(root, repo_id)
    source = _git(path, "show", f"{rev}:build/{variant}/__init__.py").decode()
    m = re.search(r"^KERNEL_IDENTITY = (\{.*\})$", source, re.MULTILINE)
    if m is None:
        raise ValueError(f"no KERNEL_IDENTITY in {repo_id}@{rev} build/{variant}")
    identity = ast.literal_eval(m.group(1))
    if not isinstance(identity, dict):
        raise ValueError(f"KERNEL_IDENTITY of {repo_id}@{rev} build/{variant} is not a dict")
    return identity


def export_revision(
    root: str | os.PathLike[str],
    repo_id: str,
    rev: str,
    dest: str | os.PathLike[str],
    paths: Sequence[str] = (),
) -> Path:
    """Extract the tree at ``rev`` (optionally only ``paths``) into ``dest``, replacing LFS pointers by content."""
    repo = kernel_repo_path(root, repo_id)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    archive = _git(repo, "archive", "--format=tar", rev, "--", *paths)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python without extraction filters; git archive output is trusted here
            tar.extractall(dest)
    for file in dest.rglob("*"):
        if file.is_file() and file.stat().st_size < 512:
            head = file.read_bytes()
            m = re.fullmatch(rb"version https://git-lfs\S*\noid sha256:([0-9a-f]{64})\nsize (\d+)\n", head)
            if m:
                oid = m.group(1).decode()
                shutil.copyfile(repo / ".git" / "lfs" / "objects" / oid[0:2] / oid[2:4] / oid, file)
    return dest


# ----------------------------------------------------------------------------------------------------------------
# Catalogs
# ----------------------------------------------------------------------------------------------------------------

_FA2_V1 = [
    *(f"torch27-{abi}-{cu}-x86_64-linux" for cu in ("cu118", "cu126") for abi in ("cxx11", "cxx98")),
    *(f"torch28-cxx11-{cu}-x86_64-linux" for cu in ("cu126", "cu128", "cu129")),
    "torch28-cxx11-cu128-aarch64-linux",
    "torch28-cxx11-cu129-aarch64-linux",
    "torch27-cxx11-rocm63-x86_64-linux",
    "torch28-cxx11-rocm63-x86_64-linux",
]
_FA2_V2 = [
    *(f"torch{t}-cxx11-{cu}-x86_64-linux" for t in ("29", "210") for cu in ("cu126", "cu128")),
    "torch29-cxx11-cu128-aarch64-linux",
    "torch210-cxx11-cu128-aarch64-linux",
    "torch29-cxx11-rocm64-x86_64-linux",
    "torch210-cxx11-rocm64-x86_64-linux",
    "torch29-cxx11-xpu20252-x86_64-linux",
    "torch210-cxx11-xpu20253-x86_64-linux",
    "torch211-cxx11-cu128-x86_64-linux",  # a late build: the README's `when = "cuda == 12.8"` pin locks it
    CPU_VARIANT,
]
_FA2_V3 = [
    *(f"torch{t}-cxx11-{cu}-x86_64-linux" for t in ("210", "211") for cu in ("cu128", "cu130")),
    "torch210-cxx11-cu130-aarch64-linux",
    "torch211-cxx11-cu130-aarch64-linux",
    "torch210-cxx11-rocm64-x86_64-linux",
    "torch211-cxx11-rocm70-x86_64-linux",
    "torch210-cxx11-xpu20253-x86_64-linux",
    "torch211-cxx11-xpu20253-x86_64-linux",
    "torch210-metal-aarch64-darwin",
    "torch211-metal-aarch64-darwin",
    CPU_VARIANT,
    "torch-cpu",
]
_FA2_V4 = [
    *standard_variants(("2.12", "2.13")),
    "torch-stable-abi210-cu130-x86_64-linux",
    "torch-stable-abi210-cu130-aarch64-linux",
]
_FA2_V5 = [*standard_variants(("2.12", "2.13"), cpu=False), "torch-stable-abi212-cu130-x86_64-linux"]
_FA4_V0 = [*standard_variants(("2.12", "2.13"), cpu=False, rocm=False, xpu=False, metal=False), "torch-cpu"]


def catalog_matrix() -> dict[str, dict[str, list[str]]]:
    """The declared ``{repo_id: {branch: [variants]}}`` of ``build_catalog`` (as written at creation)."""
    std = standard_variants(("2.12", "2.13"))
    return {
        "kernels-community/flash-attn2": {
            "v1": list(_FA2_V1),
            "v2": list(_FA2_V2),
            "v3": list(_FA2_V3),
            "v4": list(_FA2_V4),
            "v5": list(_FA2_V5),
        },
        # v1 also carries torch 2.11 + CUDA 12.8, the cluster of the README's Quick start
        "kernels-community/activation": {
            "v1": [*std, "torch211-cxx11-cu128-x86_64-linux"],
            "v2": [*std, "torch-cpu", "torch-cuda"],
        },
        "kernels-community/triton-layer-norm": {"v1": ["torch-universal"]},
        "kernels-community/flash-attn4": {"v0": list(_FA4_V0)},
        "kernels-community/paged-attention": {"v1": list(std), "v2": list(std)},
        "someone/fast-gelu": {"v1": list(std)},
        "kernels-community/rotary": {"v1": list(std), "v2": without_cpu(std)},
        "kernels-community/gqa-attention": {"v2": [CPU_VARIANT, "torch-cpu"], "v3": [CPU_VARIANT, "torch-cpu"]},
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Catalog:
    """The repositories of ``build_catalog`` (mirrors kernels-community)."""

    root: Path
    #: attention; v1 (no CPU), v2/v3/v4 (CPU), v5 newest (no CPU); v4 = transformers' default; tag v1.0.0.
    flash_attn2: str = "kernels-community/flash-attn2"
    #: activation functions + ``layers.SiluAndMul`` etc.; v1, v2 (CPU builds); tag v2.0.0 on v2.
    activation: str = "kernels-community/activation"
    #: ``torch-universal`` only (layernorm + ``layers.RMSNorm``/``LlamaRMSNorm``).
    universal: str = "kernels-community/triton-layer-norm"
    #: only a ``v0`` branch (CUDA builds + ``torch-cpu``).
    v0_only: str = "kernels-community/flash-attn4"
    #: kernel-depends on activation (v1 -> activation version 1, v2 -> activation version 2).
    dependent: str = "kernels-community/paged-attention"
    #: org ``someone`` is not a trusted publisher.
    untrusted: str = "someone/fast-gelu"
    #: v1 has CPU builds, the newest version v2 has none.
    newest_without_cpu: str = "kernels-community/rotary"
    #: attention whose v3 backward is wrong for grouped-query attention only (kernels-community#1085 on the CPU);
    #: v2 is its correct sibling (`kernlock check`).
    gqa_backward_bug: str = "kernels-community/gqa-attention"
    #: ``(repo_id, tag)`` of the annotated tag on an old commit (v1's head before its re-upload).
    old_tag: tuple[str, str] = ("kernels-community/flash-attn2", "v1.0.0")
    #: ``(repo_id, tag)`` of a lightweight tag.
    light_tag: tuple[str, str] = ("kernels-community/activation", "v2.0.0")
    #: version of flash-attn2 that transformers 5.22.2 asks for on this machine (torch >= 2.10).
    transformers_flash_attn2_version: int = TRANSFORMERS_FLASH_ATTN2_VERSION

    @property
    def repo_ids(self) -> list[str]:
        """All repositories of the catalog."""
        return [
            self.flash_attn2,
            self.activation,
            self.universal,
            self.v0_only,
            self.dependent,
            self.untrusted,
            self.newest_without_cpu,
            self.gqa_backward_bug,
        ]

    def repo(self, repo_id: str) -> KernelRepo:
        """Handle on one catalog repository."""
        return open_kernel_repo(self.root, repo_id)


def build_catalog(root: str | os.PathLike[str]) -> Catalog:
    """Write the catalog (see ``catalog_matrix`` and docs/fixtures.md) under ``root``; deterministic shas."""
    root = Path(root)
    set_org_trust(root, "kernels-community", True)
    set_org_trust(root, "someone", False)
    matrix = catalog_matrix()
    cat = Catalog(root=root)
    fa2 = create_kernel_repo(
        root,
        cat.flash_attn2,
        matrix[cat.flash_attn2],
        kind="attention",
        annotated_tags={"v1.0.0": "v1"},
        upstream="https://github.com/Dao-AILab/flash-attention",
        license="BSD-3-Clause",
    )
    # A later re-upload of some v1 builds: v1's head moves away from the v1.0.0 tag.
    fa2.move_branch("v1", [v for v in _FA2_V1 if "cu126" in v])
    create_kernel_repo(root, cat.activation, matrix[cat.activation], kind="activation", tags={"v2.0.0": "v2"})
    create_kernel_repo(root, cat.universal, matrix[cat.universal], kind="layernorm")
    create_kernel_repo(root, cat.v0_only, matrix[cat.v0_only], kind="attention")
    create_kernel_repo(
        root,
        cat.dependent,
        matrix[cat.dependent],
        kind="attention",
        kernel_depends={
            "v1": [{"repo-id": cat.activation, "version": 1}],
            "v2": [{"repo-id": cat.activation, "version": 2}],
        },
    )
    create_kernel_repo(root, cat.untrusted, matrix[cat.untrusted], kind="activation", license="MIT")
    create_kernel_repo(root, cat.newest_without_cpu, matrix[cat.newest_without_cpu], kind="rotary")
    create_kernel_repo(
        root, cat.gqa_backward_bug, matrix[cat.gqa_backward_bug], kind="attention", kinds={"v3": "attention-gqa-bug"}
    )
    return cat


def build_benchmark_catalog(
    root: str | os.PathLike[str], kernels: int = 20, versions: int = 4, variants: int = 26
) -> list[str]:
    """``kernels`` repos ``kernels-bench/kernel-NN`` (trusted org) with branches ``v1..v<versions>``.

    Each branch has ``variants`` variants (the standard matrix of the last torch versions, extended with older
    torch versions when more are asked); the CPU build of this machine is always included. Returns the repo ids.
    """
    root = Path(root)
    set_org_trust(root, "kernels-bench", True)
    torch_versions = ["2.13", "2.12", "2.11", "2.10", "2.9", "2.8", "2.7"]
    pool: list[str] = []
    for i in range(2, len(torch_versions) + 1):
        pool = standard_variants(tuple(reversed(torch_versions[:i])))
        if len(pool) >= variants:
            break
    if len(pool) < variants:
        pool += [f"torch-{b}" for b in ("cpu", "cuda", "rocm", "xpu", "metal")]
    chosen = [CPU_VARIANT, *[v for v in pool if v != CPU_VARIANT]][: max(1, variants)]
    repo_ids = [f"kernels-bench/kernel-{i:02d}" for i in range(kernels)]
    branches = {f"v{n}": chosen for n in range(1, versions + 1)}

    def make(idx_repo: tuple[int, str]) -> None:
        idx, repo_id = idx_repo
        create_kernel_repo(root, repo_id, branches, kind=KINDS[idx % len(KINDS)], trusted=None)

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool_exec:
        list(pool_exec.map(make, enumerate(repo_ids)))
    return repo_ids
