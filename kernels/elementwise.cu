// Smooth activations and elementwise arithmetic: the kernels of src/backend/cuda/elementwise.cpp,
// which implements the ops of src/backend/cpu/elementwise.cpp (the oracle: same math).
//
//   sigmoid  y = 1/(1 + e^-x)     dx = dy · σ(x)(1 - σ(x))
//   tanh     y = tanh x           dx = dy · (1 - tanh² x)
//   silu     y = x σ(x)           dx = dy · σ(x)(1 + x(1 - σ(x)))
//   sub, mul y = a - b, a · b     (y may be a)
//
// Memory-bound, one grid-stride loop each (float4 when every pointer is 16-byte aligned).
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__device__ __forceinline__ float sigm(float x) {
  // Two forms so that neither overflows: e^x/(1 + e^x) below zero, 1/(1 + e^-x) above.
  if (x < 0.f) {
    const float e = expf(x);
    return e / (1.f + e);
  }
  return 1.f / (1.f + expf(-x));
}

template <Unary U>
__device__ __forceinline__ float fwd(float x) {
  if constexpr (U == Unary::Sigmoid) return sigm(x);
  else if constexpr (U == Unary::Tanh) return tanhf(x);
  else return x * sigm(x);
}

template <Unary U>
__device__ __forceinline__ float bwd(float x, float g) {
  if constexpr (U == Unary::Sigmoid) {
    const float s = sigm(x);
    return g * s * (1.f - s);
  } else if constexpr (U == Unary::Tanh) {
    const float t = tanhf(x);
    return g * (1.f - t * t);
  } else {
    const float s = sigm(x);
    return g * s * (1.f + x * (1.f - s));
  }
}

template <Unary U>
__global__ void unary_fwd_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, bool vec) {
  grid_stride_vec4(
      n, vec,
      [&](int64_t v) {
        const float4 a = reinterpret_cast<const float4*>(x)[v];
        reinterpret_cast<float4*>(y)[v] = make_float4(fwd<U>(a.x), fwd<U>(a.y), fwd<U>(a.z), fwd<U>(a.w));
      },
      [&](int64_t i) { y[i] = fwd<U>(x[i]); });
}

template <Unary U>
__global__ void unary_bwd_kernel(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx,
                                 int64_t n, bool vec) {
  grid_stride_vec4(
      n, vec,
      [&](int64_t v) {
        const float4 a = reinterpret_cast<const float4*>(x)[v];
        const float4 g = reinterpret_cast<const float4*>(dy)[v];
        reinterpret_cast<float4*>(dx)[v] =
            make_float4(bwd<U>(a.x, g.x), bwd<U>(a.y, g.y), bwd<U>(a.z, g.z), bwd<U>(a.w, g.w));
      },
      [&](int64_t i) { dx[i] = bwd<U>(x[i], dy[i]); });
}

// y may alias a: no __restrict__ on those two.
template <Binary B>
__global__ void binary_kernel(const float* a, const float* __restrict__ b, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = B == Binary::Sub ? a[i] - b[i] : a[i] * b[i];
}

template <Unary U>
void launch_unary(const float* x, float* y, int64_t n, cudaStream_t s) {
  const bool vec = aligned16(x) && aligned16(y);
  unary_fwd_kernel<U><<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(x, y, n, vec);
  CUDA_CHECK_LAUNCH("unary_fwd_kernel");
}

template <Unary U>
void launch_unary_bwd(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  const bool vec = aligned16(x) && aligned16(dy) && aligned16(dx);
  unary_bwd_kernel<U><<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(x, dy, dx, n, vec);
  CUDA_CHECK_LAUNCH("unary_bwd_kernel");
}

}  // namespace

void unary_forward(const float* x, float* y, int64_t n, Unary op, cudaStream_t s) {
  if (n <= 0) return;
  switch (op) {
    case Unary::Sigmoid: launch_unary<Unary::Sigmoid>(x, y, n, s); break;
    case Unary::Tanh: launch_unary<Unary::Tanh>(x, y, n, s); break;
    case Unary::SiLU: launch_unary<Unary::SiLU>(x, y, n, s); break;
  }
}

void unary_backward(const float* x, const float* dy, float* dx, int64_t n, Unary op, cudaStream_t s) {
  if (n <= 0) return;
  switch (op) {
    case Unary::Sigmoid: launch_unary_bwd<Unary::Sigmoid>(x, dy, dx, n, s); break;
    case Unary::Tanh: launch_unary_bwd<Unary::Tanh>(x, dy, dx, n, s); break;
    case Unary::SiLU: launch_unary_bwd<Unary::SiLU>(x, dy, dx, n, s); break;
  }
}

void binary(const float* a, const float* b, float* y, int64_t n, Binary op, cudaStream_t s) {
  if (n <= 0) return;
  if (op == Binary::Sub)
    binary_kernel<Binary::Sub><<<grid_for(n), kBlock, 0, s>>>(a, b, y, n);
  else
    binary_kernel<Binary::Mul><<<grid_for(n), kBlock, 0, s>>>(a, b, y, n);
  CUDA_CHECK_LAUNCH("binary_kernel");
}

}  // namespace edp::cuda::kern
