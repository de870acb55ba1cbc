// LayerNorm on the GPU — the op of backend/cpu/layernorm.cpp (the oracle: same math, same
// gradient contract) — through kernels/layernorm.cu.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "kernels/kernels.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

namespace {
int64_t check_ln(const Tensor& x, const Tensor& gamma, const Tensor& beta, int d, const char* op) {
  require(gamma, d, DType::F32, op, "weight");
  require(beta, d, DType::F32, op, "bias");
  EDP_CHECK_SHAPE(x.ndim() >= 1, op, ": input ", x.shape().str(), " has no dimension to normalise");
  const int64_t D = x.dim(-1);
  EDP_CHECK_SHAPE(gamma.ndim() == 1 && gamma.dim(0) == D && beta.shape() == gamma.shape(), op, ": weight ",
                  gamma.shape().str(), " and bias ", beta.shape().str(), " must be [", D, "] for input ",
                  x.shape().str());
  return D;
}
}  // namespace

Tensor layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& mean,
                         Tensor& rstd) {
  const char* op = "layernorm_forward";
  const int d = op_device(x, op, "input");
  const int64_t D = check_ln(x, gamma, beta, d, op);
  const int64_t R = D ? x.numel() / D : 0;
  Ctx c(d);
  Tensor y(x.shape(), DType::F32, c.dev());
  mean = Tensor({R}, DType::F32, c.dev());
  rstd = Tensor({R}, DType::F32, c.dev());
  kern::layernorm_forward(cf32(x), cf32(gamma), cf32(beta), static_cast<float>(eps), f32(y), f32(mean), f32(rstd), R,
                          D, c.stream);
  return y;
}

Tensor layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, Tensor& dgamma, Tensor& dbeta) {
  const char* op = "layernorm_backward";
  const int d = op_device(x, op, "input");
  const int64_t D = check_ln(x, gamma, gamma, d, op);
  require(dy, d, DType::F32, op, "grad_output");
  require(dgamma, d, DType::F32, op, "weight grad");
  require(dbeta, d, DType::F32, op, "bias grad");
  check_same_shape(x, dy, "layernorm_backward: input vs grad_output");
  const int64_t R = D ? x.numel() / D : 0;
  EDP_CHECK_SHAPE(mean.numel() == R && rstd.numel() == R, op, ": saved statistics hold ", mean.numel(),
                  " rows, the input ", R);
  Ctx c(d);
  Tensor dx(x.shape(), DType::F32, c.dev());
  Tensor partial = scratch(c, std::max<int64_t>(1, kern::layernorm_chunks(R) * 2 * D), DType::F32);
  kern::layernorm_backward(cf32(x), cf32(dy), cf32(gamma), cf32(mean), cf32(rstd), f32(dx), f32(partial), f32(dgamma),
                           f32(dbeta), R, D, c.stream);
  return dx;
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
