// Private helpers of the CPU backend: dtype dispatch, Eigen maps, device checks.
#pragma once
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

#include "edp/core/error.h"
#include "edp/core/tensor.h"

namespace edp::ops::cpu {

template <typename T>
using MatR = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <typename T>
using CMatR = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Calls f(T{}) with T = float or double according to the tensor's dtype.
template <typename F>
auto dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    default: break;
  }
  throw ShapeError(std::string(op) + ": dtype " + dtype_name(t) + " is not supported (float32 or float64)");
}

inline void require_cpu(const Tensor& t, const char* op, const char* name) {
  EDP_CHECK(t.defined(), op, ": ", name, " is undefined");
  if (!t.device().is_cpu())
    throw Error(std::string(op) + ": " + name + " is on " + t.device().str() +
                " and this op has no CUDA implementation in this build");
}

// True when any defined operand lives on a CUDA device: the op then runs on the CUDA backend,
// which checks that all operands share that device (so a stray CPU operand is reported there
// instead of being read through a device pointer here).
template <typename... Ts>
bool on_cuda(const Ts&... t) {
  return ((t.defined() && t.device().is_cuda()) || ...);
}

inline void require_dtype(const Tensor& a, const Tensor& b, const char* op) {
  EDP_CHECK_SHAPE(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.str(), " vs ", b.str());
}

// Applies f(i) for i in [0, n) in parallel when the work is big enough to pay for threads.
template <typename F>
void parallel_for(int64_t n, F&& f) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// The [begin, end) share of `n` items for thread t of T (static, deterministic partition).
inline void thread_range(int64_t n, int t, int T, int64_t& begin, int64_t& end) {
  begin = n * t / T;
  end = n * (t + 1) / T;
}

// Calls f(begin, end) once per OpenMP thread on contiguous shares of [0, n), each share a
// multiple of `align` items (but the last), in one parallel region. For splitting a GEMM by output
// columns or rows: each thread runs its own single-threaded Eigen product (Eigen does not nest
// inside a parallel region), so the threads meet once, at the region's end, instead of at every
// packed panel as in Eigen's own parallel GEMM. With one thread, or fewer than two shares of
// `align`, f(0, n) runs on the calling thread (and Eigen may parallelise it itself).
template <typename F>
void parallel_ranges(int64_t n, int64_t align, F&& f) {
  const int64_t blocks = (n + align - 1) / align;
  const int T = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  if (T <= 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(T)
  {
    const int t = omp_get_thread_num();
    const int64_t begin = std::min(n, blocks * t / T * align);
    const int64_t end = std::min(n, blocks * (t + 1) / T * align);
    if (end > begin) f(begin, end);
  }
}

}  // namespace edp::ops::cpu
