// Max pooling (k×k windows, stride s, no padding) and global average pooling, forward and
// backward: the kernels of src/backend/cuda/pool.cpp, which implements src/backend/cpu/pool.cpp
// (the oracle).
//
//   max-pool    y[p, oh, ow] = max_{kh, kw < k} x[p, oh·s + kh, ow·s + kw]
//               argmax = flat index (within the plane) of the first maximum; NaN wins, as on
//               the CPU (a NaN input makes the window's output NaN)
//               dx[p, argmax] += dy[p, oh, ow]
//   avg-pool    y[p] = (1/P) Σ_i x[p, i]          dx[p, i] = dy[p] / P
//
// Max-pool backward scatters with atomicAdd into a zeroed dx. When windows do not overlap
// (k <= s, e.g. the usual 2×2 stride 2) every input receives at most one gradient, so the
// result is exact and deterministic; with overlapping windows the order of the additions into
// an input that is the maximum of several windows may vary (last-bit differences).
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__global__ void maxpool_fwd_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int32_t* __restrict__ argmax, int64_t total, int64_t H,
                                   int64_t W, int64_t Ho, int64_t Wo, int64_t k, int64_t s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const int64_t ow = o % Wo;
    const int64_t t = o / Wo;
    const int64_t oh = t % Ho;
    const int64_t p = t / Ho;
    const float* in = x + p * H * W;
    const int64_t h0 = oh * s, w0 = ow * s;
    float best = -INFINITY;
    int64_t bi = h0 * W + w0;
    for (int64_t kh = 0; kh < k; ++kh)
      for (int64_t kw = 0; kw < k; ++kw) {
        const int64_t i = (h0 + kh) * W + w0 + kw;
        const float v = in[i];
        if (v > best || v != v) {
          best = v;
          bi = i;
        }
      }
    y[o] = best;
    argmax[o] = static_cast<int32_t>(bi);
  }
}

__global__ void maxpool_bwd_kernel(const float* __restrict__ dy, const int32_t* __restrict__ argmax,
                                   float* __restrict__ dx, int64_t total, int64_t HW, int64_t HoWo) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const int64_t p = o / HoWo;
    atomicAdd(dx + p * HW + argmax[o], dy[o]);
  }
}

// One warp per plane.
__global__ void avgpool_fwd_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t planes, int64_t P) {
  const int lane = threadIdx.x & 31;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (p >= planes) return;
  const float* in = x + p * P;
  double acc = 0;
  for (int64_t i = lane; i < P; i += 32) acc += in[i];
  acc = warp_sum(acc);
  if (lane == 0) y[p] = static_cast<float>(acc / static_cast<double>(P));
}

__global__ void avgpool_bwd_kernel(const float* __restrict__ dy, float* __restrict__ dx,
                                   int64_t total, int64_t P) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    dx[i] = dy[i / P] / static_cast<float>(P);  // the CPU's float division, bit for bit
}

}  // namespace

void maxpool2d_forward(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t H,
                       int64_t W, int64_t Ho, int64_t Wo, int64_t k, int64_t stride, cudaStream_t s) {
  const int64_t total = planes * Ho * Wo;
  if (total <= 0) return;
  maxpool_fwd_kernel<<<grid_for(total), kBlock, 0, s>>>(x, y, argmax, total, H, W, Ho, Wo, k, stride);
  CUDA_CHECK_LAUNCH("maxpool_fwd_kernel");
}

void maxpool2d_backward(const float* dy, const int32_t* argmax, float* dx, int64_t planes,
                        int64_t HW, int64_t HoWo, cudaStream_t s) {
  const int64_t total = planes * HoWo;
  if (total <= 0) return;
  maxpool_bwd_kernel<<<grid_for(total), kBlock, 0, s>>>(dy, argmax, dx, total, HW, HoWo);
  CUDA_CHECK_LAUNCH("maxpool_bwd_kernel");
}

void global_avgpool_forward(const float* x, float* y, int64_t planes, int64_t P, cudaStream_t s) {
  if (planes <= 0) return;
  const int64_t per_block = kBlock / 32;
  avgpool_fwd_kernel<<<static_cast<unsigned>((planes + per_block - 1) / per_block), kBlock, 0, s>>>(
      x, y, planes, P);
  CUDA_CHECK_LAUNCH("avgpool_fwd_kernel");
}

void global_avgpool_backward(const float* dy, float* dx, int64_t planes, int64_t P, cudaStream_t s) {
  const int64_t total = planes * P;
  if (total <= 0) return;
  avgpool_bwd_kernel<<<grid_for(total), kBlock, 0, s>>>(dy, dx, total, P);
  CUDA_CHECK_LAUNCH("avgpool_bwd_kernel");
}

}  // namespace edp::cuda::kern
