// Linear on the CPU (float32, float64): the oracle of backend/cuda/linear.cpp (cuBLASLt; no
// kernels/linear.cu — the bias gradient uses kernels/reduce.cu's channel sum).
//
//   forward   y[N, out] = x[N, in] · w[out, in]^T + b[out]   (b optional)
//   backward  dx = dy · w;  dw += dy^T · x;  db += Σ_n dy
//
// Gradient contract: parameter gradients accumulate (dw +=, db +=); the input gradient is
// returned (dx =, a fresh tensor, or undefined when want_dx is false).
// Eigen GEMMs, each split across the OpenMP threads by output columns or rows
// (parallel_ranges: one synchronisation per GEMM; every output element has one owner thread and
// is reduced in the same order for a given thread count). Split this way the example MLP's five
// GEMMs took 346 us per step with 2 threads against 384 us with Eigen's parallel GEMM (commit d38325c,
// 2-core EPYC, near vCPUs) and no more with 1 thread. That split is the path of builds without
// oneDNN; with oneDNN the float32 products go to its matmul through gemm.h (in bfloat16 when
// ops::matmul_bf16() is on), which parallelises them itself: with AVX-512 it ran the GPT example's
// products ~2x faster than Eigen's AVX2 kernels.
#include "common.h"
#include "gemm.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#include <type_traits>
#include <vector>
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {
// Shares of 16 columns: a 64-byte line of a float row belongs to one thread.
constexpr int64_t kAlign = 16;
}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, LinearSaved* saved) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, w, b))
    return cuda::linear_forward(x, w, b);
#endif
  const char* op = "linear_forward";
  require_cpu(x, op, "input");
  require_cpu(w, op, "weight");
  EDP_CHECK_SHAPE(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1), op,
                  ": input ", x.shape().str(), " does not fit weight ", w.shape().str(),
                  " (expected input [N, ", w.ndim() == 2 ? w.dim(1) : -1, "])");
  require_dtype(x, w, op);
  if (b.defined())
    EDP_CHECK_SHAPE(b.ndim() == 1 && b.dim(0) == w.dim(0), op, ": bias ", b.shape().str(),
                    " does not fit weight ", w.shape().str());
  const int64_t N = x.dim(0), I = x.dim(1), O = w.dim(0);
  Tensor y({N, O}, x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    MatR<T> Y(y.data<T>(), N, O);
    CMatR<T> X(x.data<T>(), N, I), W(w.data<T>(), O, I);
    if constexpr (std::is_same_v<T, float>) {
      if (gemm_on_dnnl()) {
        if (gemm_in_bf16() && saved) {
          saved->x = to_bf16({X.data(), N, I, I});
          saved->w = to_bf16({W.data(), O, I, I});
          gemm(saved->x, false, saved->w, true, Y.data(), O, 1.f, false);
        } else {
          if (saved) *saved = LinearSaved{};
          gemm({X.data(), N, I, I}, false, {W.data(), O, I, I}, true, Y.data(), O, 1.f, false);
        }
        if (b.defined()) Y.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(b.data<T>(), O);
        return;
      }
    }
    parallel_ranges(O, kAlign, [&](int64_t o, int64_t e) {
      Y.middleCols(o, e - o).noalias() = X * W.middleRows(o, e - o).transpose();
    });
    if (b.defined()) {
      Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> B(b.data<T>(), O);
      Y.rowwise() += B;
    }
  });
  return y;
}

Tensor linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       bool want_dx, const LinearSaved* saved) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, w, dy, dw))
    return cuda::linear_backward(x, w, dy, dw, db, want_dx);
#endif
  const char* op = "linear_backward";
  require_cpu(dy, op, "grad_output");
  const int64_t N = x.dim(0), I = x.dim(1), O = w.dim(0);
  EDP_CHECK_SHAPE(dy.ndim() == 2 && dy.dim(0) == N && dy.dim(1) == O, op, ": grad_output ",
                  dy.shape().str(), " does not match output [", N, ", ", O, "]");
  check_same_shape(dw, w, "linear_backward: weight grad vs weight");
  Tensor dx;
  if (want_dx) dx = Tensor({N, I}, x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    CMatR<T> X(x.data<T>(), N, I), W(w.data<T>(), O, I), DY(dy.data<T>(), N, O);
    MatR<T> DW(dw.data<T>(), O, I);
    if constexpr (std::is_same_v<T, float>) {
      if (gemm_on_dnnl()) {
        if (gemm_in_bf16()) {  // dy feeds both products: rounded once; x and w kept from the forward
          const Tensor dyb = to_bf16({DY.data(), N, O, O});
          const bool kept = saved && saved->x.defined() && saved->x.shape() == Shape({N, I}) &&
                            saved->w.defined() && saved->w.shape() == Shape({O, I});
          gemm(dyb, true, kept ? saved->x : to_bf16({X.data(), N, I, I}), false, DW.data(), I, 1.f, true);
          if (want_dx) gemm(dyb, false, kept ? saved->w : to_bf16({W.data(), O, I, I}), false, dx.data<T>(), I, 1.f, false);
        } else {
          gemm({DY.data(), N, O, O}, true, {X.data(), N, I, I}, false, DW.data(), I, 1.f, true);
          if (want_dx) gemm({DY.data(), N, O, O}, false, {W.data(), O, I, I}, false, dx.data<T>(), I, 1.f, false);
        }
        if (db) {  // Σ over rows, row by row (contiguous, vectorised), in row order
          std::vector<float> acc(static_cast<size_t>(O), 0.f);
          for (int64_t n = 0; n < N; ++n) {
            const float* r = DY.data() + n * O;
            for (int64_t o = 0; o < O; ++o) acc[static_cast<size_t>(o)] += r[o];
          }
          float* d = db->data<float>();
          for (int64_t o = 0; o < O; ++o) d[o] += acc[static_cast<size_t>(o)];
        }
        return;
      }
    }
    parallel_ranges(O, kAlign, [&](int64_t o, int64_t e) {
      DW.middleRows(o, e - o).noalias() += DY.middleCols(o, e - o).transpose() * X;
    });
    if (db) {
      Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> DB(db->data<T>(), O);
      DB += DY.colwise().sum();
    }
    if (want_dx) {
      MatR<T> DX(dx.data<T>(), N, I);
      parallel_ranges(I, kAlign, [&](int64_t i, int64_t e) {
        DX.middleCols(i, e - i).noalias() = DY * W.middleCols(i, e - i);
      });
    }
  });
  return dx;
}

}  // namespace edp::ops
