"""FlashAttention-2 backward in Triton, for triton_flash_attn.py beside this file.

Three kernels: a preprocess (delta = rowsum(dO * O) in float32), a dK/dV kernel (one program per key block and KV
head: it walks the query blocks of every query head of its group, recomputing P from the saved log-sum-exp, so dK and
dV are summed over the group in registers, with no atomics and no repeated K/V) and a dQ kernel (one program per
query block and head, walking the key blocks). Causal masks are aligned bottom-right, as in the forward. Usage: not
run directly; ``attention_backward`` is called by ``FlashAttention.backward``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def configs(shapes: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    """Autotune configurations from (BLOCK_M, BLOCK_N, num_warps, num_stages); the first one is the default."""
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in shapes]


def autotune_enabled() -> bool:
    """Whether block sizes are autotuned (``KERNLOCK_FA_AUTOTUNE``, on unless ``0``)."""
    return os.environ.get("KERNLOCK_FA_AUTOTUNE", "1") != "0"


def launch(
    plain: triton.JITFunction, tuned: triton.runtime.Autotuner, config: triton.Config, grid, *args, **constexprs
) -> None:
    """Launch a kernel through its autotuner, or with ``config`` when autotuning is off."""
    if autotune_enabled():
        tuned[grid](*args, **constexprs)
    else:
        plain[grid](*args, **constexprs, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


def strides(t: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    """(batch, seq, head) strides of a (b, s, h, d) tensor, or of a packed (total, h, d) one (batch stride 0)."""
    return (0, t.stride(0), t.stride(1)) if varlen else (t.stride(0), t.stride(1), t.stride(2))


DKDV_CONFIGS = configs([(16, 128, 8, 2), (32, 128, 8, 2), (16, 64, 8, 2)])
DQ_CONFIGS = configs([(128, 64, 8, 2), (128, 32, 8, 3), (64, 64, 4, 3)])
PRE_BLOCK = 64


@triton.jit
def sequence_bounds(CU_Q, CU_K, b, seqlen_q, seqlen_k, IS_VARLEN: tl.constexpr):
    """Where batch entry ``b``'s queries and keys start, and how many there are: packed sequences (varlen) read
    them from the cumulative lengths ``CU_Q``/``CU_K``; a dense batch starts each at 0 with the lengths given."""
    if IS_VARLEN:
        q_start = tl.load(CU_Q + b).to(tl.int64)
        seqlen_q = (tl.load(CU_Q + b + 1) - q_start).to(tl.int32)
        k_start = tl.load(CU_K + b).to(tl.int64)
        seqlen_k = (tl.load(CU_K + b + 1) - k_start).to(tl.int32)
    else:
        q_start = 0
        k_start = 0
    return q_start, seqlen_q, k_start, seqlen_k


@triton.jit(do_not_specialize=["seqlen_q", "H"])
def _bwd_preprocess(
    Out,
    DO,
    DELTA,
    CU_Q,
    stride_ob,
    stride_os,
    stride_oh,
    stride_db,
    stride_ds,
    stride_dh,
    stride_lb,
    stride_lh,
    seqlen_q,
    H,
    IS_VARLEN: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    b = off_hz // H
    h = off_hz % H
    q_start, seqlen_q, _, _ = sequence_bounds(CU_Q, CU_Q, b, seqlen_q, seqlen_q, IS_VARLEN)
    if start_m * BLOCK_M >= seqlen_q:
        return
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q
    b64 = b.to(tl.int64)
    o = tl.load(
        Out + b64 * stride_ob + (q_start + offs_m)[:, None] * stride_os + h * stride_oh + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    do = tl.load(
        DO + b64 * stride_db + (q_start + offs_m)[:, None] * stride_ds + h * stride_dh + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(DELTA + b64 * stride_lb + h * stride_lh + q_start + offs_m, delta, mask=row_ok)


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "H_KV", "GROUP"])
def _bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
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
    stride_dob,
    stride_dos,
    stride_doh,
    stride_lb,
    stride_lh,
    seqlen_q,
    seqlen_k,
    sm_scale,
    H_KV,
    GROUP,
    CAUSAL: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PREC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    start_n = tl.program_id(0)
    off_hz = tl.program_id(1)
    b = off_hz // H_KV
    kvh = off_hz % H_KV
    q_start, seqlen_q, k_start, seqlen_k = sequence_bounds(CU_Q, CU_K, b, seqlen_q, seqlen_k, IS_VARLEN)
    if start_n * BLOCK_N >= seqlen_k:
        return
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < seqlen_k
    b64 = b.to(tl.int64)
    k_off = b64 * stride_kb + (k_start + offs_n)[:, None] * stride_ks + kvh * stride_kh + offs_d[None, :]
    v_off = b64 * stride_vb + (k_start + offs_n)[:, None] * stride_vs + kvh * stride_vh + offs_d[None, :]
    k = tl.load(K + k_off, mask=col_ok[:, None], other=0.0)
    v = tl.load(V + v_off, mask=col_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    causal_off = seqlen_k - seqlen_q
    if CAUSAL:  # rows below lo see no key of this block, rows from mid on see all of them
        lo = tl.maximum(start_n * BLOCK_N - causal_off, 0) // BLOCK_M * BLOCK_M
        mid = tl.maximum(tl.cdiv(tl.maximum(start_n * BLOCK_N + BLOCK_N - 1 - causal_off, 0), BLOCK_M) * BLOCK_M, lo)
    else:
        lo = 0
        mid = 0
    for g in range(GROUP):
        h = kvh * GROUP + g
        q_base = Q + b64 * stride_qb + q_start * stride_qs + h * stride_qh
        do_base = DO + b64 * stride_dob + q_start * stride_dos + h * stride_doh
        lse_base = LSE + b64 * stride_lb + h * stride_lh + q_start
        delta_base = DELTA + b64 * stride_lb + h * stride_lh + q_start
        for stage in tl.static_range(2):  # 0: the diagonal blocks (causal only); 1: the rows that see every key
            if stage == 0:
                lo_m = lo
                hi_m = tl.minimum(mid, seqlen_q)
            else:
                lo_m = mid
                hi_m = seqlen_q
            for start_m in range(lo_m, hi_m, BLOCK_M):
                offs_m = start_m + tl.arange(0, BLOCK_M)
                row_ok = offs_m < seqlen_q
                q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
                lse = tl.load(lse_base + offs_m, mask=row_ok, other=float("inf"))  # padding rows: P = 0
                p_t = tl.math.exp2(tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale - lse[None, :])
                if stage == 0:
                    p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, p_t, 0.0)
                do = tl.load(do_base + offs_m[:, None] * stride_dos + offs_d[None, :], mask=row_ok[:, None], other=0.0)
                dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PREC)
                delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
                ds_t = p_t * (tl.dot(v, tl.trans(do), input_precision=PREC) - delta[None, :])
                dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=PREC)
    dk *= sm_scale
    rows = (k_start + offs_n)[:, None]  # dK and dV have the strides of K and V
    dk_ptrs = DK + b64 * stride_kb + rows * stride_ks + kvh * stride_kh + offs_d[None, :]
    dv_ptrs = DV + b64 * stride_vb + rows * stride_vs + kvh * stride_vh + offs_d[None, :]
    tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "H", "GROUP"])
def _bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
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
    stride_dob,
    stride_dos,
    stride_doh,
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
    row_ok = offs_m < seqlen_q
    b64 = b.to(tl.int64)
    rows = (q_start + offs_m)[:, None]
    q = tl.load(
        Q + b64 * stride_qb + rows * stride_qs + h * stride_qh + offs_d[None, :], mask=row_ok[:, None], other=0.0
    )
    do = tl.load(
        DO + b64 * stride_dob + rows * stride_dos + h * stride_doh + offs_d[None, :], mask=row_ok[:, None], other=0.0
    )
    lse = tl.load(LSE + b64 * stride_lb + h * stride_lh + q_start + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + b64 * stride_lb + h * stride_lh + q_start + offs_m, mask=row_ok, other=0.0)
    k_ptrs = K + b64 * stride_kb + k_start * stride_ks + kvh * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :]
    v_ptrs = V + b64 * stride_vb + k_start * stride_vs + kvh * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :]
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    causal_off = seqlen_k - seqlen_q
    if CAUSAL:
        full_end = tl.maximum(tl.minimum(seqlen_k, start_m * BLOCK_M + causal_off + 1), 0)
        end = tl.maximum(tl.minimum(seqlen_k, start_m * BLOCK_M + BLOCK_M + causal_off), 0)
    else:
        full_end = seqlen_k
        end = seqlen_k
    full_end = full_end // BLOCK_N * BLOCK_N
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
            else:  # keys past the end load as zeros: their dS @ K adds nothing, P is masked anyway
                k = tl.load(k_ptrs + start_n * stride_ks, mask=cols[:, None] < seqlen_k, other=0.0)
                v = tl.load(v_ptrs + start_n * stride_vs, mask=cols[:, None] < seqlen_k, other=0.0)
            p = tl.math.exp2(tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale - lse[:, None])
            if stage == 1:
                keep = cols[None, :] < seqlen_k
                if CAUSAL:
                    keep = keep & (cols[None, :] <= offs_m[:, None] + causal_off)
                p = tl.where(keep, p, 0.0)
            ds = p * (tl.dot(do, tl.trans(v), input_precision=PREC) - delta[:, None])
            dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PREC)
    dq *= sm_scale
    tl.store(
        DQ + b64 * stride_qb + rows * stride_qs + h * stride_qh + offs_d[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=row_ok[:, None],
    )


_TUNE_KEY = ["HEAD_DIM", "CAUSAL", "IS_VARLEN"]
_DKDV_TUNED = triton.autotune(configs=DKDV_CONFIGS, key=_TUNE_KEY)(_bwd_dkdv)
_DQ_TUNED = triton.autotune(configs=DQ_CONFIGS, key=_TUNE_KEY)(_bwd_dq)


def attention_backward(
    dout, q, k, v, out, lse, scale: float, causal: bool, cu_q=None, cu_k=None, max_q: int = 0, max_k: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (the dtypes and strides of q, k, v) from the saved tensors of the forward."""
    varlen = cu_q is not None
    heads, kv_heads, dim = q.shape[-2], k.shape[-2], q.shape[-1]
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)  # q, k, v are dense: same strides
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if varlen:
        batch, seqlen_q, seqlen_k = cu_q.numel() - 1, max_q, max_k
        lse_strides = (0, lse.stride(0))
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
        lse_strides = (lse.stride(0), lse.stride(1))
    delta = torch.empty_like(lse)
    grid = (triton.cdiv(seqlen_q, PRE_BLOCK), batch * heads)
    pre = (*strides(out, varlen), *strides(dout, varlen), *lse_strides, seqlen_q, heads)
    _bwd_preprocess[grid](out, dout, delta, cu_q, *pre, IS_VARLEN=varlen, HEAD_DIM=dim, BLOCK_M=PRE_BLOCK)
    saved = (q, k, v, dout, lse, delta)
    common = (*strides(q, varlen), *strides(k, varlen), *strides(v, varlen), *strides(dout, varlen), *lse_strides)
    sizes = (seqlen_q, seqlen_k, scale)
    prec = "ieee" if q.dtype == torch.float32 else "tf32"
    flags = {"CAUSAL": causal, "IS_VARLEN": varlen, "HEAD_DIM": dim, "PREC": prec}

    def grid_kv(meta):
        return (triton.cdiv(seqlen_k, meta["BLOCK_N"]), batch * kv_heads)

    def grid_q(meta):
        return (triton.cdiv(seqlen_q, meta["BLOCK_M"]), batch * heads)

    group = heads // kv_heads
    tuned, config = _DKDV_TUNED, DKDV_CONFIGS[0]
    launch(_bwd_dkdv, tuned, config, grid_kv, *saved, dk, dv, cu_q, cu_k, *common, *sizes, kv_heads, group, **flags)
    tuned, config = _DQ_TUNED, DQ_CONFIGS[0]
    launch(_bwd_dq, tuned, config, grid_q, *saved, dq, cu_q, cu_k, *common, *sizes, heads, group, **flags)
    return dq, dk, dv
