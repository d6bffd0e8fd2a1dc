// A small attention op in CUDA C++ for kernlock's GPU end-to-end test: forward and backward, causal masking
// (bottom-right aligned, as flash-attn), grouped-query attention (fewer kv heads than query heads).
//
// Layout as flash-attn: q (batch, seqlen_q, heads, dim), k/v (batch, seqlen_k, kv_heads, dim), float32,
// contiguous. One thread block per (query row, head, batch); scores live in shared memory, so seqlen_k is
// bounded by the shared memory of a block (plenty for the tiny models of the test).
//
// Registered as torch ops in their own namespace (OPS_NAMESPACE, given at compile time), as Hub kernel builds
// are: `torch.ops.<namespace>.fwd` / `.bwd`. Compiled with -DGQA_BACKWARD_BUG it reproduces a regression like
// kernels-community#1085: the backward pass maps query heads to the wrong kv heads under grouped-query attention
// (right for plain multi-head attention, silently wrong gradients for GQA).

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#ifndef OPS_NAMESPACE
#error "compile with -DOPS_NAMESPACE=<unique op namespace>"
#endif

namespace {

constexpr int kThreads = 128;

__device__ inline bool masked(int i, int j, int seqlen_q, int seqlen_k, bool causal) {
  return causal && j > i + (seqlen_k - seqlen_q);
}

__device__ float block_reduce_max(float value, float* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
    __syncthreads();
  }
  float result = scratch[0];
  __syncthreads();
  return result;
}

__device__ float block_reduce_sum(float value, float* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  float result = scratch[0];
  __syncthreads();
  return result;
}

__global__ void attention_fwd(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                              float* __restrict__ out, float* __restrict__ lse, int seqlen_q, int seqlen_k,
                              int heads, int kv_heads, int dim, float scale, bool causal) {
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (heads / kv_heads);
  extern __shared__ float shared[];
  float* p = shared;                   // seqlen_k scores, then probabilities
  float* scratch = shared + seqlen_k;  // kThreads floats for reductions
  const float* qi = q + ((static_cast<long>(b) * seqlen_q + i) * heads + h) * dim;

  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < seqlen_k; j += blockDim.x) {
    float s = -INFINITY;
    if (!masked(i, j, seqlen_q, seqlen_k, causal)) {
      const float* kj = k + ((static_cast<long>(b) * seqlen_k + j) * kv_heads + hk) * dim;
      s = 0.f;
      for (int d = 0; d < dim; ++d) s += qi[d] * kj[d];
      s *= scale;
    }
    p[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float row_max = block_reduce_max(local_max, scratch);
  float local_sum = 0.f;
  for (int j = threadIdx.x; j < seqlen_k; j += blockDim.x) {
    const float e = (row_max == -INFINITY || p[j] == -INFINITY) ? 0.f : expf(p[j] - row_max);
    p[j] = e;
    local_sum += e;
  }
  const float row_sum = block_reduce_sum(local_sum, scratch);
  const float inv = row_sum > 0.f ? 1.f / row_sum : 0.f;
  for (int j = threadIdx.x; j < seqlen_k; j += blockDim.x) p[j] *= inv;
  __syncthreads();
  if (threadIdx.x == 0) lse[(static_cast<long>(b) * heads + h) * seqlen_q + i] = row_sum > 0.f ? row_max + logf(row_sum) : -INFINITY;
  float* oi = out + ((static_cast<long>(b) * seqlen_q + i) * heads + h) * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < seqlen_k; ++j) acc += p[j] * v[((static_cast<long>(b) * seqlen_k + j) * kv_heads + hk) * dim + d];
    oi[d] = acc;
  }
}

__global__ void attention_bwd(const float* __restrict__ dout, const float* __restrict__ q, const float* __restrict__ k,
                              const float* __restrict__ v, const float* __restrict__ out, const float* __restrict__ lse,
                              float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv, int seqlen_q,
                              int seqlen_k, int heads, int kv_heads, int dim, float scale, bool causal) {
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
#ifdef GQA_BACKWARD_BUG
  const int hk = h % kv_heads;  // the regression: interleaved instead of grouped heads
#else
  const int hk = h / (heads / kv_heads);
#endif
  extern __shared__ float shared[];
  float* p = shared;                   // probabilities
  float* ds = shared + seqlen_k;       // d(scores)
  float* scratch = shared + 2 * seqlen_k;
  const long row = (static_cast<long>(b) * seqlen_q + i) * heads + h;
  const float* qi = q + row * dim;
  const float* doi = dout + row * dim;
  const float* oi = out + row * dim;
  const float row_lse = lse[(static_cast<long>(b) * heads + h) * seqlen_q + i];

  float local = 0.f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) local += doi[d] * oi[d];
  const float delta = block_reduce_sum(local, scratch);  // rowsum(dO * O)

  for (int j = threadIdx.x; j < seqlen_k; j += blockDim.x) {
    float prob = 0.f, dp = 0.f;
    if (!masked(i, j, seqlen_q, seqlen_k, causal) && row_lse != -INFINITY) {
      const long kv = ((static_cast<long>(b) * seqlen_k + j) * kv_heads + hk) * dim;
      float s = 0.f;
      for (int d = 0; d < dim; ++d) {
        s += qi[d] * k[kv + d];
        dp += doi[d] * v[kv + d];
      }
      prob = expf(s * scale - row_lse);
    }
    p[j] = prob;
    ds[j] = prob * (dp - delta);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < seqlen_k; ++j) acc += ds[j] * k[((static_cast<long>(b) * seqlen_k + j) * kv_heads + hk) * dim + d];
    dq[row * dim + d] = acc * scale;
  }
  // Every query head of a kv group adds into the same kv rows.
  for (int idx = threadIdx.x; idx < seqlen_k * dim; idx += blockDim.x) {
    const int j = idx / dim, d = idx % dim;
    const long kv = ((static_cast<long>(b) * seqlen_k + j) * kv_heads + hk) * dim + d;
    if (ds[j] != 0.f) atomicAdd(dk + kv, ds[j] * qi[d] * scale);
    if (p[j] != 0.f) atomicAdd(dv + kv, p[j] * doi[d]);
  }
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == at::kFloat && t->is_contiguous() && t->dim() == 4,
                "flash-attn (kernlock GPU fixture): expected contiguous float32 CUDA tensors (batch, seqlen, heads, dim)");
  }
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have the same shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "q and k must agree on batch and head dim");
  TORCH_CHECK(q.size(2) % k.size(2) == 0, "query heads must be a multiple of kv heads");
}

size_t shared_bytes(int64_t seqlen_k, int arrays) { return (arrays * seqlen_k + kThreads) * sizeof(float); }

std::vector<at::Tensor> mha_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                bool causal) {
  check_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t batch = q.size(0), seqlen_q = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t seqlen_k = k.size(1), kv_heads = k.size(2);
  auto out = at::empty_like(q);
  auto lse = at::empty({batch, heads, seqlen_q}, q.options());
  const dim3 grid(seqlen_q, heads, batch);
  attention_fwd<<<grid, kThreads, shared_bytes(seqlen_k, 1), at::cuda::getCurrentCUDAStream()>>>(
      q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(), lse.data_ptr<float>(),
      seqlen_q, seqlen_k, heads, kv_heads, dim, static_cast<float>(scale), causal);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, lse};
}

std::vector<at::Tensor> mha_bwd(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& out, const at::Tensor& lse, double scale, bool causal) {
  check_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t batch = q.size(0), seqlen_q = q.size(1), heads = q.size(2), dim = q.size(3);
  const int64_t seqlen_k = k.size(1), kv_heads = k.size(2);
  auto dq = at::empty_like(q);
  auto dk = at::zeros_like(k);
  auto dv = at::zeros_like(v);
  auto dout_c = dout.contiguous();
  const dim3 grid(seqlen_q, heads, batch);
  attention_bwd<<<grid, kThreads, shared_bytes(seqlen_k, 2), at::cuda::getCurrentCUDAStream()>>>(
      dout_c.data_ptr<float>(), q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
      lse.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>(), seqlen_q, seqlen_k,
      heads, kv_heads, dim, static_cast<float>(scale), causal);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dq, dk, dv};
}

}  // namespace

#define KERNLOCK_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define KERNLOCK_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

KERNLOCK_LIBRARY(OPS_NAMESPACE, m) {
  m.def("fwd(Tensor q, Tensor k, Tensor v, float scale, bool causal) -> Tensor[]");
  m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, float scale, bool causal) -> Tensor[]");
}

KERNLOCK_LIBRARY_IMPL(OPS_NAMESPACE, CUDA, m) {
  m.impl("fwd", &mha_fwd);
  m.impl("bwd", &mha_bwd);
}
