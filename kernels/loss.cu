// Pointwise losses: the kernels of src/backend/cuda/loss.cpp, which implements the ops of
// src/backend/cpu/loss.cpp (the oracle: same math). With d = p - t:
//   mse         ℓ = d²                                  ∂ℓ/∂p = 2d
//   l1          ℓ = |d|                                 ∂ℓ/∂p = sign(d)   (0 at d = 0)
//   huber(δ)    ℓ = ½d² for |d| ≤ δ, δ(|d| - ½δ) beyond  ∂ℓ/∂p = clamp(d, -δ, δ)
//   bce_logits  ℓ = max(p, 0) - p t + log1p(e^-|p|)     ∂ℓ/∂p = σ(p) - t
// The mean is the reduce.cu sum of the per-element losses (deterministic).
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__global__ void loss_fwd_kernel(const float* __restrict__ p, const float* __restrict__ t, float* __restrict__ l,
                                int64_t n, int kind, float delta) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = p[i] - t[i], a = fabsf(d);
    float v;
    switch (kind) {
      case 0: v = d * d; break;
      case 1: v = a; break;
      case 2: v = a <= delta ? 0.5f * d * d : delta * (a - 0.5f * delta); break;
      default: v = fmaxf(p[i], 0.f) - p[i] * t[i] + log1pf(expf(-fabsf(p[i]))); break;
    }
    l[i] = v;
  }
}

__global__ void loss_bwd_kernel(const float* __restrict__ p, const float* __restrict__ t, float* __restrict__ g,
                                int64_t n, int kind, float delta, float scale) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = p[i] - t[i];
    float v;
    switch (kind) {
      case 0: v = 2.f * d; break;
      case 1: v = d > 0.f ? 1.f : d < 0.f ? -1.f : 0.f; break;
      case 2: v = fminf(fmaxf(d, -delta), delta); break;
      default: {
        const float e = expf(-fabsf(p[i]));
        v = (p[i] >= 0.f ? 1.f / (1.f + e) : e / (1.f + e)) - t[i];
        break;
      }
    }
    g[i] = scale * v;
  }
}

}  // namespace

void point_loss_forward(const float* p, const float* t, float* l, int64_t n, int kind, float delta, cudaStream_t s) {
  if (n <= 0) return;
  loss_fwd_kernel<<<grid_for(n), kBlock, 0, s>>>(p, t, l, n, kind, delta);
  CUDA_CHECK_LAUNCH("loss_fwd_kernel");
}

void point_loss_backward(const float* p, const float* t, float* g, int64_t n, int kind, float delta, float scale,
                         cudaStream_t s) {
  if (n <= 0) return;
  loss_bwd_kernel<<<grid_for(n), kBlock, 0, s>>>(p, t, g, n, kind, delta, scale);
  CUDA_CHECK_LAUNCH("loss_bwd_kernel");
}

}  // namespace edp::cuda::kern
