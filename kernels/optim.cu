// Fused multi-tensor optimizer updates and gradient scaling: the kernels of
// src/backend/cuda/optim.cpp, which implements src/backend/cpu/optim.cpp (the oracle; the math of
// include/edp/optim/optimizer.h, PyTorch's rules):
//
//   SGD     d = g + wd·p;  b = first ? d : μ·b + (1 - dampening)·d;  d = nesterov ? d + μ·b : b;
//           p -= lr·d                                          (b only when μ > 0)
//   AdamW   p *= 1 - lr·wd;  m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;
//           p -= (lr/(1-β1^t)) · m / (√v · (1/√(1-β2^t)) + ε)
//   scale   g *= s, flag if any result is not finite   (loss scaling, gradient averaging)
//   Σ x²    per-chunk partials in double for the global gradient norm
//
// An optimizer has no backward. One launch updates up to 24 tensors in up to 320 chunks of
// 64 Ki elements (launch.h plan_multi_tensor): a model's whole parameter list takes a handful of
// launches instead of one (or several) per parameter. The pointers travel in the kernel
// argument (< 4 KiB).
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

constexpr int kMTBlock = 512;
constexpr int kMaxT = 24;
constexpr int kMaxB = 320;

template <int L>
struct MTArgs {
  void* ptr[L][kMaxT];
  int64_t n[kMaxT];
  int64_t chunk;
  uint8_t block_tensor[kMaxB];
  int32_t block_chunk[kMaxB];
  int32_t first_block;  // global index of this launch's block 0 (for partials)
};
static_assert(sizeof(MTArgs<4>) < 4096, "kernel argument too large");

template <int L>
__device__ __forceinline__ void block_range(const MTArgs<L>& a, int& t, int64_t& begin, int64_t& end) {
  t = a.block_tensor[blockIdx.x];
  begin = static_cast<int64_t>(a.block_chunk[blockIdx.x]) * a.chunk;
  end = min(a.n[t], begin + a.chunk);
}

__global__ void __launch_bounds__(kMTBlock) sgd_kernel(MTArgs<3> a, SGDArgs h) {
  int t;
  int64_t b0, b1;
  block_range(a, t, b0, b1);
  float* __restrict__ p = static_cast<float*>(a.ptr[0][t]);
  const float* __restrict__ g = static_cast<const float*>(a.ptr[1][t]);
  float* __restrict__ buf = static_cast<float*>(a.ptr[2][t]);
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const float pi = p[i];
    float d = g[i] + h.weight_decay * pi;
    if (h.has_momentum) {
      const float bi = h.first_step ? d : h.momentum * buf[i] + h.dampening_keep * d;
      buf[i] = bi;
      d = h.nesterov ? d + h.momentum * bi : bi;
    }
    p[i] = pi - h.lr * d;
  }
}

__global__ void __launch_bounds__(kMTBlock) adamw_kernel(MTArgs<4> a, AdamWArgs h) {
  int t;
  int64_t b0, b1;
  block_range(a, t, b0, b1);
  float* __restrict__ p = static_cast<float*>(a.ptr[0][t]);
  const float* __restrict__ g = static_cast<const float*>(a.ptr[1][t]);
  float* __restrict__ m = static_cast<float*>(a.ptr[2][t]);
  float* __restrict__ v = static_cast<float*>(a.ptr[3][t]);
  const float one_b1 = 1.f - h.beta1, one_b2 = 1.f - h.beta2;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const float gi = g[i];
    const float pi = p[i] * h.decay;
    const float mi = h.beta1 * m[i] + one_b1 * gi;
    const float vi = h.beta2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - h.step_size * mi / (sqrtf(vi) * h.rbc2 + h.eps);
  }
}

__global__ void __launch_bounds__(kMTBlock) scale_check_kernel(MTArgs<1> a, float s, int32_t* found_inf) {
  int t;
  int64_t b0, b1;
  block_range(a, t, b0, b1);
  float* __restrict__ g = static_cast<float*>(a.ptr[0][t]);
  bool bad = false;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const float r = g[i] * s;
    g[i] = r;
    bad |= !isfinite(r);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1;  // same value from any block
}

__global__ void __launch_bounds__(kMTBlock) sumsq_kernel(MTArgs<1> a, double* __restrict__ partial) {
  __shared__ double scratch[32];
  int t;
  int64_t b0, b1;
  block_range(a, t, b0, b1);
  const float* __restrict__ x = static_cast<const float*>(a.ptr[0][t]);
  double acc = 0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[a.first_block + blockIdx.x] = acc;
}

MultiTensorLimits limits() {
  MultiTensorLimits l;
  l.max_tensors = kMaxT;
  l.max_blocks = kMaxB;
  l.chunk = 65536;
  return l;
}

// Calls launch(args, blocks) for each launch of the plan, with the L pointer lists filled in.
template <int L, typename F>
void for_each_launch(const std::vector<void*> (&lists)[L], const std::vector<int64_t>& n, F&& launch) {
  for (int l = 0; l < L; ++l)
    EDP_CHECK(lists[l].size() == n.size(), "multi-tensor: list ", l, " has ", lists[l].size(),
              " tensors, expected ", n.size());
  const MultiTensorLimits lim = limits();
  int32_t first_block = 0;
  for (const MultiTensorLaunch& ml : plan_multi_tensor(n, lim)) {
    MTArgs<L> a{};
    a.chunk = lim.chunk;
    a.first_block = first_block;
    for (size_t j = 0; j < ml.tensors.size(); ++j) {
      const int t = ml.tensors[j];
      for (int l = 0; l < L; ++l) a.ptr[l][j] = lists[l][static_cast<size_t>(t)];
      a.n[j] = n[static_cast<size_t>(t)];
    }
    for (size_t b = 0; b < ml.block_tensor.size(); ++b) {
      a.block_tensor[b] = static_cast<uint8_t>(ml.block_tensor[b]);
      a.block_chunk[b] = ml.block_chunk[b];
    }
    const unsigned blocks = static_cast<unsigned>(ml.block_tensor.size());
    launch(a, blocks);
    first_block += static_cast<int32_t>(blocks);
  }
}

template <typename P>
std::vector<void*> as_void(const std::vector<P*>& v) {
  std::vector<void*> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = const_cast<void*>(static_cast<const void*>(v[i]));
  return r;
}

}  // namespace

void sgd_multi(const std::vector<float*>& p, const std::vector<const float*>& g,
               const std::vector<float*>& buf, const std::vector<int64_t>& n, const SGDArgs& a,
               cudaStream_t s) {
  const std::vector<void*> lists[3] = {as_void(p), as_void(g),
                                       a.has_momentum ? as_void(buf) : std::vector<void*>(p.size(), nullptr)};
  for_each_launch<3>(lists, n, [&](const MTArgs<3>& args, unsigned blocks) {
    sgd_kernel<<<blocks, kMTBlock, 0, s>>>(args, a);
    CUDA_CHECK_LAUNCH("sgd_kernel");
  });
}

void adamw_multi(const std::vector<float*>& p, const std::vector<const float*>& g,
                 const std::vector<float*>& m, const std::vector<float*>& v,
                 const std::vector<int64_t>& n, const AdamWArgs& a, cudaStream_t s) {
  const std::vector<void*> lists[4] = {as_void(p), as_void(g), as_void(m), as_void(v)};
  for_each_launch<4>(lists, n, [&](const MTArgs<4>& args, unsigned blocks) {
    adamw_kernel<<<blocks, kMTBlock, 0, s>>>(args, a);
    CUDA_CHECK_LAUNCH("adamw_kernel");
  });
}

void scale_check_multi(const std::vector<float*>& g, const std::vector<int64_t>& n, float scale,
                       int32_t* found_inf, cudaStream_t s) {
  const std::vector<void*> lists[1] = {as_void(g)};
  for_each_launch<1>(lists, n, [&](const MTArgs<1>& args, unsigned blocks) {
    scale_check_kernel<<<blocks, kMTBlock, 0, s>>>(args, scale, found_inf);
    CUDA_CHECK_LAUNCH("scale_check_kernel");
  });
}

int64_t multi_tensor_blocks(const std::vector<int64_t>& n) {
  int64_t blocks = 0;
  for (const MultiTensorLaunch& ml : plan_multi_tensor(n, limits()))
    blocks += static_cast<int64_t>(ml.block_tensor.size());
  return blocks;
}

void sumsq_multi(const std::vector<const float*>& x, const std::vector<int64_t>& n,
                 double* partial, cudaStream_t s) {
  const std::vector<void*> lists[1] = {as_void(x)};
  for_each_launch<1>(lists, n, [&](const MTArgs<1>& args, unsigned blocks) {
    sumsq_kernel<<<blocks, kMTBlock, 0, s>>>(args, partial);
    CUDA_CHECK_LAUNCH("sumsq_kernel");
  });
}

}  // namespace edp::cuda::kern
