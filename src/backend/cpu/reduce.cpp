// Reductions and BLAS-1 updates on the CPU (float32, float64): the oracle of
// backend/cuda/reduce.cpp and kernels/reduce.cu.
//
//   add  y = a + b     add_  a += b     axpy_  y += α x     scale_  x *= α
//   sum  Σ_i x_i       sum_squares  Σ_i x_i²   (accumulated in double)
//
// Gradient contract: none of their own — these are pieces of other ops' backward passes, of
// gradient averaging and of the optimizers; the in-place ones (name_) write their first operand.
// Reductions use a fixed chunking and combine the partials in chunk order in double, so they are
// deterministic whatever the thread timing.
#include <vector>
#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  add_(y, b);
  return y;
}

void add_(Tensor& a, const Tensor& b) { axpy_(a, 1.0, b); }

void axpy_(Tensor& y, double alpha, const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(y, x))
    return cuda::axpy_(y, alpha, x);
#endif
  require_cpu(y, "axpy_", "y");
  require_cpu(x, "axpy_", "x");
  check_same_shape(y, x, "axpy_");
  require_dtype(y, x, "axpy_");
  dispatch_float(y.dtype(), "axpy_", [&](auto tag) {
    using T = decltype(tag);
    T* o = y.data<T>();
    const T* a = x.data<T>();
    const T al = static_cast<T>(alpha);
    parallel_for(y.numel(), [&](int64_t i) { o[i] += al * a[i]; });
  });
}

void scale_(Tensor& x, double alpha) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::scale_(x, alpha);
#endif
  require_cpu(x, "scale_", "x");
  dispatch_float(x.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    T* o = x.data<T>();
    const T al = static_cast<T>(alpha);
    parallel_for(x.numel(), [&](int64_t i) { o[i] *= al; });
  });
}

namespace {
template <typename F>
double chunked_sum(int64_t n, F&& term) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    // kLanes independent partial sums: one running sum is a chain of dependent additions
    // (~4 cycles each: 14.5 % of the example MLP's 1-thread step under perf, ~170 us for its
    // 235k gradients), these vectorise.
    constexpr int kLanes = 16;
    double acc[kLanes] = {};
    const int64_t end = std::min(n, (c + 1) * kChunk);
    int64_t i = c * kChunk;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += term(i + j);
    for (int j = 0; i < end; ++i, ++j) acc[j] += term(i);
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    part[static_cast<size_t>(c)] = acc[0];
  }
  double total = 0;
  for (double v : part) total += v;
  return total;
}
}  // namespace

double sum(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::sum(x);
#endif
  require_cpu(x, "sum", "input");
  return dispatch_float(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    return chunked_sum(x.numel(), [&](int64_t i) { return static_cast<double>(a[i]); });
  });
}

double sum_squares(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::sum_squares(x);
#endif
  require_cpu(x, "sum_squares", "input");
  return dispatch_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    return chunked_sum(x.numel(), [&](int64_t i) {
      const double v = a[i];
      return v * v;
    });
  });
}

}  // namespace edp::ops
