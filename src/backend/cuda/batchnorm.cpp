// BatchNorm2d on the GPU — the ops of backend/cpu/batchnorm.cpp (the oracle: same math, same
// gradient contract; the CPU backend's operand rules and messages): operand checks, scratch
// buffers, then kernels/batchnorm.cu.
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

namespace {
void check_bn(const Tensor& x, const Tensor& gamma, int d, const char* op) {
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  require(gamma, d, DType::F32, op, "weight");
  EDP_CHECK_SHAPE(gamma.ndim() == 1 && gamma.dim(0) == x.dim(1), op, ": input ", x.shape().str(),
                  " has ", x.dim(1), " channels but the layer has ", gamma.numel());
}

void check_channel_vec(const Tensor& t, int d, int64_t C, const char* op, const char* name) {
  require(t, d, DType::F32, op, name);
  EDP_CHECK_SHAPE(t.numel() == C, op, ": ", name, " ", t.shape().str(), " does not hold ", C,
                  " channels");
}

int64_t bn_splits(int d, int64_t N, int64_t C, int64_t P) {
  return std::clamp<int64_t>(channel_splits(C, N * P, sm_count(d)), 1, std::max<int64_t>(N, 1));
}
}  // namespace

Tensor batchnorm2d_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, Tensor& save_mean, Tensor& save_invstd) {
  const char* op = "batchnorm2d_forward";
  const int d = op_device(x, op, "input");
  check_bn(x, gamma, d, op);
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3), M = N * P;
  EDP_CHECK_SHAPE(M > 1, op, ": training needs more than one value per channel, got input ",
                  x.shape().str());
  check_channel_vec(beta, d, C, op, "bias");
  check_channel_vec(running_mean, d, C, op, "running_mean");
  check_channel_vec(running_var, d, C, op, "running_var");
  Ctx c(d);
  Tensor y(x.shape(), DType::F32, c.dev());
  save_mean = Tensor({C}, DType::F32, c.dev());
  save_invstd = Tensor({C}, DType::F32, c.dev());
  const int64_t splits = bn_splits(d, N, C, P);
  Tensor partial = scratch(c, C * splits * 2, DType::F64);
  Tensor coef = scratch(c, 2 * C, DType::F32);
  kern::bn_stats_partial(cf32(x), N, C, P, splits, ptr<double>(partial), c.stream);
  kern::bn_stats_finalize(ptr<double>(partial), cf32(x), N, C, P, splits, cf32(gamma), cf32(beta),
                          f32(running_mean), f32(running_var), momentum, eps, f32(save_mean),
                          f32(save_invstd), f32(coef), c.stream);
  kern::bn_apply(cf32(x), cf32(coef), f32(y), N, C, P, c.stream);
  return y;
}

Tensor batchnorm2d_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& running_mean, const Tensor& running_var, double eps) {
  const char* op = "batchnorm2d_forward(eval)";
  const int d = op_device(x, op, "input");
  check_bn(x, gamma, d, op);
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3);
  check_channel_vec(beta, d, C, op, "bias");
  check_channel_vec(running_mean, d, C, op, "running_mean");
  check_channel_vec(running_var, d, C, op, "running_var");
  Ctx c(d);
  Tensor y(x.shape(), DType::F32, c.dev());
  Tensor coef = scratch(c, 2 * C, DType::F32);
  kern::bn_eval_coef(cf32(gamma), cf32(beta), cf32(running_mean), cf32(running_var), eps, C,
                     f32(coef), c.stream);
  kern::bn_apply(cf32(x), cf32(coef), f32(y), N, C, P, c.stream);
  return y;
}

Tensor batchnorm2d_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                            const Tensor& save_mean, const Tensor& save_invstd, Tensor& dgamma,
                            Tensor& dbeta) {
  const char* op = "batchnorm2d_backward";
  const int d = op_device(x, op, "input");
  check_bn(x, gamma, d, op);
  require(dy, d, DType::F32, op, "grad_output");
  check_same_shape(x, dy, "batchnorm2d_backward: input vs grad_output");
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3), M = N * P;
  check_channel_vec(save_mean, d, C, op, "saved mean");
  check_channel_vec(save_invstd, d, C, op, "saved inverse std");
  check_channel_vec(dgamma, d, C, op, "weight grad");
  check_channel_vec(dbeta, d, C, op, "bias grad");
  Ctx c(d);
  Tensor dx(x.shape(), DType::F32, c.dev());
  if (M == 0) return dx;
  const int64_t splits = bn_splits(d, N, C, P);
  Tensor partial = scratch(c, C * splits * 2, DType::F64);
  Tensor coef = scratch(c, 3 * C, DType::F64);
  kern::bn_backward_partial(cf32(x), cf32(dy), cf32(save_mean), N, C, P, splits,
                            ptr<double>(partial), c.stream);
  kern::bn_backward_finalize(ptr<double>(partial), C, splits, M, cf32(gamma), cf32(save_invstd),
                             f32(dgamma), f32(dbeta), ptr<double>(coef), c.stream);
  kern::bn_backward_dx(cf32(x), cf32(dy), cf32(save_mean), cf32(save_invstd), ptr<double>(coef),
                       f32(dx), N, C, P, c.stream);
  return dx;
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
