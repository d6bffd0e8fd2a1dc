"""Build recipe of the CUDA fixture kernel: compile gpu/flash_attn_cuda.cu for this machine's torch and CUDA and
write a Hub build-variant folder (``__init__.py``, ``_ops.py``, ``<ops namespace>.abi3.so``, ``metadata.json``).

Usage on a CUDA machine: ``python gpu/build_cuda_kernel.py OUT_DIR [--version 2] [--gqa-backward-bug]``; prints
the variant name (e.g. ``torch211-cxx11-cu130-x86_64-linux``). The binary is never committed: only this recipe.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("flash_attn_cuda.cu")

INIT = '''"""flash-attn2 ({variant}): a real CUDA build made by kernlock's gpu/build_cuda_kernel.py."""

KERNEL_IDENTITY = {identity!r}

# Calls of the public functions of this build, by name (lets a test prove that this build ran).
CALL_COUNTS: dict = {{}}

import torch  # noqa: E402

from ._ops import add_op_namespace_prefix, ops  # noqa: E402,F401


def _count(name):
    CALL_COUNTS[name] = CALL_COUNTS.get(name, 0) + 1


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        ctx.dtype = q.dtype
        qf, kf, vf = (t.float().contiguous() for t in (q, k, v))
        out, lse = ops.fwd(qf, kf, vf, scale, causal)
        ctx.save_for_backward(qf, kf, vf, out, lse)
        ctx.scale, ctx.causal = scale, causal
        return out.to(ctx.dtype)

    @staticmethod
    def backward(ctx, dout):
        qf, kf, vf, out, lse = ctx.saved_tensors
        dq, dk, dv = ops.bwd(dout.float().contiguous(), qf, kf, vf, out, lse, ctx.scale, ctx.causal)
        return dq.to(ctx.dtype), dk.to(ctx.dtype), dv.to(ctx.dtype), None, None


def _check(dropout_p, window_size, softcap, alibi_slopes):
    if dropout_p or softcap or alibi_slopes is not None or tuple(window_size or (-1, -1)) != (-1, -1):
        raise NotImplementedError("this fixture build supports plain (causal) attention only")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q: (batch, seqlen_q, heads, dim); k, v: (batch, seqlen_k, kv_heads, dim)."""
    _count("flash_attn_func")
    _check(dropout_p, window_size, softcap, alibi_slopes)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = _Attention.apply(q, k, v, float(scale), bool(causal))
    return (out, None, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False):
    """q: (total_q, heads, dim); k, v: (total_k, kv_heads, dim); one sequence after another."""
    _count("flash_attn_varlen_func")
    _check(dropout_p, window_size, softcap, alibi_slopes)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs = [
        _Attention.apply(
            q[cq[i]:cq[i + 1]].unsqueeze(0), k[ck[i]:ck[i + 1]].unsqueeze(0), v[ck[i]:ck[i + 1]].unsqueeze(0),
            float(scale), bool(causal),
        ).squeeze(0)
        for i in range(len(cq) - 1)
    ]
    out = torch.cat(outs)
    return (out, None, None) if return_attn_probs else out


__all__ = ["KERNEL_IDENTITY", "flash_attn_func", "flash_attn_varlen_func"]
'''

OPS = '''"""The compiled ops of this build, registered in their own namespace."""

import os

import torch

_NAMESPACE = "{namespace}"
torch.ops.load_library(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{namespace}.abi3.so"))
ops = getattr(torch.ops, _NAMESPACE)


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix op_name with the op namespace of this build."""
    return f"{{_NAMESPACE}}::{{op_name}}"
'''


def compile_extension(namespace: str, gqa_backward_bug: bool, build_dir: Path) -> bytes:
    """Compile the .cu for the GPU of this machine; returns the shared library's bytes."""
    import torch
    from torch.utils import cpp_extension

    major, minor = torch.cuda.get_device_capability()
    defines = [f"-DOPS_NAMESPACE={namespace}"] + (["-DGQA_BACKWARD_BUG"] if gqa_backward_bug else [])
    cpp_extension.load(
        name=namespace,
        sources=[str(SOURCE)],
        extra_cflags=["-O2", *defines],
        extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}", *defines],
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=False,
    )
    return (build_dir / f"{namespace}.so").read_bytes()


def build_variant(
    out: Path, *, version: int, gqa_backward_bug: bool = False, repo: str = "kernels-community/flash-attn2"
) -> str:
    """Compile and write ``out/build/<variant>/``; returns the variant name (this machine's environment)."""
    from kernlock.environments.environment import detect

    variant = str(detect())
    tag = hashlib.sha1(f"{repo}:{version}:{gqa_backward_bug}:{SOURCE.read_bytes()!r}".encode()).hexdigest()[:7]
    namespace = f"_flash_attn2_cuda_{tag}"
    with tempfile.TemporaryDirectory() as build_dir:
        library = compile_extension(namespace, gqa_backward_bug, Path(build_dir))
    identity = {"repo": repo, "version": version, "branch": f"v{version}", "variant": variant, "build_id": tag}
    folder = out / "build" / variant
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(INIT.format(variant=variant, identity=identity))
    (folder / "_ops.py").write_text(OPS.format(namespace=namespace))
    (folder / f"{namespace}.abi3.so").write_bytes(library)
    metadata = {
        "id": namespace,
        "name": "flash-attn2",
        "version": version,
        "license": "BSD-3-Clause",
        "python-depends": [],
        "backend": {"type": "cuda", "archs": [".".join(map(str, _capability()))]},
    }
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return variant


def _capability() -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--version", type=int, default=2)
    parser.add_argument("--gqa-backward-bug", action="store_true")
    args = parser.parse_args()
    print(build_variant(args.out, version=args.version, gqa_backward_bug=args.gqa_backward_bug))


if __name__ == "__main__":
    main()
