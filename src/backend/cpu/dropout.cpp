// Inverted dropout on the CPU (float32, float64): the oracle of backend/cuda/dropout.cpp and
// kernels/dropout.cu.
//
//   forward   m_i = [splitmix64(seed XOR i·0xD1B54A32D192ED03) >= ⌊p·2⁶⁴⌋]   (uint8 mask)
//             y_i = x_i · (m_i / (1 - p))
//   backward  dx_i = dy_i · (m_i / (1 - p))
//
// Gradient contract: no parameters; the input gradient is returned (dx =, a fresh tensor).
// Element i's mask bit depends only on (seed, i), never on thread order, so the CUDA backend
// draws the same mask bit for bit.
#include <cstdint>
#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif
#include "edp/core/random.h"

namespace edp::ops {
using namespace cpu;

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

}  // namespace edp::ops
