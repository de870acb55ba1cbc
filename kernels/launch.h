// Launch-configuration and layout math of the CUDA backend, kept free of CUDA types so that it
// compiles in every build and is unit-tested on machines without a GPU (tests/cuda/
// launch_math_test.cpp). The kernels' host launchers (kernels/*.cu) and the library wrappers
// (src/cuda/*.cpp) call exactly these functions, so the CPU tests check the code that runs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

// Functions also called from device code are marked EDP_HD.
#if defined(__CUDACC__)
#define EDP_HD __host__ __device__
#else
#define EDP_HD
#endif

namespace edp::cuda {

// ---- elementwise grids -------------------------------------------------------------------------
// Grid-stride kernels: enough blocks to fill the device (blocks_per_sm per multiprocessor), never
// more than the work needs, never more than CUDA's grid limit. `work` is the number of items one
// thread handles once per stride (elements, or 4-element vectors). 0 work → 0 blocks (the
// launcher then skips the launch: a 0-block launch is an error in CUDA).
inline int64_t grid_size(int64_t work, int block, int sm_count, int blocks_per_sm = 8) {
  if (work <= 0) return 0;
  const int64_t needed = (work + block - 1) / block;
  const int64_t full = static_cast<int64_t>(std::max(1, sm_count)) * blocks_per_sm;
  return std::max<int64_t>(1, std::min<int64_t>({needed, full, int64_t{2147483647}}));
}

// True when a float pointer may be read/written as float4 (16-byte aligned).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- two-stage per-channel reductions (BatchNorm statistics, bias gradients) -------------------
// A channel's M values are split into `splits` contiguous ranges, one block each, so that a
// layer with few channels still fills the device; the partials are combined in a fixed order
// (deterministic). Each block should see at least min_per_block values.
inline int64_t channel_splits(int64_t channels, int64_t per_channel, int sm_count,
                              int64_t min_per_block = 4096, int blocks_per_sm = 4) {
  if (channels <= 0 || per_channel <= 0) return 1;
  const int64_t want = (static_cast<int64_t>(std::max(1, sm_count)) * blocks_per_sm + channels - 1) / channels;
  const int64_t most = std::max<int64_t>(1, per_channel / min_per_block);
  return std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 1024));
}
// The same for column sums of a row-major [rows, columns] matrix (a Linear's bias gradient): there
// one thread sums one column over its split, so a split takes ceil(columns / block) blocks, not
// one per channel; the rows are split until the device is full, each split at least min_rows.
constexpr int kColumnBlock = 256;  // threads per block of the column-sum kernel
inline int64_t column_splits(int64_t columns, int64_t rows, int sm_count, int block = kColumnBlock,
                             int64_t min_rows = 32, int blocks_per_sm = 4) {
  if (columns <= 0 || rows <= 0) return 1;
  const int64_t blocks = (columns + block - 1) / block;
  const int64_t want = (static_cast<int64_t>(std::max(1, sm_count)) * blocks_per_sm + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, rows / min_rows);
  return std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 65535));
}
// The [begin, end) share of split s of `splits` over n values.
EDP_HD inline void split_range(int64_t n, int64_t s, int64_t splits, int64_t& begin, int64_t& end) {
  begin = n * s / splits;
  end = n * (s + 1) / splits;
}

// ---- multi-tensor apply (fused optimizer updates, gradient scaling) ------------------------------
// Many tensors are updated by few launches: each launch carries up to kMaxTensors tensors and
// up to kMaxBlocks (tensor, chunk) pairs in its kernel argument, each block one chunk of
// kChunk elements. A tensor larger than what fits in one launch continues in the next.
struct MultiTensorLimits {
  int max_tensors = 24;
  int max_blocks = 320;
  int64_t chunk = 65536;
};

struct MultiTensorLaunch {
  std::vector<int> tensors;     // indices into the caller's list, in order
  std::vector<int> block_tensor;  // per block: position within `tensors`
  std::vector<int> block_chunk;   // per block: chunk index within that tensor
};

// Tensors of size 0 are skipped. Every (tensor, chunk) appears exactly once over all launches.
inline std::vector<MultiTensorLaunch> plan_multi_tensor(const std::vector<int64_t>& sizes,
                                                        MultiTensorLimits lim = {}) {
  std::vector<MultiTensorLaunch> out;
  MultiTensorLaunch cur;
  auto flush = [&] {
    if (!cur.block_tensor.empty()) out.push_back(std::move(cur));
    cur = MultiTensorLaunch{};
  };
  for (size_t t = 0; t < sizes.size(); ++t) {
    if (sizes[t] <= 0) continue;
    const int64_t chunks = (sizes[t] + lim.chunk - 1) / lim.chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (cur.tensors.empty() || cur.tensors.back() != static_cast<int>(t)) {
        if (static_cast<int>(cur.tensors.size()) == lim.max_tensors) flush();
        cur.tensors.push_back(static_cast<int>(t));
      }
      cur.block_tensor.push_back(static_cast<int>(cur.tensors.size()) - 1);
      cur.block_chunk.push_back(static_cast<int>(c));
      if (static_cast<int>(cur.block_tensor.size()) == lim.max_blocks) flush();
    }
  }
  flush();
  return out;
}

// ---- row-major Linear on a column-major BLAS ----------------------------------------------------
// cuBLAS(Lt) is column-major; edp stores x[N, I], w[O, I], y[N, O] row-major. A row-major
// matrix R[r, c] is the column-major matrix Rᵀ[c, r] with leading dimension c, so each pass of
// Linear becomes one column-major product D[m, n] = op(A)[m, k] · op(B)[k, n] (+ beta·D):
//   forward  y = x wᵀ      → yᵀ[O, N]  = (wᵀ as stored [I, O])ᵀ · (xᵀ [I, N])        A=w, B=x
//   dx      dx = dy w      → dxᵀ[I, N] = (wᵀ [I, O]) · (dyᵀ [O, N])                 A=w, B=dy
//   dw     dw += dyᵀ x     → dwᵀ[I, O] = (xᵀ [I, N]) · (dyᵀ [O, N])ᵀ, beta = 1        A=x, B=dy
enum class LinearPass { Forward, GradInput, GradWeight };
enum class Operand { X, W, DY };

struct GemmSpec {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;  // leading dimensions (column-major)
  Operand a = Operand::W, b = Operand::X;
  float beta = 0.0f;                  // 1 for the accumulating weight gradient
  // Rows/columns of A and B as stored (column-major), for the matrix layouts.
  int64_t a_rows() const { return trans_a ? k : m; }
  int64_t a_cols() const { return trans_a ? m : k; }
  int64_t b_rows() const { return trans_b ? n : k; }
  int64_t b_cols() const { return trans_b ? k : n; }
};

inline GemmSpec linear_gemm(LinearPass pass, int64_t N, int64_t I, int64_t O) {
  GemmSpec g;
  switch (pass) {
    case LinearPass::Forward:
      g.trans_a = true; g.trans_b = false;
      g.m = O; g.n = N; g.k = I;
      g.lda = I; g.ldb = I; g.ldd = O;
      g.a = Operand::W; g.b = Operand::X;
      break;
    case LinearPass::GradInput:
      g.trans_a = false; g.trans_b = false;
      g.m = I; g.n = N; g.k = O;
      g.lda = I; g.ldb = O; g.ldd = I;
      g.a = Operand::W; g.b = Operand::DY;
      break;
    case LinearPass::GradWeight:
      g.trans_a = false; g.trans_b = true;
      g.m = I; g.n = O; g.k = N;
      g.lda = I; g.ldb = O; g.ldd = I;
      g.a = Operand::X; g.b = Operand::DY;
      g.beta = 1.0f;
      break;
  }
  return g;
}

// ---- deterministic full reductions (sum, sum of squares) ------------------------------------------
// The number of first-stage blocks depends on n only, never on the device, so that a sum is
// bitwise the same on every GPU: each block accumulates a fixed strided subset in double, and
// one block combines the partials in order.
inline int reduce_blocks(int64_t n) {
  const int64_t b = (n + 4095) / 4096;
  return static_cast<int>(std::clamp<int64_t>(b, 1, 1024));
}

}  // namespace edp::cuda
