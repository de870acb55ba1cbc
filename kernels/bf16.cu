// float32 -> bfloat16 rounding (round to nearest even, __float2bfloat16_rn) of the operands of the
// mixed-precision products in src/backend/cuda/linear.cpp and attention.cpp; the CPU's rounding
// is to_bfloat16 (edp/core/dtype.h), the same rule.
#include <cuda_bf16.h>

#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __float2bfloat16_rn(x[i]);
}

}  // namespace

void to_bf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  to_bf16_kernel<<<grid_for(n), kBlock, 0, s>>>(x, static_cast<__nv_bfloat16*>(y), n);
  CUDA_CHECK_LAUNCH("to_bf16_kernel");
}

}  // namespace edp::cuda::kern
