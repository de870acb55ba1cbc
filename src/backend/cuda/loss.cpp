// Pointwise losses on the GPU — the ops of backend/cpu/loss.cpp (the oracle: same math; the
// shape and dtype checks ran there): operand checks, then kernels/loss.cu.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "kernels/kernels.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

Tensor point_loss_forward(ops::PointLoss kind, const Tensor& pred, const Tensor& target, double delta) {
  const char* op = "point_loss_forward";
  const int d = op_device(pred, op, "predictions");
  require(target, d, DType::F32, op, "targets");
  Ctx c(d);
  Tensor l(pred.shape(), DType::F32, c.dev());
  kern::point_loss_forward(cf32(pred), cf32(target), f32(l), pred.numel(), static_cast<int>(kind),
                           static_cast<float>(delta), c.stream);
  return l;
}

Tensor point_loss_backward(ops::PointLoss kind, const Tensor& pred, const Tensor& target, double delta, double scale) {
  const char* op = "point_loss_backward";
  const int d = op_device(pred, op, "predictions");
  require(target, d, DType::F32, op, "targets");
  Ctx c(d);
  Tensor g(pred.shape(), DType::F32, c.dev());
  kern::point_loss_backward(cf32(pred), cf32(target), f32(g), pred.numel(), static_cast<int>(kind),
                            static_cast<float>(delta), static_cast<float>(scale), c.stream);
  return g;
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
