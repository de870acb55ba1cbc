// ReLU and GELU on the CPU (float32, float64): the oracle of backend/cuda/activation.cpp and
// kernels/activation.cu.
//
//   relu   y = max(x, 0)                     dx = dy · [y > 0]   (from the output y)
//   gelu   y = x Φ(x) = ½ x (1 + erf(x/√2))   dx = dy · (Φ(x) + x φ(x)),  φ(x) = e^{-x²/2}/√(2π)
//
// Gradient contract: no parameters; the input gradient is returned (dx =, a fresh tensor).
// Elementwise and parallel over elements, so results do not depend on the thread count. float32
// GELU uses the vectorised erf and exp of vmath.h (absolute error ≤ 2e-7), float64 libm's.
#include <cmath>
#include <type_traits>
#include "common.h"
#include "vmath.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

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
    if constexpr (std::is_same_v<T, float>) {
      const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * a[i] * (1.f + verf(a[i] * float(M_SQRT1_2)));
    } else {
      parallel_for(x.numel(), [&](int64_t i) {
        o[i] = T(0.5) * a[i] * (T(1) + std::erf(a[i] * T(M_SQRT1_2)));
      });
    }
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
    if constexpr (std::is_same_v<T, float>) {
      const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) {
        const float cdf = 0.5f * (1.f + verf(a[i] * float(M_SQRT1_2)));
        const float pdf = inv_sqrt_2pi * vexp(-0.5f * a[i] * a[i]);
        o[i] = g[i] * (cdf + a[i] * pdf);
      }
      return;
    }
    parallel_for(x.numel(), [&](int64_t i) {
      const T cdf = T(0.5) * (T(1) + std::erf(a[i] * T(M_SQRT1_2)));
      const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * a[i] * a[i]);
      o[i] = g[i] * (cdf + a[i] * pdf);
    });
  });
  return dx;
}

}  // namespace edp::ops
