// Reductions and BLAS-1 updates on the GPU — the ops of backend/cpu/reduce.cpp (the oracle: same
// math; sums accumulated in double in a fixed order): operand checks, then kernels/reduce.cu.
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
