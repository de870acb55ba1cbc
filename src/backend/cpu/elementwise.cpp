// Smooth activations (sigmoid, tanh, SiLU) and elementwise arithmetic (sub, mul) on the CPU,
// float32 and float64: the oracle of backend/cuda/elementwise.cpp and kernels/elementwise.cu.
//
//   sigmoid  y = 1/(1 + e^-x)     dx = dy · σ(x)(1 - σ(x))
//   tanh     y = tanh x           dx = dy · (1 - tanh² x)
//   silu     y = x σ(x)           dx = dy · σ(x)(1 + x(1 - σ(x)))
//
// σ is evaluated as e^x/(1 + e^x) for x < 0 and 1/(1 + e^-x) otherwise, so that neither form
// overflows. Gradient contract: no parameters; the input gradient is returned (dx =, a fresh
// tensor). Parallel over elements with OpenMP: results do not depend on the thread count.
#include <cmath>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {

template <typename T>
T sigm(T x) {
  if (x < T(0)) {
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  return T(1) / (T(1) + std::exp(-x));
}

// y[i] = f(x[i]).
template <typename F>
Tensor map1(const Tensor& x, const char* op, F f) {
  require_cpu(x, op, "input");
  Tensor y(x.shape(), x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data<T>();
    T* o = y.data<T>();
    parallel_for(x.numel(), [&](int64_t i) { o[i] = f(a[i]); });
  });
  return y;
}

// out[i] = f(a[i], b[i]) (out may be a).
template <typename F>
void map2(const Tensor& a, const Tensor& b, Tensor& out, const char* op, F f) {
  require_cpu(a, op, "first operand");
  require_cpu(b, op, "second operand");
  check_same_shape(a, b, op);
  require_dtype(a, b, op);
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.data<T>();
    const T* q = b.data<T>();
    T* o = out.data<T>();
    parallel_for(a.numel(), [&](int64_t i) { o[i] = f(p[i], q[i]); });
  });
}

}  // namespace

Tensor sigmoid_forward(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x)) return cuda::sigmoid_forward(x);
#endif
  return map1(x, "sigmoid_forward", [](auto v) { return sigm(v); });
}

Tensor sigmoid_backward(const Tensor& x, const Tensor& dy) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, dy)) return cuda::sigmoid_backward(x, dy);
#endif
  Tensor dx(x.shape(), x.dtype());
  map2(x, dy, dx, "sigmoid_backward", [](auto v, auto g) {
    const auto s = sigm(v);
    return g * s * (decltype(v)(1) - s);
  });
  return dx;
}

Tensor tanh_forward(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x)) return cuda::tanh_forward(x);
#endif
  return map1(x, "tanh_forward", [](auto v) { return std::tanh(v); });
}

Tensor tanh_backward(const Tensor& x, const Tensor& dy) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, dy)) return cuda::tanh_backward(x, dy);
#endif
  Tensor dx(x.shape(), x.dtype());
  map2(x, dy, dx, "tanh_backward", [](auto v, auto g) {
    const auto t = std::tanh(v);
    return g * (decltype(v)(1) - t * t);
  });
  return dx;
}

Tensor silu_forward(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x)) return cuda::silu_forward(x);
#endif
  return map1(x, "silu_forward", [](auto v) { return v * sigm(v); });
}

Tensor silu_backward(const Tensor& x, const Tensor& dy) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, dy)) return cuda::silu_backward(x, dy);
#endif
  Tensor dx(x.shape(), x.dtype());
  map2(x, dy, dx, "silu_backward", [](auto v, auto g) {
    using T = decltype(v);
    const T s = sigm(v);
    return g * s * (T(1) + v * (T(1) - s));
  });
  return dx;
}

Tensor sub(const Tensor& a, const Tensor& b) {
#if EDP_HAVE_CUDA
  if (on_cuda(a, b)) return cuda::sub(a, b);
#endif
  require_cpu(a, "sub", "first operand");
  Tensor y(a.shape(), a.dtype());
  map2(a, b, y, "sub", [](auto p, auto q) { return p - q; });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  mul_(y, b);
  return y;
}

void mul_(Tensor& a, const Tensor& b) {
#if EDP_HAVE_CUDA
  if (on_cuda(a, b)) return cuda::mul_(a, b);
#endif
  map2(a, b, a, "mul_", [](auto p, auto q) { return p * q; });
}

}  // namespace edp::ops
