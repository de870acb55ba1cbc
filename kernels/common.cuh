// Device-side helpers shared by the kernel files: block sizes, warp/block reductions with a
// fixed combination order (so results do not depend on timing), and the launch check.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/check.h"
#include "edp/core/error.h"
#include "kernels/launch.h"
#include "kernels.h"

namespace edp::cuda::kern {

constexpr int kBlock = 256;

// Grid for a grid-stride loop over `work` items on the current device.
inline unsigned grid_for(int64_t work, int block = kBlock) {
  return static_cast<unsigned>(grid_size(work, block, detail::sm_count_current()));
}

// The grid-stride loop of the elementwise kernels: vec4(v) handles elements [4v, 4v + 4) for
// v < n/4 when `vec` (all buffers 16-byte aligned: float4 loads), then one(i) does the rest;
// without `vec`, one(i) does every element.
template <typename Index, typename Vec4, typename One>
__device__ __forceinline__ void grid_stride_vec4(Index n, bool vec, Vec4 vec4, One one) {
  const Index stride = static_cast<Index>(blockDim.x) * gridDim.x;
  const Index t0 = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  Index tail = 0;
  if (vec) {
    const Index nv = n / 4;
    for (Index v = t0; v < nv; v += stride) vec4(v);
    tail = nv * 4;
  }
  for (Index i = tail + t0; i < n; i += stride) one(i);
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
