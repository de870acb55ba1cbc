// Device-side helpers shared by the kernel files: block sizes, warp/block reductions with a
// fixed combination order (so results do not depend on timing), and the launch check.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../src/cuda/check.h"
#include "edp/core/error.h"
#include "edp/cuda/launch.h"
#include "kernels.h"

namespace edp::cuda::kern {

constexpr int kBlock = 256;

// Grid for a grid-stride loop over `work` items on the current device.
inline unsigned grid_for(int64_t work, int block = kBlock) {
  return static_cast<unsigned>(grid_size(work, block, detail::sm_count_current()));
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in
// thread 0. `scratch` holds 32 values. The tree is fixed, so the result is deterministic.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  T r = threadIdx.x < warps ? scratch[threadIdx.x] : T(0);
  if (warp == 0) r = warp_sum(r);
  return r;
}

}  // namespace edp::cuda::kern
