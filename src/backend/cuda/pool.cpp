// Max pooling and global average pooling on the GPU — the ops of backend/cpu/pool.cpp (the
// oracle: same math, same gradient contract; the CPU backend's operand rules and messages):
// operand checks, then kernels/pool.cu.
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

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
