// CUDA pooling, BatchNorm2d and softmax cross-entropy: operand checks (the CPU backend's rules
// and messages), scratch buffers, then the kernels of kernels/pool.cu, batchnorm.cu and
// softmax_xent.cu.
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

// ---- pooling -------------------------------------------------------------------------------------
Tensor maxpool2d_forward(const Tensor& x, int64_t k, int64_t s, Tensor& argmax) {
  const char* op = "maxpool2d_forward";
  const int d = op_device(x, op, "input");
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  EDP_CHECK(k >= 1 && s >= 1, op, ": kernel and stride must be >= 1");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  EDP_CHECK_SHAPE(H >= k && W >= k, op, ": input ", x.shape().str(), " is smaller than the ", k,
                  "x", k, " window");
  EDP_CHECK_SHAPE(H * W <= INT32_MAX, op, ": planes of ", H * W, " values exceed the int32 argmax");
  const int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  Ctx c(d);
  Tensor y({N, C, Ho, Wo}, DType::F32, c.dev());
  argmax = Tensor({N, C, Ho, Wo}, DType::I32, c.dev());
  kern::maxpool2d_forward(cf32(x), f32(y), ptr<int32_t>(argmax), N * C, H, W, Ho, Wo, k, s, c.stream);
  return y;
}

Tensor maxpool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& xs) {
  const char* op = "maxpool2d_backward";
  const int d = op_device(dy, op, "grad_output");
  require(argmax, d, DType::I32, op, "saved argmax");
  check_same_shape(dy, argmax, "maxpool2d_backward: grad_output vs saved argmax");
  EDP_CHECK_SHAPE(xs.ndim() == 4 && dy.ndim() == 4 && dy.dim(0) == xs[0] && dy.dim(1) == xs[1], op,
                  ": grad_output ", dy.shape().str(), " does not match input ", xs.str());
  Ctx c(d);
  Tensor dx(xs, DType::F32, c.dev());
  CUDA_CHECK(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), c.stream));
  kern::maxpool2d_backward(cf32(dy), ptr<int32_t>(argmax), f32(dx), xs[0] * xs[1], xs[2] * xs[3],
                           dy.dim(2) * dy.dim(3), c.stream);
  return dx;
}

Tensor global_avgpool_forward(const Tensor& x) {
  const char* op = "global_avgpool_forward";
  const int d = op_device(x, op, "input");
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  Ctx c(d);
  Tensor y({x.dim(0), x.dim(1)}, DType::F32, c.dev());
  kern::global_avgpool_forward(cf32(x), f32(y), x.dim(0) * x.dim(1), x.dim(2) * x.dim(3), c.stream);
  return y;
}

Tensor global_avgpool_backward(const Tensor& dy, const Shape& xs) {
  const char* op = "global_avgpool_backward";
  const int d = op_device(dy, op, "grad_output");
  EDP_CHECK_SHAPE(xs.ndim() == 4 && dy.ndim() == 2 && dy.dim(0) == xs[0] && dy.dim(1) == xs[1], op,
                  ": grad_output ", dy.shape().str(), " does not match input ", xs.str());
  Ctx c(d);
  Tensor dx(xs, DType::F32, c.dev());
  kern::global_avgpool_backward(cf32(dy), f32(dx), xs[0] * xs[1], xs[2] * xs[3], c.stream);
  return dx;
}

// ---- BatchNorm2d ------------------------------------------------------------------------------------
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

// ---- softmax cross-entropy ------------------------------------------------------------------------------
namespace {
void check_ce(const Tensor& logits, const Tensor& labels, int d, const char* op) {
  EDP_CHECK_SHAPE(logits.ndim() == 2, op, ": logits must be [N, classes], got ",
                  logits.shape().str());
  require(labels, d, DType::I32, op, "labels");
  EDP_CHECK_SHAPE(labels.ndim() == 1 && labels.dim(0) == logits.dim(0), op, ": labels ",
                  labels.str(), " do not fit logits ", logits.shape().str(), " (expected int32[",
                  logits.dim(0), "])");
}

void throw_bad_label(const Tensor& labels, int64_t row, int64_t C, cudaStream_t s) {
  int32_t lab = 0;
  CUDA_CHECK(cudaMemcpyAsync(&lab, static_cast<const int32_t*>(labels.raw()) + row, sizeof lab,
                             cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  throw ShapeError("softmax_cross_entropy: label " + std::to_string(lab) + " of row " +
                   std::to_string(row) + " is outside [0, " + std::to_string(C) + ")");
}
}  // namespace

Tensor softmax_cross_entropy_forward_async(const Tensor& logits, const Tensor& labels,
                                           Tensor& probs) {
  const char* op = "softmax_cross_entropy";
  const int d = op_device(logits, op, "logits");
  check_ce(logits, labels, d, op);
  const int64_t N = logits.dim(0), C = logits.dim(1);
  EDP_CHECK_SHAPE(C >= 1 || N == 0, op, ": logits ", logits.shape().str(), " have no classes");
  Ctx c(d);
  probs = Tensor(logits.shape(), DType::F32, c.dev());
  Tensor out = scratch(c, 3, DType::F64);  // mean loss, first bad row or -1, classes
  Tensor row_loss = scratch(c, std::max<int64_t>(N, 1), DType::F64);
  Tensor row_flag = scratch(c, std::max<int64_t>(N, 1), DType::I32);
  kern::softmax_xent_forward(cf32(logits), ptr<int32_t>(labels), f32(probs), ptr<double>(row_loss),
                             ptr<int32_t>(row_flag), N, C, c.stream);
  kern::rows_finalize(ptr<double>(row_loss), ptr<int32_t>(row_flag), N, false, ptr<double>(out),
                      c.stream);
  const double classes = static_cast<double>(C);
  uint64_t bits;
  std::memcpy(&bits, &classes, sizeof bits);
  kern::fill(ptr<double>(out) + 2, 8, bits, 1, c.stream);
  return out;
}

double read_loss(const Tensor& loss_and_flag, const Tensor& labels) {
  const char* op = "read_loss";
  EDP_CHECK(loss_and_flag.defined() && loss_and_flag.device().is_cuda() &&
                loss_and_flag.dtype() == DType::F64 && loss_and_flag.numel() == 3,
            op, ": expected the float64[3] tensor of softmax_cross_entropy_forward_async");
  const int d = loss_and_flag.device().index;
  require(labels, d, DType::I32, op, "labels");
  Ctx c(d);
  double h[3] = {0, 0, 0};
  CUDA_CHECK(cudaMemcpyAsync(h, loss_and_flag.raw(), sizeof h, cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  if (h[1] >= 0) throw_bad_label(labels, static_cast<int64_t>(h[1]), static_cast<int64_t>(h[2]), c.stream);
  return h[0];
}

double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs) {
  const Tensor out = softmax_cross_entropy_forward_async(logits, labels, probs);
  return read_loss(out, labels);
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale) {
  const char* op = "softmax_cross_entropy_backward";
  const int d = op_device(probs, op, "probs");
  check_ce(probs, labels, d, op);
  Ctx c(d);
  Tensor dz(probs.shape(), DType::F32, c.dev());
  kern::softmax_xent_backward(cf32(probs), ptr<int32_t>(labels), f32(dz), probs.dim(0),
                              probs.dim(1), static_cast<float>(scale), c.stream);
  return dz;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const char* op = "count_correct";
  const int d = op_device(logits, op, "logits");
  check_ce(logits, labels, d, op);
  const int64_t N = logits.dim(0), C = logits.dim(1);
  if (N == 0 || C == 0) return 0;
  Ctx c(d);
  Tensor out = scratch(c, 2, DType::F64);
  Tensor row_flag = scratch(c, N, DType::I32);
  kern::correct_rows(cf32(logits), ptr<int32_t>(labels), ptr<int32_t>(row_flag), N, C, c.stream);
  kern::rows_finalize(nullptr, ptr<int32_t>(row_flag), N, true, ptr<double>(out), c.stream);
  double h[2] = {0, 0};
  CUDA_CHECK(cudaMemcpyAsync(h, out.raw(), sizeof h, cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return static_cast<int64_t>(h[1]);
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
