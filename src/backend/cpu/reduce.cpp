// Elementwise ops and reductions on the CPU. Reductions use a fixed chunking and combine the
// partials in chunk order in double, so they are deterministic whatever the thread timing.
#include <cmath>
#include <vector>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif
#include "edp/core/random.h"

namespace edp::ops {
using namespace cpu;

namespace {
// Applies f(i) for i in [0, n) in parallel when the work is big enough to pay for threads.
template <typename F>
void parallel_for(int64_t n, F&& f) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) f(i);
}
}  // namespace

Tensor relu_forward(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::relu_forward(x);
#endif
  require_cpu(x, "relu_forward", "input");
  Tensor y(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    T* o = y.data<T>();
    parallel_for(x.numel(), [&](int64_t i) { o[i] = a[i] > T(0) ? a[i] : T(0); });
  });
  return y;
}

Tensor relu_backward(const Tensor& y, const Tensor& dy) {
#if EDP_HAVE_CUDA
  if (on_cuda(y, dy))
    return cuda::relu_backward(y, dy);
#endif
  check_same_shape(y, dy, "relu_backward: output vs grad_output");
  Tensor dx(y.shape(), y.dtype());
  dispatch_float(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = y.data<T>();
    const T* g = dy.data<T>();
    T* o = dx.data<T>();
    // Both loads unconditional so the select compiles to a blend: the sign pattern of
    // activations is random and a branch would mispredict half the time.
    parallel_for(y.numel(), [&](int64_t i) {
      const T gi = g[i];
      o[i] = a[i] > T(0) ? gi : T(0);
    });
  });
  return dx;
}

Tensor gelu_forward(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::gelu_forward(x);
#endif
  require_cpu(x, "gelu_forward", "input");
  Tensor y(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    T* o = y.data<T>();
    parallel_for(x.numel(), [&](int64_t i) {
      o[i] = T(0.5) * a[i] * (T(1) + std::erf(a[i] * T(M_SQRT1_2)));
    });
  });
  return y;
}

Tensor gelu_backward(const Tensor& x, const Tensor& dy) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, dy))
    return cuda::gelu_backward(x, dy);
#endif
  check_same_shape(x, dy, "gelu_backward: input vs grad_output");
  Tensor dx(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    const T* g = dy.data<T>();
    T* o = dx.data<T>();
    const T inv_sqrt_2pi = T(0.3989422804014327);
    parallel_for(x.numel(), [&](int64_t i) {
      const T cdf = T(0.5) * (T(1) + std::erf(a[i] * T(M_SQRT1_2)));
      const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * a[i] * a[i]);
      o[i] = g[i] * (cdf + a[i] * pdf);
    });
  });
  return dx;
}

Tensor dropout_forward(const Tensor& x, double p, uint64_t seed, Tensor& mask) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::dropout_forward(x, p, seed, mask);
#endif
  require_cpu(x, "dropout_forward", "input");
  EDP_CHECK(p >= 0.0 && p < 1.0, "dropout: p = ", p, " must be in [0, 1)");
  mask = Tensor(x.shape(), DType::U8);
  uint8_t* m = mask.data<uint8_t>();
  // Counter-based: element i's keep bit depends only on (seed, i), not on thread order.
  const uint64_t threshold = static_cast<uint64_t>(p * 18446744073709551616.0);
  parallel_for(x.numel(), [&](int64_t i) {
    uint64_t s = seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull);
    m[i] = splitmix64(s) >= threshold ? 1 : 0;
  });
  Tensor y(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    T* o = y.data<T>();
    const T scale = T(1.0 / (1.0 - p));
    parallel_for(x.numel(), [&](int64_t i) { o[i] = a[i] * (scale * static_cast<T>(m[i])); });
  });
  return y;
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask, double p) {
#if EDP_HAVE_CUDA
  if (on_cuda(dy, mask))
    return cuda::dropout_backward(dy, mask, p);
#endif
  check_same_shape(dy, mask, "dropout_backward: grad_output vs mask");
  Tensor dx(dy.shape(), dy.dtype());
  const uint8_t* m = mask.data<uint8_t>();
  dispatch_float(dy.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* o = dx.data<T>();
    const T scale = T(1.0 / (1.0 - p));
    parallel_for(dy.numel(), [&](int64_t i) { o[i] = g[i] * (scale * static_cast<T>(m[i])); });
  });
  return dx;
}

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
    double acc = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) acc += term(i);
    part[static_cast<size_t>(c)] = acc;
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
