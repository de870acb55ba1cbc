// Fused bias + activation, forward and backward: the kernels of src/backend/cuda/activation.cpp,
// which implements the ops of src/backend/cpu/activation.cpp (the oracle: same math).
//
//   forward   z = x + b[c]            (b broadcast over channel axis 1; optional)
//             y = act(z):  Identity z,  ReLU max(z, 0),  GELU z·Φ(z) = ½ z erfc(-z/√2)
//   backward  dz = dy · act'(z):  Identity 1,  ReLU [z > 0] (y > 0 is the same test),
//             GELU Φ(z) + z φ(z),  φ(z) = e^{-z²/2}/√(2π)
//             db[c] += Σ dz over all but axis 1   (reduce.cu: channel_sum_accumulate)
//
// GELU uses erfc rather than 1 + erf: for z << 0, 1 + erf(z/√2) cancels to a few ulps while
// erfc keeps full relative precision (the CPU backend's erf form agrees to ~1e-7 absolute).
// Memory-bound: float4 loads/stores when all pointers are 16-byte aligned, a scalar tail.
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

template <Act A>
__device__ __forceinline__ float act_f(float z) {
  if constexpr (A == Act::ReLU) return z > 0.f ? z : 0.f;
  else if constexpr (A == Act::GELU) return 0.5f * z * erfcf(-z * kInvSqrt2);
  else return z;
}

template <Act A>
__device__ __forceinline__ float act_grad(float z, float g) {
  if constexpr (A == Act::ReLU) return z > 0.f ? g : 0.f;
  else if constexpr (A == Act::GELU) {
    const float cdf = 0.5f * erfcf(-z * kInvSqrt2);
    const float pdf = kInvSqrt2Pi * expf(-0.5f * z * z);
    return g * (cdf + z * pdf);
  } else return g;
}

// Index is uint32_t when n < 2^31 (cheaper channel division), else int64_t.
// x may equal y (in place: the bias epilogue of Linear/Conv2d when the library cannot fuse it),
// so neither is __restrict__.
template <Act A, bool Bias, typename Index>
__global__ void bias_act_fwd_kernel(const float* x, const float* __restrict__ b, float* y, Index n,
                                    Index C, Index inner, bool vec) {
  auto chan = [&](Index i) { return Bias ? b[(i / inner) % C] : 0.f; };
  grid_stride_vec4(
      n, vec,
      [&](Index v) {
        const float4 a = reinterpret_cast<const float4*>(x)[v];
        const Index i = v * 4;
        float4 o;
        o.x = act_f<A>(a.x + chan(i));
        o.y = act_f<A>(a.y + chan(i + 1));
        o.z = act_f<A>(a.z + chan(i + 2));
        o.w = act_f<A>(a.w + chan(i + 3));
        reinterpret_cast<float4*>(y)[v] = o;
      },
      [&](Index i) { y[i] = act_f<A>(x[i] + chan(i)); });
}

template <Act A>
__global__ void act_bwd_kernel(const float* __restrict__ z, const float* __restrict__ dy,
                               float* __restrict__ dz, int64_t n, bool vec) {
  grid_stride_vec4(
      n, vec,
      [&](int64_t v) {
        const float4 a = reinterpret_cast<const float4*>(z)[v];
        const float4 g = reinterpret_cast<const float4*>(dy)[v];
        float4 o;
        o.x = act_grad<A>(a.x, g.x);
        o.y = act_grad<A>(a.y, g.y);
        o.z = act_grad<A>(a.z, g.z);
        o.w = act_grad<A>(a.w, g.w);
        reinterpret_cast<float4*>(dz)[v] = o;
      },
      [&](int64_t i) { dz[i] = act_grad<A>(z[i], dy[i]); });
}

template <Act A, bool Bias>
void launch_fwd(const float* x, const float* b, float* y, int64_t n, int64_t C, int64_t inner,
                cudaStream_t s) {
  const bool vec = aligned16(x) && aligned16(y);
  const unsigned grid = grid_for(vec ? (n + 3) / 4 : n);
  if (n <= static_cast<int64_t>(INT32_MAX)) {  // i + stride cannot wrap
    bias_act_fwd_kernel<A, Bias, uint32_t><<<grid, kBlock, 0, s>>>(
        x, b, y, static_cast<uint32_t>(n), static_cast<uint32_t>(C), static_cast<uint32_t>(inner), vec);
  } else {
    bias_act_fwd_kernel<A, Bias, int64_t><<<grid, kBlock, 0, s>>>(x, b, y, n, C, inner, vec);
  }
  CUDA_CHECK_LAUNCH("bias_act_fwd_kernel");
}

template <Act A>
void launch_bwd(const float* z, const float* dy, float* dz, int64_t n, cudaStream_t s) {
  const bool vec = aligned16(z) && aligned16(dy) && aligned16(dz);
  act_bwd_kernel<A><<<grid_for(vec ? (n + 3) / 4 : n), kBlock, 0, s>>>(z, dy, dz, n, vec);
  CUDA_CHECK_LAUNCH("act_bwd_kernel");
}

}  // namespace

void bias_act_forward(const float* x, const float* b, float* y, int64_t n, int64_t C,
                      int64_t inner, Act act, cudaStream_t s) {
  if (n <= 0) return;
  if (!b) {
    C = 1;
    inner = 1;
  }
  switch (act) {
    case Act::Identity:
      b ? launch_fwd<Act::Identity, true>(x, b, y, n, C, inner, s)
        : launch_fwd<Act::Identity, false>(x, b, y, n, C, inner, s);
      break;
    case Act::ReLU:
      b ? launch_fwd<Act::ReLU, true>(x, b, y, n, C, inner, s)
        : launch_fwd<Act::ReLU, false>(x, b, y, n, C, inner, s);
      break;
    case Act::GELU:
      b ? launch_fwd<Act::GELU, true>(x, b, y, n, C, inner, s)
        : launch_fwd<Act::GELU, false>(x, b, y, n, C, inner, s);
      break;
  }
}

void act_backward(const float* z, const float* dy, float* dz, int64_t n, Act act, cudaStream_t s) {
  if (n <= 0) return;
  switch (act) {
    case Act::Identity: launch_bwd<Act::Identity>(z, dy, dz, n, s); break;
    case Act::ReLU: launch_bwd<Act::ReLU>(z, dy, dz, n, s); break;
    case Act::GELU: launch_bwd<Act::GELU>(z, dy, dz, n, s); break;
  }
}

}  // namespace edp::cuda::kern
