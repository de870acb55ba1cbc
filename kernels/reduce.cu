// Reductions and simple BLAS-1 style kernels: those of src/backend/cuda/reduce.cpp, which
// implements src/backend/cpu/reduce.cpp (the oracle), and pieces used by other ops and the
// communicators (fill, divide, channel sum).
//
//   sum          S  = Σ_i x_i          sum of squares  S = Σ_i x_i²      (double accumulation)
//   axpy         y += α x              scale           x *= α
//   fill         x_i = v               divide          x_i /= n  (the communicator's Avg)
//   channel sum  out[c] += Σ_{o,i} x[o, c, i]    — the bias gradient of Linear ([N, C]: inner 1)
//                                                  and Conv2d ([N, C, H·W])
// These ops have no backward of their own: they are pieces of other ops' backward passes.
//
// Determinism: every sum is split into a number of pieces that depends on the shape only (never
// on the device or on timing), each piece accumulated in double, and the pieces combined by one
// block in a fixed order. No atomics.
#include <type_traits>

#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__global__ void sum_partial_kernel(const float* __restrict__ x, int64_t n, bool squares,
                                   double* __restrict__ partial) {
  __shared__ double scratch[32];
  double acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_finalize_kernel(const double* __restrict__ partial, int blocks,
                                    double* __restrict__ out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = acc;
}

__global__ void axpy_kernel(float* __restrict__ y, float alpha, const float* __restrict__ x,
                            int64_t n, bool vec) {
  grid_stride_vec4(
      n, vec,
      [&](int64_t v) {
        float4 a = reinterpret_cast<float4*>(y)[v];
        const float4 b = reinterpret_cast<const float4*>(x)[v];
        a.x += alpha * b.x;
        a.y += alpha * b.y;
        a.z += alpha * b.z;
        a.w += alpha * b.w;
        reinterpret_cast<float4*>(y)[v] = a;
      },
      [&](int64_t i) { y[i] += alpha * x[i]; });
}

__global__ void scale_kernel(float* __restrict__ x, float alpha, int64_t n, bool vec) {
  grid_stride_vec4(
      n, vec,
      [&](int64_t v) {
        float4 a = reinterpret_cast<float4*>(x)[v];
        a.x *= alpha;
        a.y *= alpha;
        a.z *= alpha;
        a.w *= alpha;
        reinterpret_cast<float4*>(x)[v] = a;
      },
      [&](int64_t i) { x[i] *= alpha; });
}

template <typename T>
__global__ void fill_kernel(T* __restrict__ p, T v, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = v;
}

// [outer, C] rows (inner == 1): thread per column, coalesced across the warp; block row-split s.
__global__ void column_sum_partial_kernel(const float* __restrict__ x, int64_t outer, int64_t C,
                                          int64_t splits, double* __restrict__ partial) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t s = blockIdx.y;
  if (c >= C) return;
  int64_t r0, r1;
  split_range(outer, s, splits, r0, r1);
  double acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += x[r * C + c];
  partial[s * C + c] = acc;
}

// [outer, C, inner] planes: block (c, s) sums the planes o in split s of channel c.
__global__ void plane_sum_partial_kernel(const float* __restrict__ x, int64_t outer, int64_t C,
                                         int64_t inner, int64_t splits,
                                         double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x, s = blockIdx.y;
  int64_t o0, o1;
  split_range(outer, s, splits, o0, o1);
  double acc = 0;
  for (int64_t o = o0; o < o1; ++o) {
    const float* plane = x + (o * C + c) * inner;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) acc += plane[i];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[s * C + c] = acc;
}

__global__ void partial_accumulate_kernel(const double* __restrict__ partial, int64_t C,
                                          int64_t splits, float* __restrict__ out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double acc = 0;
  for (int64_t s = 0; s < splits; ++s) acc += partial[s * C + c];
  out[c] += static_cast<float>(acc);
}

template <typename T>
__global__ void divide_kernel(T* __restrict__ p, int64_t n, int divisor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
  {
    if constexpr (std::is_floating_point_v<T>)
      p[i] = p[i] / static_cast<T>(divisor);  // correctly rounded: exact sums stay exact
    else
      p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);  // truncation, as in C++
  }
}

template <typename T>
void launch_divide(void* p, int64_t n, int divisor, cudaStream_t s) {
  divide_kernel<T><<<grid_for(n), kBlock, 0, s>>>(static_cast<T*>(p), n, divisor);
  CUDA_CHECK_LAUNCH("divide_kernel");
}

}  // namespace

void sum_partial(const float* x, int64_t n, bool squares, double* partial, int blocks,
                 cudaStream_t s) {
  if (blocks <= 0) return;
  sum_partial_kernel<<<blocks, kBlock, 0, s>>>(x, n, squares, partial);
  CUDA_CHECK_LAUNCH("sum_partial_kernel");
}

void sum_finalize(const double* partial, int blocks, double* out, cudaStream_t s) {
  sum_finalize_kernel<<<1, kBlock, 0, s>>>(partial, blocks, out);
  CUDA_CHECK_LAUNCH("sum_finalize_kernel");
}

void axpy(float* y, float alpha, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const bool vec = aligned16(y) && aligned16(x);
  axpy_kernel<<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(y, alpha, x, n, vec);
  CUDA_CHECK_LAUNCH("axpy_kernel");
}

void scale(float* x, float alpha, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const bool vec = aligned16(x);
  scale_kernel<<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(x, alpha, n, vec);
  CUDA_CHECK_LAUNCH("scale_kernel");
}

void fill(void* p, int elem_size, uint64_t pattern, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const unsigned grid = grid_for(n);
  switch (elem_size) {
    case 1: fill_kernel<uint8_t><<<grid, kBlock, 0, s>>>(static_cast<uint8_t*>(p), static_cast<uint8_t>(pattern), n); break;
    case 4: fill_kernel<uint32_t><<<grid, kBlock, 0, s>>>(static_cast<uint32_t*>(p), static_cast<uint32_t>(pattern), n); break;
    case 8: fill_kernel<uint64_t><<<grid, kBlock, 0, s>>>(static_cast<uint64_t*>(p), pattern, n); break;
    default: throw Error("fill: unsupported element size " + std::to_string(elem_size));
  }
  CUDA_CHECK_LAUNCH("fill_kernel");
}

void channel_sum_accumulate(const float* x, float* out, int64_t outer, int64_t C, int64_t inner,
                            double* partial, int64_t splits, cudaStream_t s) {
  if (C <= 0) return;
  if (outer <= 0 || inner <= 0) return;  // nothing to add
  EDP_CHECK(splits >= 1 && splits <= 65535, "channel_sum_accumulate: bad split count ", splits);
  if (inner == 1) {
    const dim3 grid(static_cast<unsigned>((C + kColumnBlock - 1) / kColumnBlock), static_cast<unsigned>(splits));
    column_sum_partial_kernel<<<grid, kColumnBlock, 0, s>>>(x, outer, C, splits, partial);
    CUDA_CHECK_LAUNCH("column_sum_partial_kernel");
  } else {
    EDP_CHECK(splits <= outer, "channel_sum_accumulate: ", splits, " splits over ", outer, " planes");
    const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(splits));
    plane_sum_partial_kernel<<<grid, kBlock, 0, s>>>(x, outer, C, inner, splits, partial);
    CUDA_CHECK_LAUNCH("plane_sum_partial_kernel");
  }
  partial_accumulate_kernel<<<static_cast<unsigned>((C + kBlock - 1) / kBlock), kBlock, 0, s>>>(
      partial, C, splits, out);
  CUDA_CHECK_LAUNCH("partial_accumulate_kernel");
}

void divide(void* buf, int dtype, int64_t n, int divisor, cudaStream_t s) {
  if (n <= 0) return;
  switch (dtype) {
    case 0: launch_divide<float>(buf, n, divisor, s); break;
    case 1: launch_divide<double>(buf, n, divisor, s); break;
    case 2: launch_divide<int32_t>(buf, n, divisor, s); break;
    case 3: launch_divide<int64_t>(buf, n, divisor, s); break;
    case 4: launch_divide<uint8_t>(buf, n, divisor, s); break;
    default: throw Error("divide: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace edp::cuda::kern
