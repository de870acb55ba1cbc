// Causal self-attention's own kernels: the layout moves around cuBLAS's strided-batched GEMMs and
// the causal masked softmax, forward and backward. src/backend/cuda/attention.cpp composes them
// (it implements src/backend/cpu/attention.cpp, the oracle):
//
//   split      qkv [B, T, 3, H, hd] -> q, k, v [B·H, T, hd]
//   S = q kᵀ/√hd (GEMM)   causal_softmax_forward: per row t, P[t, s] = e^{S - lse} for s ≤ t, else 0;
//                          lse[t] = log Σ_{s≤t} e^{S[t, s]}
//   o = P v (GEMM)        heads_to_rows: o [B, H, T, hd] -> y [B, T, H·hd]
//   backward: rows_to_heads(dy), dP = do vᵀ, dv = Pᵀ do (GEMMs),
//             causal_softmax_backward: dS = P ∘ (dP - Σ_s P·dP), dq = dS k/√hd, dk = dSᵀ q/√hd (GEMMs),
//             merge_grads: dq, dk, dv -> dqkv [B, T, 3, H, hd]
// One warp per softmax row; the row sums are reduced over a fixed tree (deterministic).
#include <cfloat>

#include "common.cuh"

namespace edp::cuda::kern {
namespace {

constexpr int kRowsPerBlock = kBlock / 32;

// Moves between [B, T, G, H, hd] (G groups side by side per row) and G tensors [B, H, T, hd].
// to_heads: dst[g] <- src (split); else src[g] -> dst (merge).
// Index is uint32_t when the tensors have fewer than 2^31 elements: the four divisions per
// element are then 32-bit ones, several times cheaper than 64-bit ones.
template <typename Index>
__global__ void regroup_kernel(const float* __restrict__ rows, float* __restrict__ heads0, float* __restrict__ heads1,
                               float* __restrict__ heads2, const float* __restrict__ cheads0,
                               const float* __restrict__ cheads1, const float* __restrict__ cheads2,
                               float* __restrict__ out_rows, Index G, Index B, Index T, Index H, Index hd,
                               bool to_heads) {
  const Index n = B * T * G * H * hd, stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    Index r = i;
    const Index e = r % hd;
    r /= hd;
    const Index h = r % H;
    r /= H;
    const Index g = r % G;
    r /= G;
    const Index t = r % T, b = r / T;
    const Index j = ((b * H + h) * T + t) * hd + e;
    if (to_heads) {
      float* dst = g == 0 ? heads0 : g == 1 ? heads1 : heads2;
      dst[j] = rows[i];
    } else {
      const float* src = g == 0 ? cheads0 : g == 1 ? cheads1 : cheads2;
      out_rows[i] = src[j];
    }
  }
}

__global__ void causal_softmax_fwd_kernel(float* __restrict__ S, float* __restrict__ lse, int64_t rows, int64_t T) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // uniform per warp
  const int64_t t = row % T;
  float* r = S + row * T;
  float mx = -INFINITY;
  for (int64_t s = lane; s <= t; s += 32) mx = fmaxf(mx, r[s]);
  mx = warp_max(mx);
  float sum = 0.f;
  for (int64_t s = lane; s <= t; s += 32) sum += __expf(r[s] - mx);
  sum = warp_sum(sum);
  const float l = mx + __logf(sum);
  for (int64_t s = lane; s < T; s += 32) r[s] = s <= t ? __expf(r[s] - l) : 0.f;
  if (lane == 0) lse[row] = l;
}

__global__ void causal_softmax_bwd_kernel(const float* __restrict__ P, float* __restrict__ dP, int64_t rows,
                                          int64_t T) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float* p = P + row * T;
  float* g = dP + row * T;
  float dot = 0.f;
  for (int64_t s = lane; s < T; s += 32) dot += p[s] * g[s];
  dot = warp_sum(dot);
  for (int64_t s = lane; s < T; s += 32) g[s] = p[s] * (g[s] - dot);
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>((R + kRowsPerBlock - 1) / kRowsPerBlock); }

void regroup(const float* rows, float* h0, float* h1, float* h2, const float* c0, const float* c1, const float* c2,
             float* out_rows, int G, int64_t B, int64_t T, int64_t H, int64_t hd, bool to_heads, cudaStream_t s) {
  const int64_t n = B * T * G * H * hd;
  if (n <= 0) return;
  if (n <= static_cast<int64_t>(INT32_MAX)) {  // i + stride cannot wrap
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    regroup_kernel<uint32_t><<<grid_for(n), kBlock, 0, s>>>(rows, h0, h1, h2, c0, c1, c2, out_rows, u(G), u(B), u(T),
                                                            u(H), u(hd), to_heads);
  } else {
    regroup_kernel<int64_t><<<grid_for(n), kBlock, 0, s>>>(rows, h0, h1, h2, c0, c1, c2, out_rows, G, B, T, H, hd,
                                                           to_heads);
  }
  CUDA_CHECK_LAUNCH("regroup_kernel");
}

}  // namespace

void attention_split(const float* qkv, float* q, float* k, float* v, int64_t B, int64_t T, int64_t H, int64_t hd,
                     cudaStream_t s) {
  regroup(qkv, q, k, v, nullptr, nullptr, nullptr, nullptr, 3, B, T, H, hd, true, s);
}

void attention_merge_grads(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t B, int64_t T,
                           int64_t H, int64_t hd, cudaStream_t s) {
  regroup(nullptr, nullptr, nullptr, nullptr, dq, dk, dv, dqkv, 3, B, T, H, hd, false, s);
}

void attention_heads_to_rows(const float* o, float* y, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t s) {
  regroup(nullptr, nullptr, nullptr, nullptr, o, nullptr, nullptr, y, 1, B, T, H, hd, false, s);
}

void attention_rows_to_heads(const float* y, float* o, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t s) {
  regroup(y, o, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, B, T, H, hd, true, s);
}

void causal_softmax_forward(float* S, float* lse, int64_t BH, int64_t T, cudaStream_t s) {
  if (BH * T <= 0) return;
  causal_softmax_fwd_kernel<<<row_blocks(BH * T), kBlock, 0, s>>>(S, lse, BH * T, T);
  CUDA_CHECK_LAUNCH("causal_softmax_fwd_kernel");
}

void causal_softmax_backward(const float* P, float* dP, int64_t BH, int64_t T, cudaStream_t s) {
  if (BH * T <= 0) return;
  causal_softmax_bwd_kernel<<<row_blocks(BH * T), kBlock, 0, s>>>(P, dP, BH * T, T);
  CUDA_CHECK_LAUNCH("causal_softmax_bwd_kernel");
}

}  // namespace edp::cuda::kern
