// Inverted dropout with a counter-based random number generator, forward and backward: the
// kernels of src/backend/cuda/dropout.cpp, which implements src/backend/cpu/dropout.cpp (the
// oracle).
//
//   forward   m_i = [h(seed, i) >= ⌊p·2⁶⁴⌋],  y_i = x_i · (m_i / (1 - p))
//   backward  dx_i = dy_i · (m_i / (1 - p))
//   h(seed, i) = splitmix64(seed XOR i·0xD1B54A32D192ED03)
//
// Element i's bit depends only on (seed, i) — not on the launch configuration or thread order —
// and h is the CPU backend's function, so the GPU mask equals the CPU mask bit for bit and a
// model gives the same dropout pattern on either device.
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__device__ __forceinline__ uint64_t keep_hash(uint64_t seed, uint64_t i) {
  uint64_t z = (seed ^ (i * 0xD1B54A32D192ED03ull)) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Four elements per thread per step: float4 in and out, uchar4 mask.
__global__ void dropout_fwd_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   uint8_t* __restrict__ mask, int64_t n, uint64_t seed,
                                   uint64_t threshold, float scale, bool vec) {
  grid_stride_vec4(
      n, vec,
      [&](int64_t v) {
        const uint64_t i = static_cast<uint64_t>(v) * 4;
        const float4 a = reinterpret_cast<const float4*>(x)[v];
        uchar4 m;
        m.x = keep_hash(seed, i) >= threshold;
        m.y = keep_hash(seed, i + 1) >= threshold;
        m.z = keep_hash(seed, i + 2) >= threshold;
        m.w = keep_hash(seed, i + 3) >= threshold;
        float4 o;
        o.x = a.x * (scale * static_cast<float>(m.x));
        o.y = a.y * (scale * static_cast<float>(m.y));
        o.z = a.z * (scale * static_cast<float>(m.z));
        o.w = a.w * (scale * static_cast<float>(m.w));
        reinterpret_cast<uchar4*>(mask)[v] = m;
        reinterpret_cast<float4*>(y)[v] = o;
      },
      [&](int64_t i) {
        const uint8_t m = keep_hash(seed, static_cast<uint64_t>(i)) >= threshold;
        mask[i] = m;
        y[i] = x[i] * (scale * static_cast<float>(m));
      });
}

__global__ void dropout_bwd_kernel(const float* __restrict__ dy, const uint8_t* __restrict__ mask,
                                   float* __restrict__ dx, int64_t n, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = dy[i] * (scale * static_cast<float>(mask[i]));
}

}  // namespace

void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t n, uint64_t seed,
                     uint64_t threshold, float scale, cudaStream_t s) {
  if (n <= 0) return;
  // uchar4 stores need 4-byte alignment of the mask, float4 16-byte alignment of x and y.
  const bool vec = aligned16(x) && aligned16(y) && (reinterpret_cast<uintptr_t>(mask) & 3u) == 0;
  dropout_fwd_kernel<<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(x, y, mask, n, seed,
                                                                        threshold, scale, vec);
  CUDA_CHECK_LAUNCH("dropout_fwd_kernel");
}

void dropout_backward(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale,
                      cudaStream_t s) {
  if (n <= 0) return;
  dropout_bwd_kernel<<<grid_for(n), kBlock, 0, s>>>(dy, mask, dx, n, scale);
  CUDA_CHECK_LAUNCH("dropout_bwd_kernel");
}

}  // namespace edp::cuda::kern
