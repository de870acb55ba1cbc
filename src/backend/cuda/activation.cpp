// CUDA elementwise ops, dropout and reductions: operand checks, then the kernels of
// kernels/activation.cu, dropout.cu and reduce.cu.
#include "edp/config.h"

#if EDP_HAVE_CUDA
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

double full_sum(const Tensor& x, bool squares, const char* op) {
  const int d = op_device(x, op, "input");
  Ctx c(d);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const int blocks = reduce_blocks(n);
  Tensor partial = scratch(c, blocks + 1, DType::F64);
  double* pp = ptr<double>(partial);
  kern::sum_partial(cf32(x), n, squares, pp, blocks, c.stream);
  kern::sum_finalize(pp, blocks, pp + blocks, c.stream);
  double out = 0;
  CUDA_CHECK(cudaMemcpyAsync(&out, pp + blocks, sizeof out, cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return out;
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
    int64_t splits = channel_splits(C, outer * inner, sm_count(d));
    if (inner > 1) splits = std::min(splits, std::max<int64_t>(outer, 1));
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

void axpy_(Tensor& y, double alpha, const Tensor& x) {
  const char* op = "axpy_";
  const int d = op_device(y, op, "y");
  require(x, d, DType::F32, op, "x");
  check_same_shape(y, x, op);
  Ctx c(d);
  kern::axpy(f32(y), static_cast<float>(alpha), cf32(x), y.numel(), c.stream);
}

void scale_(Tensor& x, double alpha) {
  const int d = op_device(x, "scale_", "x");
  Ctx c(d);
  kern::scale(f32(x), static_cast<float>(alpha), x.numel(), c.stream);
}

double sum(const Tensor& x) { return full_sum(x, false, "sum"); }
double sum_squares(const Tensor& x) { return full_sum(x, true, "sum_squares"); }

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
