// BatchNorm2d (training and evaluation forward, backward) over NCHW float32: the kernels of
// src/backend/cuda/batchnorm.cpp, which implements src/backend/cpu/batchnorm.cpp (the oracle).
//
// With M = N·H·W values per channel c:
//   forward (train)  μ = (1/M) Σ x,  σ² = (1/M) Σ (x - μ)²   (biased: used to normalise)
//                    x̂ = (x - μ)/√(σ² + ε),  y = γ x̂ + β = a x + b with a = γ/√(σ²+ε), b = β - a μ
//                    running_mean = (1-m) running_mean + m μ
//                    running_var  = (1-m) running_var  + m σ² M/(M-1)   (unbiased)
//   forward (eval)   the same affine map with the running statistics
//   backward         dβ += Σ dy,  dγ += Σ dy x̂,  dx = γ/√(σ²+ε) · (dy - Σdy/M - x̂ Σ(dy x̂)/M)
//
// Own kernels rather than cuDNN's batch-norm: the exact CPU semantics (momentum form, unbiased
// running variance, saved inverse std, += into dγ/dβ) with no mode or layout constraints, and
// deterministic statistics — each channel's values are split into a shape-dependent number of
// blocks (so layers with few channels still fill the GPU), each block accumulates in double, and
// one thread per channel combines the blocks in order. Sums are taken about a per-channel shift
// (the channel's first value) so that Σd² - (Σd)²/M does not cancel catastrophically.
// Forward applies y = a x + b with separate rounding steps, exactly as the CPU backend does.
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

// Block (c, s): Σ (x - K) and Σ (x - K)² over planes [n0, n1) of channel c.
__global__ void bn_stats_partial_kernel(const float* __restrict__ x, int64_t N, int64_t C,
                                        int64_t P, int64_t splits, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x, s = blockIdx.y;
  int64_t n0, n1;
  split_range(N, s, splits, n0, n1);
  const double K = x[c * P];
  double s1 = 0, s2 = 0;
  for (int64_t n = n0; n < n1; ++n) {
    const float* plane = x + (n * C + c) * P;
    for (int64_t i = threadIdx.x; i < P; i += blockDim.x) {
      const double d = static_cast<double>(plane[i]) - K;
      s1 += d;
      s2 += d * d;
    }
  }
  s1 = block_sum(s1, scratch);
  s2 = block_sum(s2, scratch);
  if (threadIdx.x == 0) {
    partial[(c * splits + s) * 2] = s1;
    partial[(c * splits + s) * 2 + 1] = s2;
  }
}

__global__ void bn_stats_finalize_kernel(const double* __restrict__ partial,
                                         const float* __restrict__ x, int64_t N, int64_t C,
                                         int64_t P, int64_t splits, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, float* running_mean,
                                         float* running_var, double momentum, double eps,
                                         float* __restrict__ save_mean,
                                         float* __restrict__ save_invstd, float* __restrict__ coef) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s1 = 0, s2 = 0;
  for (int64_t s = 0; s < splits; ++s) {
    s1 += partial[(c * splits + s) * 2];
    s2 += partial[(c * splits + s) * 2 + 1];
  }
  const double M = static_cast<double>(N * P);
  const double K = x[c * P];
  const double mean = K + s1 / M;
  double ss = s2 - s1 * s1 / M;  // Σ (x - μ)²
  if (ss < 0) ss = 0;
  const double var = ss / M;
  const double invstd = 1.0 / sqrt(var + eps);
  save_mean[c] = static_cast<float>(mean);
  save_invstd[c] = static_cast<float>(invstd);
  running_mean[c] = static_cast<float>((1 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = static_cast<float>((1 - momentum) * running_var[c] + momentum * ss / (M - 1));
  const double g = gamma[c];
  coef[c] = static_cast<float>(g * invstd);
  coef[C + c] = static_cast<float>(beta[c] - g * invstd * mean);
}

__global__ void bn_eval_coef_kernel(const float* __restrict__ gamma, const float* __restrict__ beta,
                                    const float* __restrict__ rm, const float* __restrict__ rv,
                                    double eps, int64_t C, float* __restrict__ coef) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double invstd = 1.0 / sqrt(static_cast<double>(rv[c]) + eps);
  const double g = gamma[c];
  coef[c] = static_cast<float>(g * invstd);
  coef[C + c] = static_cast<float>(beta[c] - g * invstd * rm[c]);
}

// y = a[c]·x + b[c], multiply and add rounded separately (no FMA), as on the CPU. Memory-bound:
// when a plane's size P is a multiple of 4 and the buffers are 16-byte aligned, each float4 lies
// in one plane (one channel division per 4 values); Index is uint32_t when n < 2^31.
template <typename Index>
__global__ void bn_apply_kernel(const float* __restrict__ x, const float* __restrict__ coef,
                                float* __restrict__ y, Index n, Index C, Index P, bool vec) {
  auto apply = [&](float v, Index c) { return __fadd_rn(__fmul_rn(coef[c], v), coef[C + c]); };
  const Index P4 = P / 4;
  grid_stride_vec4(
      n, vec,
      [&](Index v) {
        const Index c = (v / P4) % C;
        const float4 a = reinterpret_cast<const float4*>(x)[v];
        reinterpret_cast<float4*>(y)[v] = make_float4(apply(a.x, c), apply(a.y, c), apply(a.z, c), apply(a.w, c));
      },
      [&](Index i) { y[i] = apply(x[i], (i / P) % C); });
}

// Block (c, s): Σ dy and Σ dy·(x - μ) over planes [n0, n1) of channel c.
__global__ void bn_bwd_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                      const float* __restrict__ save_mean, int64_t N, int64_t C,
                                      int64_t P, int64_t splits, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x, s = blockIdx.y;
  int64_t n0, n1;
  split_range(N, s, splits, n0, n1);
  const double mean = save_mean[c];
  double s1 = 0, s2 = 0;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t off = (n * C + c) * P;
    for (int64_t i = threadIdx.x; i < P; i += blockDim.x) {
      const double g = dy[off + i];
      s1 += g;
      s2 += g * (static_cast<double>(x[off + i]) - mean);
    }
  }
  s1 = block_sum(s1, scratch);
  s2 = block_sum(s2, scratch);
  if (threadIdx.x == 0) {
    partial[(c * splits + s) * 2] = s1;
    partial[(c * splits + s) * 2 + 1] = s2;
  }
}

__global__ void bn_bwd_finalize_kernel(const double* __restrict__ partial, int64_t C,
                                       int64_t splits, int64_t M, const float* __restrict__ gamma,
                                       const float* __restrict__ save_invstd,
                                       float* __restrict__ dgamma, float* __restrict__ dbeta,
                                       double* __restrict__ coef) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sdy = 0, sdxm = 0;
  for (int64_t s = 0; s < splits; ++s) {
    sdy += partial[(c * splits + s) * 2];
    sdxm += partial[(c * splits + s) * 2 + 1];
  }
  const double invstd = save_invstd[c];
  const double sdyx = sdxm * invstd;  // Σ dy x̂
  dgamma[c] += static_cast<float>(sdyx);
  dbeta[c] += static_cast<float>(sdy);
  coef[c] = static_cast<double>(gamma[c]) * invstd;      // γ σ⁻¹
  coef[C + c] = sdy / static_cast<double>(M);            // mean of dy
  coef[2 * C + c] = sdyx / static_cast<double>(M);       // mean of dy x̂
}

__global__ void bn_bwd_dx_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                 const float* __restrict__ save_mean,
                                 const float* __restrict__ save_invstd,
                                 const double* __restrict__ coef, float* __restrict__ dx, int64_t n,
                                 int64_t C, int64_t P) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t c = (i / P) % C;
    const double xhat = (static_cast<double>(x[i]) - save_mean[c]) * static_cast<double>(save_invstd[c]);
    dx[i] = static_cast<float>(coef[c] * (static_cast<double>(dy[i]) - coef[C + c] - xhat * coef[2 * C + c]));
  }
}

unsigned per_channel_blocks(int64_t C) { return static_cast<unsigned>((C + kBlock - 1) / kBlock); }

void check_splits(int64_t N, int64_t splits) {
  EDP_CHECK(splits >= 1 && splits <= N && splits <= 65535, "batchnorm: bad split count ", splits,
            " for ", N, " samples");
}

}  // namespace

void bn_stats_partial(const float* x, int64_t N, int64_t C, int64_t P, int64_t splits,
                      double* partial, cudaStream_t s) {
  check_splits(N, splits);
  bn_stats_partial_kernel<<<dim3(static_cast<unsigned>(C), static_cast<unsigned>(splits)), kBlock, 0, s>>>(
      x, N, C, P, splits, partial);
  CUDA_CHECK_LAUNCH("bn_stats_partial_kernel");
}

void bn_stats_finalize(const double* partial, const float* x, int64_t N, int64_t C, int64_t P,
                       int64_t splits, const float* gamma, const float* beta, float* running_mean,
                       float* running_var, double momentum, double eps, float* save_mean,
                       float* save_invstd, float* coef, cudaStream_t s) {
  bn_stats_finalize_kernel<<<per_channel_blocks(C), kBlock, 0, s>>>(
      partial, x, N, C, P, splits, gamma, beta, running_mean, running_var, momentum, eps,
      save_mean, save_invstd, coef);
  CUDA_CHECK_LAUNCH("bn_stats_finalize_kernel");
}

void bn_eval_coef(const float* gamma, const float* beta, const float* running_mean,
                  const float* running_var, double eps, int64_t C, float* coef, cudaStream_t s) {
  bn_eval_coef_kernel<<<per_channel_blocks(C), kBlock, 0, s>>>(gamma, beta, running_mean,
                                                                running_var, eps, C, coef);
  CUDA_CHECK_LAUNCH("bn_eval_coef_kernel");
}

void bn_apply(const float* x, const float* coef, float* y, int64_t N, int64_t C, int64_t P,
              cudaStream_t s) {
  const int64_t n = N * C * P;
  if (n <= 0) return;
  const bool vec = P % 4 == 0 && aligned16(x) && aligned16(y);
  const unsigned grid = grid_for(vec ? n / 4 : n);
  if (n <= static_cast<int64_t>(INT32_MAX)) {  // i + stride cannot wrap
    bn_apply_kernel<uint32_t><<<grid, kBlock, 0, s>>>(x, coef, y, static_cast<uint32_t>(n), static_cast<uint32_t>(C),
                                                      static_cast<uint32_t>(P), vec);
  } else {
    bn_apply_kernel<int64_t><<<grid, kBlock, 0, s>>>(x, coef, y, n, C, P, vec);
  }
  CUDA_CHECK_LAUNCH("bn_apply_kernel");
}

void bn_backward_partial(const float* x, const float* dy, const float* save_mean, int64_t N,
                         int64_t C, int64_t P, int64_t splits, double* partial, cudaStream_t s) {
  check_splits(N, splits);
  bn_bwd_partial_kernel<<<dim3(static_cast<unsigned>(C), static_cast<unsigned>(splits)), kBlock, 0, s>>>(
      x, dy, save_mean, N, C, P, splits, partial);
  CUDA_CHECK_LAUNCH("bn_bwd_partial_kernel");
}

void bn_backward_finalize(const double* partial, int64_t C, int64_t splits, int64_t M,
                          const float* gamma, const float* save_invstd, float* dgamma, float* dbeta,
                          double* coef, cudaStream_t s) {
  bn_bwd_finalize_kernel<<<per_channel_blocks(C), kBlock, 0, s>>>(partial, C, splits, M, gamma,
                                                                  save_invstd, dgamma, dbeta, coef);
  CUDA_CHECK_LAUNCH("bn_bwd_finalize_kernel");
}

void bn_backward_dx(const float* x, const float* dy, const float* save_mean,
                    const float* save_invstd, const double* coef, float* dx, int64_t N, int64_t C,
                    int64_t P, cudaStream_t s) {
  const int64_t n = N * C * P;
  if (n <= 0) return;
  bn_bwd_dx_kernel<<<grid_for(n), kBlock, 0, s>>>(x, dy, save_mean, save_invstd, coef, dx, n, C, P);
  CUDA_CHECK_LAUNCH("bn_bwd_dx_kernel");
}

}  // namespace edp::cuda::kern
