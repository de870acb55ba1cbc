// float32 <-> bfloat16 conversion of the operands and results of the mixed-precision products in
// src/backend/cuda/linear.cpp, attention.cpp and attention_cudnn.cpp. float32 -> bfloat16 rounds to
// nearest even (__float2bfloat16_rn), the CPU's to_bfloat16 (edp/core/dtype.h); bfloat16 -> float32
// is exact. Memory-bound: with every pointer aligned (the caching allocator's blocks are), each
// thread moves four values at a time (a 16-byte float4 and an 8-byte group of four bfloat16).
#include <cuda_bf16.h>

#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n, bool vec) {
  grid_stride_vec4<int64_t>(
      n, vec,
      [&](int64_t v) {
        const float4 a = reinterpret_cast<const float4*>(x)[v];
        __nv_bfloat162 lo = __floats2bfloat162_rn(a.x, a.y), hi = __floats2bfloat162_rn(a.z, a.w);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&lo);
        packed.y = *reinterpret_cast<const uint32_t*>(&hi);
        reinterpret_cast<uint2*>(y)[v] = packed;
      },
      [&](int64_t i) { y[i] = __float2bfloat16_rn(x[i]); });
}

__global__ void from_bf16_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, int64_t n, bool vec) {
  grid_stride_vec4<int64_t>(
      n, vec,
      [&](int64_t v) {
        const uint2 packed = reinterpret_cast<const uint2*>(x)[v];
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed.y));
        reinterpret_cast<float4*>(y)[v] = make_float4(lo.x, lo.y, hi.x, hi.y);
      },
      [&](int64_t i) { y[i] = __bfloat162float(x[i]); });
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void to_bf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const bool vec = aligned(x, 16) && aligned(y, 8);
  to_bf16_kernel<<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(x, static_cast<__nv_bfloat16*>(y), n, vec);
  CUDA_CHECK_LAUNCH("to_bf16_kernel");
}

void from_bf16(const void* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const bool vec = aligned(x, 8) && aligned(y, 16);
  from_bf16_kernel<<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(static_cast<const __nv_bfloat16*>(x), y, n,
                                                                      vec);
  CUDA_CHECK_LAUNCH("from_bf16_kernel");
}

}  // namespace edp::cuda::kern
