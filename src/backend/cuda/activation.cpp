// ReLU and GELU on the GPU — the ops of backend/cpu/activation.cpp (the oracle: same math, same
// gradient contract) — plus the GPU-only fused bias + activation of cuda_ops.h: operand checks,
// then the kernels of kernels/activation.cu (the bias gradient: reduce.cu's channel sum).
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
kern::Act to_kern(Activation a) {
  switch (a) {
    case Activation::Identity: return kern::Act::Identity;
    case Activation::ReLU: return kern::Act::ReLU;
    case Activation::GELU: return kern::Act::GELU;
  }
  return kern::Act::Identity;
}

// Channel layout of x for a bias over axis 1: C channels, `inner` values per (n, c).
void channel_layout(const Tensor& x, const Tensor& b, const char* op, int64_t& C, int64_t& inner) {
  EDP_CHECK_SHAPE(x.ndim() >= 2, op, ": input ", x.shape().str(),
                  " has no channel axis (expected [N, C] or [N, C, H, W])");
  C = x.dim(1);
  inner = 1;
  for (int64_t d = 2; d < x.ndim(); ++d) inner *= x.dim(d);
  EDP_CHECK_SHAPE(b.ndim() == 1 && b.dim(0) == C, op, ": bias ", b.shape().str(),
                  " does not fit the ", C, " channels of input ", x.shape().str());
}

Tensor unary(const Tensor& x, kern::Act act, const char* op) {
  const int d = op_device(x, op, "input");
  Ctx c(d);
  Tensor y(x.shape(), DType::F32, c.dev());
  kern::bias_act_forward(cf32(x), nullptr, f32(y), x.numel(), 1, 1, act, c.stream);
  return y;
}

Tensor unary_backward(const Tensor& saved, const Tensor& dy, kern::Act act, const char* op,
                      const char* saved_name) {
  const int d = op_device(dy, op, "grad_output");
  require(saved, d, DType::F32, op, saved_name);
  check_same_shape(saved, dy, op);
  Ctx c(d);
  Tensor dx(dy.shape(), DType::F32, c.dev());
  kern::act_backward(cf32(saved), cf32(dy), f32(dx), dy.numel(), act, c.stream);
  return dx;
}
}  // namespace

Tensor bias_act_forward(const Tensor& x, const Tensor& b, Activation act) {
  const char* op = "bias_act_forward";
  const int d = op_device(x, op, "input");
  int64_t C = 1, inner = 1;
  if (b.defined()) {
    require(b, d, DType::F32, op, "bias");
    channel_layout(x, b, op, C, inner);
  }
  Ctx c(d);
  Tensor y(x.shape(), DType::F32, c.dev());
  kern::bias_act_forward(cf32(x), b.defined() ? cf32(b) : nullptr, f32(y), x.numel(), C, inner,
                         to_kern(act), c.stream);
  return y;
}

Tensor bias_act_backward(const Tensor& z_or_y, const Tensor& dy, Tensor* db, Activation act) {
  const char* op = "bias_act_backward";
  Tensor dz = unary_backward(z_or_y, dy, to_kern(act), op, "saved activation input");
  if (db) {
    const int d = dy.device().index;
    require(*db, d, DType::F32, op, "bias grad");
    int64_t C, inner;
    channel_layout(dy, *db, op, C, inner);
    Ctx c(d);
    const int64_t outer = dy.dim(0);
    const int64_t splits = inner == 1 ? column_splits(C, outer, sm_count(d))
                                      : std::min(channel_splits(C, outer * inner, sm_count(d)), std::max<int64_t>(outer, 1));
    Tensor partial = scratch(c, splits * C, DType::F64);
    kern::channel_sum_accumulate(cf32(dz), f32(*db), outer, C, inner, ptr<double>(partial), splits,
                                 c.stream);
  }
  return dz;
}

Tensor relu_forward(const Tensor& x) { return unary(x, kern::Act::ReLU, "relu_forward"); }
Tensor relu_backward(const Tensor& y, const Tensor& dy) {
  return unary_backward(y, dy, kern::Act::ReLU, "relu_backward", "output");
}
Tensor gelu_forward(const Tensor& x) { return unary(x, kern::Act::GELU, "gelu_forward"); }
Tensor gelu_backward(const Tensor& x, const Tensor& dy) {
  return unary_backward(x, dy, kern::Act::GELU, "gelu_backward", "input");
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
