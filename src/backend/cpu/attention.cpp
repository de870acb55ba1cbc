// Causal multi-head self-attention (the core between the qkv and output Linears) on the CPU
// (float32, float64): the oracle of backend/cuda/attention.cpp and kernels/attention.cu.
//
//   qkv [B, T, 3·D] holds q | k | v, each [.., D = H·hd], head h at columns [h·hd, (h+1)·hd).
//   forward   S = q kᵀ/√hd (per batch and head, [T, T]),  P = softmax over s ≤ t (causal mask),
//             y = P v  (heads side by side: y [B, T, D]);  lse[b, h, t] = log Σ_{s≤t} e^{S[t, s]}
//   backward  P = e^{S - lse} (recomputed),  dv = Pᵀ dy,  dP = dy vᵀ,
//             dS = P ∘ (dP - rowsum(dy ∘ y)),  dq = dS k/√hd,  dk = dSᵀ q/√hd
//
// Gradient contract: no parameters; dqkv is returned (=).
// Blocked, as flash attention does it: per sequence the queries are taken in blocks of 64 rows; a
// block needs only its [H, 64, ≤T] scores (keys after the block's last query are never computed),
// the softmax is finished within the block, and only the row log-sum-exps are kept for the
// backward, which recomputes the probabilities block by block. So the memory beyond the
// activations is O(threads · H · 64 · T), never O(B · H · T²). The sequences are split statically
// over the threads and each owns its slice of every output, so the result does not depend on the
// thread count. The products go through gemm.h, one batched call over the heads per block
// (bfloat16 when ops::matmul_bf16()): per-head calls of 64×64 blocks spent more in oneDNN's call
// overhead than in arithmetic.
#include <cmath>
#include <limits>
#include <vector>

#include "common.h"
#include "gemm.h"
#include "vmath.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {
constexpr int64_t kBlock = 64;

struct Dims {
  int64_t B, T, D, H, hd;
};

Dims check_attention(const Tensor& qkv, int64_t heads, const char* op) {
  require_cpu(qkv, op, "qkv");
  EDP_CHECK_SHAPE(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0, op, ": qkv must be [B, T, 3·D], got ",
                  qkv.shape().str());
  const int64_t D = qkv.dim(2) / 3;
  EDP_CHECK_SHAPE(heads > 0 && D % heads == 0, op, ": model width ", D, " is not a multiple of ", heads,
                  " heads");
  return {qkv.dim(0), qkv.dim(1), D, heads, D / heads};
}

// e^x: vmath.h's vectorised one for float32, libm's for float64.
inline float exp_of(float x) { return vexp(x); }
inline double exp_of(double x) { return std::exp(x); }

// The scores of query rows [r0, r0 + m) against keys [0, r0 + m) of all H heads of one sequence:
// S[h] (m × n, n = r0 + m, heads m·n apart) = scale · q_h kᵀ_h. One batched product over the heads.
template <typename T>
void block_scores(const T* q, const T* k, const Dims& d, int64_t r0, int64_t m, T scale, T* S) {
  const int64_t ld = 3 * d.D, n = r0 + m;
  gemm_batched(d.H, Mat<T>{q + r0 * ld, m, d.hd, ld}, d.hd, false, Mat<T>{k, n, d.hd, ld}, d.hd, true, S, n, m * n,
               scale, false);
}

// Turns one head's block of scores (m × n) into probabilities: with lse_in null the causal softmax
// is computed and each row's log-sum-exp written to lse_out[r0 + i]; else P = e^{S - lse_in}.
// Masked entries (s > t) are 0.
template <typename T>
void block_probs(T* S, int64_t r0, int64_t m, const T* lse_in, T* lse_out) {
  const int64_t n = r0 + m;
  for (int64_t i = 0; i < m; ++i) {
    T* row = S + i * n;
    const int64_t valid = r0 + i + 1;
    if (lse_in) {
      const T l = lse_in[r0 + i];
#pragma omp simd
      for (int64_t j = 0; j < valid; ++j) row[j] = exp_of(row[j] - l);
    } else {
      T mx = row[0];
      for (int64_t j = 1; j < valid; ++j) mx = std::max(mx, row[j]);
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < valid; ++j) {
        row[j] = exp_of(row[j] - mx);
        sum += row[j];
      }
      const T inv = T(1) / sum;
      for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
      lse_out[r0 + i] = mx + std::log(sum);
    }
    for (int64_t j = valid; j < n; ++j) row[j] = 0;
  }
}
}  // namespace

Tensor attention_forward(const Tensor& qkv, int64_t heads, Tensor& lse) {
#if EDP_HAVE_CUDA
  if (on_cuda(qkv)) return cuda::attention_forward(qkv, heads, lse);
#endif
  const char* op = "attention_forward";
  const Dims d = check_attention(qkv, heads, op);
  Tensor y({d.B, d.T, d.D}, qkv.dtype());
  lse = Tensor({d.B, d.H, d.T}, qkv.dtype());
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d.hd)));
    const int64_t ld = 3 * d.D;
#pragma omp parallel
    {
      std::vector<T> S(static_cast<size_t>(d.H * kBlock * d.T));
#pragma omp for schedule(static)
      for (int64_t b = 0; b < d.B; ++b) {
        const T* q = qkv.data<T>() + b * d.T * ld;
        const T* k = q + d.D;
        const T* v = q + 2 * d.D;
        T* out = y.data<T>() + b * d.T * d.D;
        for (int64_t r0 = 0; r0 < d.T; r0 += kBlock) {
          const int64_t m = std::min(kBlock, d.T - r0), n = r0 + m;
          block_scores<T>(q, k, d, r0, m, scale, S.data());
          for (int64_t h = 0; h < d.H; ++h)
            block_probs<T>(S.data() + h * m * n, r0, m, nullptr, lse.data<T>() + (b * d.H + h) * d.T);
          gemm_batched(d.H, Mat<T>{S.data(), m, n, n}, m * n, false, Mat<T>{v, n, d.hd, ld}, d.hd, false,
                       out + r0 * d.D, d.D, d.hd, T(1), false);
        }
      }
    }
  });
  return y;
}

Tensor attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& dy, const Tensor& lse, int64_t heads) {
#if EDP_HAVE_CUDA
  if (on_cuda(qkv, y, dy, lse)) return cuda::attention_backward(qkv, y, dy, lse, heads);
#endif
  const char* op = "attention_backward";
  const Dims d = check_attention(qkv, heads, op);
  EDP_CHECK_SHAPE(y.shape() == Shape({d.B, d.T, d.D}) && dy.shape() == y.shape(), op, ": output ",
                  y.shape().str(), " and grad_output ", dy.shape().str(), " must be [", d.B, ", ", d.T, ", ", d.D, "]");
  EDP_CHECK_SHAPE(lse.numel() == d.B * d.H * d.T, op, ": saved log-sum-exp ", lse.shape().str(), " does not fit");
  require_dtype(qkv, dy, op);
  Tensor dqkv = Tensor::zeros(qkv.shape(), qkv.dtype());
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d.hd)));
    const int64_t ld = 3 * d.D;
#pragma omp parallel
    {
      std::vector<T> P(static_cast<size_t>(d.H * kBlock * d.T)), dP(static_cast<size_t>(d.H * kBlock * d.T)),
          rowdot(static_cast<size_t>(d.H * d.T));
#pragma omp for schedule(static)
      for (int64_t b = 0; b < d.B; ++b) {
        const T* q = qkv.data<T>() + b * d.T * ld;
        const T* k = q + d.D;
        const T* v = q + 2 * d.D;
        T* dq = dqkv.data<T>() + b * d.T * ld;
        T* dk = dq + d.D;
        T* dv = dq + 2 * d.D;
        const T* yo = y.data<T>() + b * d.T * d.D;
        const T* g = dy.data<T>() + b * d.T * d.D;
        const T* l = lse.data<T>() + b * d.H * d.T;
        for (int64_t h = 0; h < d.H; ++h)
          for (int64_t t = 0; t < d.T; ++t) {
            T s = 0;
            for (int64_t e = 0; e < d.hd; ++e) s += g[t * d.D + h * d.hd + e] * yo[t * d.D + h * d.hd + e];
            rowdot[static_cast<size_t>(h * d.T + t)] = s;
          }
        for (int64_t r0 = 0; r0 < d.T; r0 += kBlock) {
          const int64_t m = std::min(kBlock, d.T - r0), n = r0 + m, sp = m * n;
          block_scores<T>(q, k, d, r0, m, scale, P.data());
          for (int64_t h = 0; h < d.H; ++h) block_probs<T>(P.data() + h * sp, r0, m, l + h * d.T, nullptr);
          const Mat<T> Pm{P.data(), m, n, n}, dYm{g + r0 * d.D, m, d.hd, d.D};
          gemm_batched(d.H, Pm, sp, true, dYm, d.hd, false, dv, ld, d.hd, T(1), true);
          gemm_batched(d.H, dYm, d.hd, false, Mat<T>{v, n, d.hd, ld}, d.hd, true, dP.data(), n, sp, T(1), false);
          for (int64_t h = 0; h < d.H; ++h)
            for (int64_t i = 0; i < m; ++i) {
              const T di = rowdot[static_cast<size_t>(h * d.T + r0 + i)];
              T* pr = P.data() + h * sp + i * n;
              const T* dpr = dP.data() + h * sp + i * n;
              for (int64_t j = 0; j < n; ++j) pr[j] *= dpr[j] - di;  // dS, in P's place (masked: 0)
            }
          gemm_batched(d.H, Pm, sp, false, Mat<T>{k, n, d.hd, ld}, d.hd, false, dq + r0 * ld, ld, d.hd, scale, false);
          gemm_batched(d.H, Pm, sp, true, Mat<T>{q + r0 * ld, m, d.hd, ld}, d.hd, false, dk, ld, d.hd, scale, true);
        }
      }
    }
  });
  return dqkv;
}

}  // namespace edp::ops
