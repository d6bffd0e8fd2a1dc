"""FlashAttention-2 in Triton: forward kernel, autograd Function and the flash-attn 2 API of a Hub kernel.

``flash_attn_func(q, k, v, ...)`` takes q (batch, seqlen_q, heads, dim) and k, v (batch, seqlen_k, kv_heads, dim);
``flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)`` takes sequences
packed one after another, q (total_q, heads, dim). bf16 and fp16 (fp32 accumulation; float32 inputs too, through
exact and slow "ieee" dots, for `kernlock check`'s float32 cases), any head dim up to 256 (not a
power of two: padded with zeros), grouped-query attention (kv_heads divides heads; K and V are never repeated),
causal masks aligned bottom-right like flash-attn when seqlen_q != seqlen_k (a query row that sees no key gives
zeros). Dropout, sliding windows, softcap and ALiBi raise NotImplementedError. The backward pass is in
triton_flash_attn_bwd.py beside this file. Block sizes are autotuned on first call for each head dim, mask and dtype
(``KERNLOCK_FA_AUTOTUNE=0``: the first configuration, no tuning). Usage: ``python gpu/triton_demo.py`` runs it on a
GPU; ``TRITON_INTERPRET=1`` runs it on the CPU (slowly: tiny shapes).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

try:
    from .triton_flash_attn_bwd import attention_backward, configs, launch, sequence_bounds, strides
except ImportError:  # imported as a top-level module (gpu/ on sys.path)
    from triton_flash_attn_bwd import attention_backward, configs, launch, sequence_bounds, strides

FWD_CONFIGS = configs([(128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3)])


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "H", "GROUP"])
def _attn_fwd(
    Q,
    K,
    V,
    Out,
    LSE,
    CU_Q,
    CU_K,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_ob,
    stride_os,
    stride_oh,
    stride_lb,
    stride_lh,
    seqlen_q,
    seqlen_k,
    sm_scale,
    H,
    GROUP,
    CAUSAL: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PREC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    b = off_hz // H
    h = off_hz % H
    kvh = h // GROUP
    q_start, seqlen_q, k_start, seqlen_k = sequence_bounds(CU_Q, CU_K, b, seqlen_q, seqlen_k, IS_VARLEN)
    if start_m * BLOCK_M >= seqlen_q:
        return
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    b64 = b.to(tl.int64)
    q_base = Q + b64 * stride_qb + q_start * stride_qs + h * stride_qh
    k_ptrs = K + b64 * stride_kb + k_start * stride_ks + kvh * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :]
    v_ptrs = V + b64 * stride_vb + k_start * stride_vs + kvh * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :]
    row_ok = offs_m < seqlen_q
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    causal_off = seqlen_k - seqlen_q  # bottom-right: key j is seen by query i when j <= i + causal_off
    if CAUSAL:
        full_end = tl.maximum(tl.minimum(seqlen_k, start_m * BLOCK_M + causal_off + 1), 0)
        end = tl.maximum(tl.minimum(seqlen_k, start_m * BLOCK_M + BLOCK_M + causal_off), 0)
    else:
        full_end = seqlen_k
        end = seqlen_k
    full_end = full_end // BLOCK_N * BLOCK_N  # blocks below: no mask at all
    for stage in tl.static_range(2):  # 0: key blocks that need no mask; 1: the diagonal blocks and the tail
        if stage == 0:
            lo = 0
            hi = full_end
        else:
            lo = full_end
            hi = end
        for start_n in range(lo, hi, BLOCK_N):
            cols = start_n + offs_n
            if stage == 0:
                k = tl.load(k_ptrs + start_n * stride_ks)
                v = tl.load(v_ptrs + start_n * stride_vs)
            else:
                k = tl.load(k_ptrs + start_n * stride_ks, mask=cols[:, None] < seqlen_k, other=0.0)
                v = tl.load(v_ptrs + start_n * stride_vs, mask=cols[:, None] < seqlen_k, other=0.0)
            qk = tl.dot(q, tl.trans(k), input_precision=PREC)
            if stage == 0:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                m_safe = m_ij
                p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
            else:
                keep = cols[None, :] < seqlen_k
                if CAUSAL:
                    keep = keep & (cols[None, :] <= offs_m[:, None] + causal_off)
                qk = tl.where(keep, qk * qk_scale, float("-inf"))
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)  # a row that sees no key yet
                p = tl.math.exp2(qk - m_safe[:, None])
            alpha = tl.math.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PREC)
            m_i = m_ij
    empty = l_i == 0.0
    acc = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(l_i))  # base 2, in units of qk * sm_scale * log2(e)
    o_ptrs = Out + b64 * stride_ob + q_start * stride_os + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + b64 * stride_lb + h * stride_lh + q_start + offs_m, lse, mask=row_ok)


_FWD_TUNED = triton.autotune(configs=FWD_CONFIGS, key=["HEAD_DIM", "CAUSAL", "IS_VARLEN"])(_attn_fwd)


def attention_forward(q, k, v, scale: float, causal: bool, cu_q=None, cu_k=None, max_q: int = 0, max_k: int = 0):
    """Output (like q) and the base-2 log-sum-exp of each row (float32; (b, h, s_q), or (h, total_q) varlen)."""
    varlen = cu_q is not None
    heads, dim = q.shape[-2], q.shape[-1]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if varlen:
        batch, seqlen_q, seqlen_k = cu_q.numel() - 1, max_q, max_k
        lse = torch.empty((heads, q.shape[0]), dtype=torch.float32, device=q.device)
        lse_strides = (0, lse.stride(0))
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
        lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
        lse_strides = (lse.stride(0), lse.stride(1))
    if out.numel() == 0:
        return out, lse.fill_(float("inf"))

    def grid(meta):
        return (triton.cdiv(seqlen_q, meta["BLOCK_M"]), batch * heads)

    launch(
        _attn_fwd,
        _FWD_TUNED,
        FWD_CONFIGS[0],
        grid,
        q,
        k,
        v,
        out,
        lse,
        cu_q,
        cu_k,
        *strides(q, varlen),
        *strides(k, varlen),
        *strides(v, varlen),
        *strides(out, varlen),
        *lse_strides,
        seqlen_q,
        seqlen_k,
        scale,
        heads,
        heads // k.shape[-2],
        CAUSAL=causal,
        IS_VARLEN=varlen,
        HEAD_DIM=dim,
        PREC="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out, lse


class FlashAttention(torch.autograd.Function):
    """Autograd of the Triton kernels: saves q, k, v, the output and the log-sum-exp (no copies of q, k, v)."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, cu_q, cu_k, max_q, max_k):
        out, lse = attention_forward(q, k, v, scale, causal, cu_q, cu_k, max_q, max_k)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.scale, ctx.causal, ctx.max_q, ctx.max_k = scale, causal, max_q, max_k
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = attention_backward(
            dout, q, k, v, out, lse, ctx.scale, ctx.causal, cu_q, cu_k, ctx.max_q, ctx.max_k
        )
        return dq, dk, dv, None, None, None, None, None, None


def _check(q, k, v, dropout_p, window_size, softcap, alibi_slopes) -> None:
    if dropout_p or softcap or alibi_slopes is not None or tuple(window_size or (-1, -1)) != (-1, -1):
        raise NotImplementedError(
            "this Triton build supports plain (causal) attention only: no dropout, sliding window, softcap or ALiBi"
        )
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise NotImplementedError(f"this Triton build supports float16, bfloat16 and float32, not {q.dtype}")
    if q.shape[-1] > 256 or k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        raise NotImplementedError("this Triton build needs q, k and v of one head dim, at most 256")
    if q.shape[-2] % k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"the number of heads ({q.shape[-2]}) must be a multiple of the KV heads ({k.shape[-2]})")


def _dense(t: torch.Tensor) -> bool:
    """Last dim contiguous and no gaps in memory (a permutation of a contiguous tensor): empty_like keeps its strides,
    so the gradients come back in the layout of the inputs (a transposed (b, h, s, d) view stays one)."""
    expected = 1
    for i in sorted(range(t.dim()), key=lambda i: (t.stride(i), -i)):
        if t.shape[i] != 1 and t.stride(i) != expected:
            return False
        expected *= t.shape[i]
    return t.stride(-1) == 1 or t.shape[-1] == 1


def _run(q, k, v, softmax_scale, causal, cu_q=None, cu_k=None, max_q=0, max_k=0):
    """Pads the head dim to a power of two (at least 16), makes q, k, v dense, applies the Function."""
    dim = q.shape[-1]
    scale = float(softmax_scale) if softmax_scale is not None else dim**-0.5
    padded = max(16, 1 << (dim - 1).bit_length())
    q, k, v = (t if _dense(t) else t.contiguous() for t in (q, k, v))
    if padded != dim:
        q, k, v = (torch.nn.functional.pad(t, (0, padded - dim)) for t in (q, k, v))
    out, lse = FlashAttention.apply(q, k, v, scale, bool(causal), cu_q, cu_k, int(max_q), int(max_k))
    return (out[..., :dim] if padded != dim else out), lse


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
    """q: (batch, seqlen_q, heads, dim); k, v: (batch, seqlen_k, kv_heads, dim). Always deterministic (no atomics).

    With ``return_attn_probs``: (out, softmax_lse (batch, heads, seqlen_q) natural log, None)."""
    _check(q, k, v, dropout_p, window_size, softcap, alibi_slopes)
    out, lse = _run(q, k, v, softmax_scale, causal)
    return (out, lse * math.log(2.0), None) if return_attn_probs else out


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
    """q: (total_q, heads, dim); k, v: (total_k, kv_heads, dim); sequence i is rows cu_seqlens[i]:cu_seqlens[i+1].

    With ``return_attn_probs``: (out, softmax_lse (heads, total_q) natural log, None)."""
    _check(q, k, v, dropout_p, window_size, softcap, alibi_slopes)
    cu_q, cu_k = (c.to(device=q.device, dtype=torch.int32).contiguous() for c in (cu_seqlens_q, cu_seqlens_k))
    out, lse = _run(q, k, v, softmax_scale, causal, cu_q, cu_k, int(max_seqlen_q), int(max_seqlen_k))
    return (out, lse * math.log(2.0), None) if return_attn_probs else out


__all__ = ["FlashAttention", "flash_attn_func", "flash_attn_varlen_func"]
