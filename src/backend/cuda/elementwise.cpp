// Sigmoid, tanh, SiLU, sub and mul on the GPU — the ops of backend/cpu/elementwise.cpp (the
// oracle: same math, same gradient contract): operand checks, then kernels/elementwise.cu.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "kernels/kernels.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

namespace {
Tensor unary(const Tensor& x, kern::Unary u, const char* op) {
  const int d = op_device(x, op, "input");
  Ctx c(d);
  Tensor y(x.shape(), DType::F32, c.dev());
  kern::unary_forward(cf32(x), f32(y), x.numel(), u, c.stream);
  return y;
}

Tensor unary_backward(const Tensor& x, const Tensor& dy, kern::Unary u, const char* op) {
  const int d = op_device(dy, op, "grad_output");
  require(x, d, DType::F32, op, "input");
  check_same_shape(x, dy, op);
  Ctx c(d);
  Tensor dx(dy.shape(), DType::F32, c.dev());
  kern::unary_backward(cf32(x), cf32(dy), f32(dx), dy.numel(), u, c.stream);
  return dx;
}

void binary(const Tensor& a, const Tensor& b, Tensor& y, kern::Binary k, const char* op) {
  const int d = op_device(a, op, "first operand");
  require(b, d, DType::F32, op, "second operand");
  check_same_shape(a, b, op);
  Ctx c(d);
  kern::binary(cf32(a), cf32(b), f32(y), a.numel(), k, c.stream);
}
}  // namespace

Tensor sigmoid_forward(const Tensor& x) { return unary(x, kern::Unary::Sigmoid, "sigmoid_forward"); }
Tensor sigmoid_backward(const Tensor& x, const Tensor& dy) {
  return unary_backward(x, dy, kern::Unary::Sigmoid, "sigmoid_backward");
}
Tensor tanh_forward(const Tensor& x) { return unary(x, kern::Unary::Tanh, "tanh_forward"); }
Tensor tanh_backward(const Tensor& x, const Tensor& dy) { return unary_backward(x, dy, kern::Unary::Tanh, "tanh_backward"); }
Tensor silu_forward(const Tensor& x) { return unary(x, kern::Unary::SiLU, "silu_forward"); }
Tensor silu_backward(const Tensor& x, const Tensor& dy) { return unary_backward(x, dy, kern::Unary::SiLU, "silu_backward"); }

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y(a.shape(), DType::F32, a.device());
  binary(a, b, y, kern::Binary::Sub, "sub");
  return y;
}

void mul_(Tensor& a, const Tensor& b) { binary(a, b, a, kern::Binary::Mul, "mul_"); }

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
