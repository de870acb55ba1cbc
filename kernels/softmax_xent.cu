// Softmax cross-entropy, forward and backward, and the count of correct predictions: the kernels
// of src/backend/cuda/softmax_xent.cpp, which implements src/backend/cpu/softmax_xent.cpp (the
// oracle).
//
//   forward   m = max_c z_c,  s = Σ_c e^{z_c - m},  p_c = e^{z_c - m - log s}
//             loss_n = -(z_label - m - log s),  L = (1/N) Σ_n loss_n
//   backward  dL/dz_c = (p_c - [c = label]) · scale      (scale = 1/N for the mean loss)
//
// One warp per row (class counts are small next to batch sizes); the exponentials and the row
// sum are in double like the CPU backend, so probabilities agree to float rounding. The mean is
// taken by one block over the per-row losses in a fixed order (deterministic). An invalid label
// does not read out of bounds: its row is flagged, and the host reports the first flagged row.
// The sequence form's ignored rows (label == ignore_index) have no loss and a zero gradient; the
// plain form passes INT_MIN, which no label equals.
#include <cfloat>
#include <climits>

#include "common.cuh"

namespace edp::cuda::kern {
namespace {

constexpr int kRowsPerBlock = kBlock / 32;

__global__ void softmax_xent_fwd_kernel(const float* __restrict__ z,
                                        const int32_t* __restrict__ labels,
                                        int32_t ignore, float* __restrict__ probs,
                                        double* __restrict__ row_loss, int32_t* __restrict__ row_flag,
                                        int32_t* __restrict__ valid, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;  // uniform per warp
  const float* zr = z + row * C;
  float* pr = probs + row * C;
  float mx = -INFINITY;
  for (int64_t c = lane; c < C; c += 32) mx = fmaxf(mx, zr[c]);
  mx = warp_max(mx);
  double s = 0;
  for (int64_t c = lane; c < C; c += 32) s += exp(static_cast<double>(zr[c] - mx));
  s = warp_sum(s);
  const double log_s = log(s);
  for (int64_t c = lane; c < C; c += 32)
    pr[c] = static_cast<float>(exp(static_cast<double>(zr[c] - mx) - log_s));
  if (lane == 0) {
    const int32_t lab = labels[row];
    const bool skip = lab == ignore;
    const bool bad = !skip && (lab < 0 || lab >= C);
    row_flag[row] = bad ? 1 : 0;
    if (valid) valid[row] = bad || skip ? 0 : 1;
    row_loss[row] = bad || skip ? 0.0 : -(static_cast<double>(zr[lab] - mx) - log_s);
  }
}

__device__ __forceinline__ long long warp_min(long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const long long w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w < v ? w : v;
  }
  return v;
}

__global__ void __launch_bounds__(1024) rows_finalize_kernel(const double* __restrict__ row_val,
                                     const int32_t* __restrict__ row_flag, int64_t N,
                                     bool count_mode, double* __restrict__ out) {
  __shared__ double scratch[32];
  __shared__ long long mins[32];
  double acc = 0, count = 0;
  long long first = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    if (row_val) acc += row_val[i];
    if (row_flag[i]) {
      count += 1;
      if (i < first) first = i;
    }
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = N > 0 && row_val ? acc / static_cast<double>(N) : 0.0;
  count = block_sum(count, scratch);
  first = warp_min(first);
  if ((threadIdx.x & 31) == 0) mins[threadIdx.x >> 5] = first;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long m = LLONG_MAX;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) m = mins[w] < m ? mins[w] : m;
    out[1] = count_mode ? count : (m == LLONG_MAX ? -1.0 : static_cast<double>(m));
  }
}

__global__ void softmax_xent_bwd_kernel(const float* __restrict__ probs,
                                        const int32_t* __restrict__ labels, int32_t ignore,
                                        float* __restrict__ dz, int64_t N, int64_t C, float scale) {
  const int64_t n = N * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / C, c = i - row * C;
    const int32_t lab = labels[row];
    dz[i] = lab == ignore ? 0.f : (probs[i] - (c == lab ? 1.f : 0.f)) * scale;
  }
}

// First maximum wins, as in the CPU backend (strict > in increasing class order).
__global__ void correct_rows_kernel(const float* __restrict__ z, const int32_t* __restrict__ labels,
                                    int32_t* __restrict__ row_flag, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;
  const float* zr = z + row * C;
  float best = -INFINITY;
  long long bi = LLONG_MAX;
  for (int64_t c = lane; c < C; c += 32)
    if (bi == LLONG_MAX || zr[c] > best) {
      best = zr[c];
      bi = c;
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi != LLONG_MAX && (bi == LLONG_MAX || ob > best || (ob == best && oi < bi))) {
      best = ob;
      bi = oi;
    }
  }
  if (lane == 0) row_flag[row] = bi == static_cast<long long>(labels[row]) ? 1 : 0;
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void softmax_xent_forward(const float* z, const int32_t* labels, float* probs, double* row_loss,
                          int32_t* row_flag, int64_t N, int64_t C, cudaStream_t s) {
  if (N <= 0) return;
  softmax_xent_fwd_kernel<<<row_blocks(N), kBlock, 0, s>>>(z, labels, INT_MIN, probs, row_loss, row_flag,
                                                           nullptr, N, C);
  CUDA_CHECK_LAUNCH("softmax_xent_fwd_kernel");
}

void softmax_xent_forward_ignore(const float* z, const int32_t* labels, int32_t ignore_index, float* probs,
                                 double* row_loss, int32_t* row_flag, int32_t* valid, int64_t N, int64_t C,
                                 cudaStream_t s) {
  if (N <= 0) return;
  softmax_xent_fwd_kernel<<<row_blocks(N), kBlock, 0, s>>>(z, labels, ignore_index, probs, row_loss, row_flag,
                                                           valid, N, C);
  CUDA_CHECK_LAUNCH("softmax_xent_fwd_kernel");
}

void rows_finalize(const double* row_val, const int32_t* row_flag, int64_t N, bool count_mode,
                   double* out, cudaStream_t s) {
  rows_finalize_kernel<<<1, 1024, 0, s>>>(row_val, row_flag, N, count_mode, out);
  CUDA_CHECK_LAUNCH("rows_finalize_kernel");
}

void softmax_xent_backward(const float* probs, const int32_t* labels, float* dz, int64_t N,
                           int64_t C, float scale, cudaStream_t s) {
  if (N * C <= 0) return;
  softmax_xent_bwd_kernel<<<grid_for(N * C), kBlock, 0, s>>>(probs, labels, INT_MIN, dz, N, C, scale);
  CUDA_CHECK_LAUNCH("softmax_xent_bwd_kernel");
}

void softmax_xent_backward_ignore(const float* probs, const int32_t* labels, int32_t ignore_index, float* dz,
                                  int64_t N, int64_t C, float scale, cudaStream_t s) {
  if (N * C <= 0) return;
  softmax_xent_bwd_kernel<<<grid_for(N * C), kBlock, 0, s>>>(probs, labels, ignore_index, dz, N, C, scale);
  CUDA_CHECK_LAUNCH("softmax_xent_bwd_kernel");
}

void correct_rows(const float* z, const int32_t* labels, int32_t* row_flag, int64_t N, int64_t C,
                  cudaStream_t s) {
  if (N <= 0) return;
  correct_rows_kernel<<<row_blocks(N), kBlock, 0, s>>>(z, labels, row_flag, N, C);
  CUDA_CHECK_LAUNCH("correct_rows_kernel");
}

}  // namespace edp::cuda::kern
