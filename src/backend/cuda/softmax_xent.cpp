// Softmax cross-entropy and the count of correct predictions on the GPU — the ops of
// backend/cpu/softmax_xent.cpp (the oracle: same math, same gradient contract; the CPU backend's
// operand rules and messages) plus the host-sync-free forward of cuda_ops.h: operand checks,
// scratch buffers, then kernels/softmax_xent.cu.
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

double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                     int32_t ignore_index, int64_t* counted) {
  const char* op = "softmax_cross_entropy";
  const int d = op_device(logits, op, "logits");
  check_ce(logits, labels, d, op);
  const int64_t N = logits.dim(0), C = logits.dim(1);
  Ctx c(d);
  probs = Tensor(logits.shape(), DType::F32, c.dev());
  Tensor out = scratch(c, 4, DType::F64);  // Σ/N, first bad row; valid count (count mode)
  Tensor row_loss = scratch(c, std::max<int64_t>(N, 1), DType::F64);
  Tensor row_flag = scratch(c, std::max<int64_t>(N, 1), DType::I32);
  Tensor valid = scratch(c, std::max<int64_t>(N, 1), DType::I32);
  kern::softmax_xent_forward_ignore(cf32(logits), ptr<int32_t>(labels), ignore_index, f32(probs),
                                    ptr<double>(row_loss), ptr<int32_t>(row_flag), ptr<int32_t>(valid), N, C,
                                    c.stream);
  kern::rows_finalize(ptr<double>(row_loss), ptr<int32_t>(row_flag), N, false, ptr<double>(out), c.stream);
  kern::rows_finalize(nullptr, ptr<int32_t>(valid), N, true, ptr<double>(out) + 2, c.stream);
  double h[4] = {0, 0, 0, 0};
  CUDA_CHECK(cudaMemcpyAsync(h, out.raw(), sizeof h, cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  if (h[1] >= 0) throw_bad_label(labels, static_cast<int64_t>(h[1]), C, c.stream);
  const int64_t n_valid = static_cast<int64_t>(h[3]);
  if (counted) *counted = n_valid;
  return n_valid ? h[0] * static_cast<double>(N) / static_cast<double>(n_valid) : 0.0;
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale,
                                      int32_t ignore_index) {
  const char* op = "softmax_cross_entropy_backward";
  const int d = op_device(probs, op, "probs");
  check_ce(probs, labels, d, op);
  Ctx c(d);
  Tensor dz(probs.shape(), DType::F32, c.dev());
  kern::softmax_xent_backward_ignore(cf32(probs), ptr<int32_t>(labels), ignore_index, f32(dz), probs.dim(0),
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
