// Token + position embedding on the CPU (float32, float64; ids int32): the oracle of
// backend/cuda/embedding.cpp and kernels/embedding.cu.
//
//   forward   y[b, t, :] = wte[ids[b, t], :] + wpe[t, :]
//   backward  dwte[v, :] += Σ_{(b,t): ids[b,t] = v} dy[b, t, :];   dwpe[t, :] += Σ_b dy[b, t, :]
//
// Gradient contract: parameter gradients accumulate (dwte +=, dwpe +=); the ids have no gradient.
// The token gradient is sparse-friendly: a counting sort groups the positions of each token id
// (in position order), then each present id's row is summed by one owner thread. Only rows of
// tokens in the batch are touched, and every row's sum runs in position order, so the result is
// the same for any thread count.
#include <vector>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {
void check_embedding(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const char* op) {
  require_cpu(ids, op, "ids");
  require_cpu(wte, op, "token table");
  require_cpu(wpe, op, "position table");
  EDP_CHECK_SHAPE(ids.dtype() == DType::I32 && ids.ndim() == 2, op, ": ids must be int32 [B, T], got ", ids.str());
  EDP_CHECK_SHAPE(wte.ndim() == 2 && wpe.ndim() == 2 && wte.dim(1) == wpe.dim(1), op, ": token table ",
                  wte.shape().str(), " and position table ", wpe.shape().str(), " must be [V, D] and [Tmax, D]");
  EDP_CHECK_SHAPE(ids.dim(1) <= wpe.dim(0), op, ": sequence length ", ids.dim(1), " exceeds the ", wpe.dim(0),
                  " positions of the position table");
  require_dtype(wte, wpe, op);
  const int32_t* id = ids.data<int32_t>();
  const int64_t V = wte.dim(0), T = ids.dim(1);
  for (int64_t i = 0; i < ids.numel(); ++i)
    EDP_CHECK_SHAPE(id[i] >= 0 && id[i] < V, op, ": token id ", id[i], " at [", i / T, ", ", i % T,
                    "] is outside the vocabulary [0, ", V, ")");
}
}  // namespace

Tensor embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe) {
#if EDP_HAVE_CUDA
  if (on_cuda(ids, wte, wpe)) return cuda::embedding_forward(ids, wte, wpe);
#endif
  const char* op = "embedding_forward";
  check_embedding(ids, wte, wpe, op);
  const int64_t B = ids.dim(0), T = ids.dim(1), D = wte.dim(1);
  Tensor y({B, T, D}, wte.dtype());
  const int32_t* id = ids.data<int32_t>();
  dispatch_float(wte.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* e = wte.data<T_>();
    const T_* p = wpe.data<T_>();
    T_* o = y.data<T_>();
#pragma omp parallel for schedule(static) if (B * T * D > 65536)
    for (int64_t i = 0; i < B * T; ++i) {
      const T_* er = e + static_cast<int64_t>(id[i]) * D;
      const T_* pr = p + (i % T) * D;
      T_* orow = o + i * D;
      for (int64_t d = 0; d < D; ++d) orow[d] = er[d] + pr[d];
    }
  });
  return y;
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dwte, Tensor& dwpe) {
#if EDP_HAVE_CUDA
  if (on_cuda(ids, dy, dwte, dwpe)) return cuda::embedding_backward(ids, dy, dwte, dwpe);
#endif
  const char* op = "embedding_backward";
  check_embedding(ids, dwte, dwpe, op);
  const int64_t B = ids.dim(0), T = ids.dim(1), D = dwte.dim(1), V = dwte.dim(0), N = B * T;
  EDP_CHECK_SHAPE(dy.ndim() == 3 && dy.dim(0) == B && dy.dim(1) == T && dy.dim(2) == D, op, ": grad_output ",
                  dy.shape().str(), " does not match [", B, ", ", T, ", ", D, "]");
  require_dtype(dy, dwte, op);
  const int32_t* id = ids.data<int32_t>();
  // Counting sort of the positions by token id (stable: position order within an id).
  std::vector<int64_t> start(static_cast<size_t>(V) + 1, 0), order(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) ++start[static_cast<size_t>(id[i]) + 1];
  for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < N; ++i) order[static_cast<size_t>(fill[static_cast<size_t>(id[i])]++)] = i;
  std::vector<int32_t> present;
  for (int64_t v = 0; v < V; ++v)
    if (start[v + 1] > start[v]) present.push_back(static_cast<int32_t>(v));
  const int64_t P = static_cast<int64_t>(present.size());
  dispatch_float(dy.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* g = dy.data<T_>();
    T_* de = dwte.data<T_>();
    T_* dp = dwpe.data<T_>();
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
      for (int64_t k = 0; k < P; ++k) {
        const int64_t v = present[static_cast<size_t>(k)];
        T_* row = de + v * D;
        for (int64_t j = start[v]; j < start[v + 1]; ++j) {
          const T_* gr = g + order[static_cast<size_t>(j)] * D;
          for (int64_t d = 0; d < D; ++d) row[d] += gr[d];
        }
      }
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        T_* row = dp + t * D;
        for (int64_t b = 0; b < B; ++b) {
          const T_* gr = g + (b * T + t) * D;
          for (int64_t d = 0; d < D; ++d) row[d] += gr[d];
        }
      }
    }
  });
}

}  // namespace edp::ops
