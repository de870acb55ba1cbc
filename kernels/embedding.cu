// Token + position embedding, forward and backward: the kernels of src/backend/cuda/embedding.cpp,
// which implements src/backend/cpu/embedding.cpp (the oracle).
//
//   forward   y[i, :] = wte[ids[i], :] + wpe[i mod T, :]
//   backward  dwte[v, :] += Σ_{i: ids[i] = v} dy[i, :]   (one block per present token v, its
//             positions summed in increasing order: deterministic, no atomics)
//             dwpe[t, :] += Σ_b dy[b·T + t, :]            (one thread per (t, d), b in order)
#include "common.cuh"

namespace edp::cuda::kern {
namespace {

__global__ void embedding_fwd_kernel(const int32_t* __restrict__ ids, const float* __restrict__ wte,
                                     const float* __restrict__ wpe, float* __restrict__ y, int64_t N, int64_t T,
                                     int64_t D) {
  const int64_t n = N * D, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / D, d = i - row * D;
    y[i] = wte[static_cast<int64_t>(ids[row]) * D + d] + wpe[(row % T) * D + d];
  }
}

__global__ void embedding_token_grad_kernel(const float* __restrict__ dy, const int64_t* __restrict__ order,
                                            const int64_t* __restrict__ start, const int32_t* __restrict__ tokens,
                                            float* __restrict__ dwte, int64_t D) {
  const int64_t k = blockIdx.x;
  float* row = dwte + static_cast<int64_t>(tokens[k]) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = start[k]; j < start[k + 1]; ++j) acc += dy[order[j] * D + d];
    row[d] += acc;
  }
}

__global__ void embedding_pos_grad_kernel(const float* __restrict__ dy, float* __restrict__ dwpe, int64_t B,
                                          int64_t T, int64_t D) {
  const int64_t n = T * D, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float acc = 0.f;
    for (int64_t b = 0; b < B; ++b) acc += dy[b * n + i];
    dwpe[i] += acc;
  }
}

}  // namespace

void embedding_forward(const int32_t* ids, const float* wte, const float* wpe, float* y, int64_t N, int64_t T,
                       int64_t D, cudaStream_t s) {
  if (N * D <= 0) return;
  embedding_fwd_kernel<<<grid_for(N * D), kBlock, 0, s>>>(ids, wte, wpe, y, N, T, D);
  CUDA_CHECK_LAUNCH("embedding_fwd_kernel");
}

void embedding_backward(const float* dy, const int64_t* order, const int64_t* start, const int32_t* tokens,
                        int64_t P, float* dwte, float* dwpe, int64_t B, int64_t T, int64_t D, cudaStream_t s) {
  if (D <= 0) return;
  if (P > 0) {
    embedding_token_grad_kernel<<<static_cast<unsigned>(P), kBlock, 0, s>>>(dy, order, start, tokens, dwte, D);
    CUDA_CHECK_LAUNCH("embedding_token_grad_kernel");
  }
  if (T * D > 0) {
    embedding_pos_grad_kernel<<<grid_for(T * D), kBlock, 0, s>>>(dy, dwpe, B, T, D);
    CUDA_CHECK_LAUNCH("embedding_pos_grad_kernel");
  }
}

}  // namespace edp::cuda::kern
