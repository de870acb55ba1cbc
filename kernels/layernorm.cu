// LayerNorm over the last dimension, forward and backward: the kernels of
// src/backend/cuda/layernorm.cpp, which implements src/backend/cpu/layernorm.cpp (the oracle,
// whose opening comment has the math). How the work is split here:
//
//   forward   one warp per row (the row's μ and rstd reduced across the warp)
//   backward  one warp per row for dx; the row's dy·x̂ and dy go to a per-chunk partial (64 rows
//             per chunk, summed in row order by one thread per column), then the chunks are
//             added in order into dγ and dβ.
// Sums are in double and reduced over fixed trees: the results do not depend on timing.
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

constexpr int kRowsPerBlock = kBlock / 32;
constexpr int64_t kChunk = 64;

__global__ void layernorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, float eps, float* __restrict__ y,
                                     float* __restrict__ mean, float* __restrict__ rstd, int64_t R, int64_t D) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= R) return;  // uniform per warp
  const float* xr = x + row * D;
  double s = 0;
  for (int64_t d = lane; d < D; d += 32) s += xr[d];
  const double m = warp_sum(s) / static_cast<double>(D);
  double v = 0;
  for (int64_t d = lane; d < D; d += 32) v += (xr[d] - m) * (xr[d] - m);
  const double inv = rsqrt(warp_sum(v) / static_cast<double>(D) + eps);
  const float fm = static_cast<float>(m), fi = static_cast<float>(inv);
  float* yr = y + row * D;
  for (int64_t d = lane; d < D; d += 32) yr[d] = (xr[d] - fm) * fi * gamma[d] + beta[d];
  if (lane == 0) {
    mean[row] = fm;
    rstd[row] = fi;
  }
}

__global__ void layernorm_dx_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                    const float* __restrict__ gamma, const float* __restrict__ mean,
                                    const float* __restrict__ rstd, float* __restrict__ dx, int64_t R, int64_t D) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= R) return;
  const float *xr = x + row * D, *gr = dy + row * D;
  const float m = mean[row], inv = rstd[row];
  double sg = 0, sgx = 0;
  for (int64_t d = lane; d < D; d += 32) {
    const float gw = __fmul_rn(gr[d], gamma[d]);  // rounded, never contracted: the same g in both loops
    sg += gw;
    sgx += gw * (xr[d] - m) * inv;
  }
  const float mg = static_cast<float>(warp_sum(sg) / static_cast<double>(D));
  const float mgx = static_cast<float>(warp_sum(sgx) / static_cast<double>(D));
  float* dr = dx + row * D;
  for (int64_t d = lane; d < D; d += 32) dr[d] = inv * (__fmul_rn(gr[d], gamma[d]) - mg - (xr[d] - m) * inv * mgx);
}

// partial[c][0][d] = Σ_{rows of chunk c} dy·x̂, partial[c][1][d] = Σ dy.
__global__ void layernorm_param_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                               const float* __restrict__ mean, const float* __restrict__ rstd,
                                               float* __restrict__ partial, int64_t R, int64_t D) {
  const int64_t c = blockIdx.y;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float sg = 0.f, sb = 0.f;
  const int64_t end = min(R, (c + 1) * kChunk);
  for (int64_t r = c * kChunk; r < end; ++r) {
    const float g = dy[r * D + d];
    sg += g * (x[r * D + d] - mean[r]) * rstd[r];
    sb += g;
  }
  partial[(c * 2) * D + d] = sg;
  partial[(c * 2 + 1) * D + d] = sb;
}

__global__ void layernorm_param_finalize_kernel(const float* __restrict__ partial, float* __restrict__ dgamma,
                                                float* __restrict__ dbeta, int64_t chunks, int64_t D) {
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float sg = 0.f, sb = 0.f;
  for (int64_t c = 0; c < chunks; ++c) {
    sg += partial[(c * 2) * D + d];
    sb += partial[(c * 2 + 1) * D + d];
  }
  dgamma[d] += sg;
  dbeta[d] += sb;
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>((R + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

int64_t layernorm_chunks(int64_t R) { return (R + kChunk - 1) / kChunk; }

void layernorm_forward(const float* x, const float* gamma, const float* beta, float eps, float* y, float* mean,
                       float* rstd, int64_t R, int64_t D, cudaStream_t s) {
  if (R <= 0 || D <= 0) return;
  layernorm_fwd_kernel<<<row_blocks(R), kBlock, 0, s>>>(x, gamma, beta, eps, y, mean, rstd, R, D);
  CUDA_CHECK_LAUNCH("layernorm_fwd_kernel");
}

void layernorm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* partial, float* dgamma, float* dbeta, int64_t R, int64_t D, cudaStream_t s) {
  if (R <= 0 || D <= 0) return;
  layernorm_dx_kernel<<<row_blocks(R), kBlock, 0, s>>>(x, dy, gamma, mean, rstd, dx, R, D);
  CUDA_CHECK_LAUNCH("layernorm_dx_kernel");
  const int64_t chunks = layernorm_chunks(R);
  const dim3 grid(static_cast<unsigned>((D + kBlock - 1) / kBlock), static_cast<unsigned>(chunks));
  layernorm_param_partial_kernel<<<grid, kBlock, 0, s>>>(x, dy, mean, rstd, partial, R, D);
  CUDA_CHECK_LAUNCH("layernorm_param_partial_kernel");
  layernorm_param_finalize_kernel<<<static_cast<unsigned>((D + kBlock - 1) / kBlock), kBlock, 0, s>>>(
      partial, dgamma, dbeta, chunks, D);
  CUDA_CHECK_LAUNCH("layernorm_param_finalize_kernel");
}

}  // namespace edp::cuda::kern
