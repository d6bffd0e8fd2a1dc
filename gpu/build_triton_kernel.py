"""Build recipe of the Triton flash-attention build: writes a Hub build-variant folder (``__init__.py``,
``triton_flash_attn.py``, ``triton_flash_attn_bwd.py``, ``metadata.json``) for this machine's torch and CUDA.

No compiled library: Triton JIT-compiles the kernels at their first call (for the GPU it runs on, sm_80 and newer).
The variant name is the one gpu/build_cuda_kernel.py prints on the same machine (e.g.
``torch211-cxx11-cu130-x86_64-linux``), so this build can be served at the same place. ``__init__.py`` has
``KERNEL_IDENTITY`` and ``CALL_COUNTS`` like the CUDA fixture, so a test can prove which build ran.

Usage: ``python gpu/build_triton_kernel.py OUT_DIR [--version 2]`` (prints the variant name); as a library:
``from build_triton_kernel import build_variant; build_variant(Path(out), version=2)`` (gpu/ on sys.path), or
``serve_on_hub(hub_root)`` to put it on the local Hub as flash-attn2 v2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "triton_flash_attn.py", HERE / "triton_flash_attn_bwd.py")
#: Base CUDA archs (same major, same or newer minor) Triton 3.6 compiles these kernels for: sm_80 and newer.
ARCHS = ["8.0", "9.0", "10.0", "12.0"]

INIT = '''"""flash-attn2 ({variant}): a Triton FlashAttention-2 build made by kernlock's gpu/build_triton_kernel.py.

The kernels are JIT-compiled by Triton at their first call; see triton_flash_attn.py beside this file.
"""

KERNEL_IDENTITY = {identity!r}

# Calls of the public functions of this build, by name (lets a test prove that this build ran).
CALL_COUNTS: dict = {{}}

from . import triton_flash_attn as _impl  # noqa: E402


def _count(name):
    CALL_COUNTS[name] = CALL_COUNTS.get(name, 0) + 1


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q: (batch, seqlen_q, heads, dim); k, v: (batch, seqlen_k, kv_heads, dim)."""
    _count("flash_attn_func")
    return _impl.flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                 deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False):
    """q: (total_q, heads, dim); k, v: (total_k, kv_heads, dim); one sequence after another."""
    _count("flash_attn_varlen_func")
    return _impl.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                        softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                        return_attn_probs)


__all__ = ["KERNEL_IDENTITY", "flash_attn_func", "flash_attn_varlen_func"]
'''


def source_tag(repo: str, version: int) -> str:
    """Seven hex digits naming this build: the repo, the version and the Triton sources."""
    digest = hashlib.sha1(f"{repo}:{version}:triton".encode())
    for source in SOURCES:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:7]


def build_variant(
    out: Path, *, version: int = 2, repo: str = "kernels-community/flash-attn2", variant: str | None = None
) -> str:
    """Write ``out/build/<variant>/``; returns the variant name (this machine's environment unless given)."""
    if variant is None:
        from kernlock.environments.environment import detect

        variant = str(detect())
    tag = source_tag(repo, version)
    identity = {
        "repo": repo,
        "version": version,
        "branch": f"v{version}",
        "variant": variant,
        "build_id": tag,
        "backend": "triton",
    }
    folder = Path(out) / "build" / variant
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(INIT.format(variant=variant, identity=identity))
    for source in SOURCES:
        (folder / source.name).write_bytes(source.read_bytes())
    metadata = {
        "id": f"_flash_attn2_triton_{tag}",
        "name": "flash-attn2",
        "version": version,
        "license": "BSD-3-Clause",
        "python-depends": [],
        "backend": {"type": "cuda", "archs": ARCHS},
    }
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return variant


def serve_on_hub(hub: Path, *, repo: str = "kernels-community/flash-attn2", version: int = 2, pad: int = 0) -> str:
    """Put this machine's Triton build on branch ``v{version}`` of ``repo`` in the local Hub at ``hub`` (beside a
    CPU build, unsigned: the GPU image has no sigstore); ``pad`` bytes of a stand-in file give it a compiled build's
    weight. Returns the variant name."""
    from kernlock.testing import create_kernel_repo

    branch = f"v{version}"
    hub_repo = create_kernel_repo(hub, repo, {branch: ["torch-cpu"]}, kind="attention", signed=False)
    folder = Path(hub).parent / "triton-build"
    variant = build_variant(folder, version=version, repo=repo)
    files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    if pad:
        files[f"build/{variant}/_flash_attn2_triton_stand_in.bin"] = os.urandom(pad)
    hub_repo.upload_files(branch, files, message="Uploaded the Triton build")
    return variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--version", type=int, default=2)
    args = parser.parse_args()
    print(build_variant(args.out, version=args.version))


if __name__ == "__main__":
    main()
