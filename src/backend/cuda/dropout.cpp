// Inverted dropout on the GPU — the op of backend/cpu/dropout.cpp (the oracle: same math, same
// gradient contract, the same mask bit for bit): operand checks, then kernels/dropout.cu.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/launch.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

Tensor dropout_forward(const Tensor& x, double p, uint64_t seed, Tensor& mask) {
  const char* op = "dropout_forward";
  const int d = op_device(x, op, "input");
  EDP_CHECK(p >= 0.0 && p < 1.0, "dropout: p = ", p, " must be in [0, 1)");
  Ctx c(d);
  mask = Tensor(x.shape(), DType::U8, c.dev());
  Tensor y(x.shape(), DType::F32, c.dev());
  // The same threshold and scale as the CPU backend, so the masks and outputs agree exactly.
  const uint64_t threshold = static_cast<uint64_t>(p * 18446744073709551616.0);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  kern::dropout_forward(cf32(x), f32(y), ptr<uint8_t>(mask), x.numel(), seed, threshold, scale,
                        c.stream);
  return y;
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask, double p) {
  const char* op = "dropout_backward";
  const int d = op_device(dy, op, "grad_output");
  require(mask, d, DType::U8, op, "mask");
  check_same_shape(dy, mask, "dropout_backward: grad_output vs mask");
  Ctx c(d);
  Tensor dx(dy.shape(), DType::F32, c.dev());
  kern::dropout_backward(cf32(dy), ptr<uint8_t>(mask), f32(dx), dy.numel(),
                         static_cast<float>(1.0 / (1.0 - p)), c.stream);
  return dx;
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
