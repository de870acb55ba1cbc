// Softmax cross-entropy and the count of correct predictions on the CPU (float32, float64 logits;
// int32 labels): the oracle of backend/cuda/softmax_xent.cpp and kernels/softmax_xent.cu.
//
//   forward        p = softmax(z) per row (kept for backward),  L = (1/N) Σ_n -log p[n, label_n]
//   backward       dz = (p - onehot(label)) · scale   (scale = 1/N for the mean loss)
//   count_correct  the number of rows whose argmax equals the label
//   ignore_index   (sequence form) rows labelled so have no loss and a zero gradient; the mean is
//                  over the other rows (the caller's scale is then 1/their count)
//
// Gradient contract: no parameters; the logits gradient is returned (dz =, a fresh tensor).
// Each row is owned by one thread and sums are taken in double, so results are deterministic.
#include <climits>
#include <cmath>
#include <vector>
#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {
// No row is ignored: every label must be a class.
constexpr int32_t kNoIgnore = INT32_MIN;

void check_ce(const Tensor& logits, const Tensor& labels, const char* op) {
  require_cpu(logits, op, "logits");
  require_cpu(labels, op, "labels");
  EDP_CHECK_SHAPE(logits.ndim() == 2, op, ": logits must be [N, classes], got ",
                  logits.shape().str());
  EDP_CHECK_SHAPE(labels.ndim() == 1 && labels.dim(0) == logits.dim(0) &&
                      labels.dtype() == DType::I32,
                  op, ": labels ", labels.str(), " do not fit logits ", logits.shape().str(),
                  " (expected int32[", logits.dim(0), "])");
}
}  // namespace

double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs) {
#if EDP_HAVE_CUDA
  if (on_cuda(logits, labels))
    return cuda::softmax_cross_entropy_forward(logits, labels, probs);
#endif
  return softmax_cross_entropy_forward(logits, labels, probs, kNoIgnore, nullptr);
}

double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                     int32_t ignore_index, int64_t* counted) {
#if EDP_HAVE_CUDA
  if (on_cuda(logits, labels))
    return cuda::softmax_cross_entropy_forward(logits, labels, probs, ignore_index, counted);
#endif
  const char* op = "softmax_cross_entropy";
  check_ce(logits, labels, op);
  const int64_t N = logits.dim(0), C = logits.dim(1);
  probs = Tensor(logits.shape(), logits.dtype());
  std::vector<double> row_loss(static_cast<size_t>(N));
  const int32_t* lab = labels.data<int32_t>();
  int64_t valid = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (lab[n] == ignore_index) continue;
    EDP_CHECK_SHAPE(lab[n] >= 0 && lab[n] < C, op, ": label ", lab[n], " of row ", n,
                    " is outside [0, ", C, ")", ignore_index == kNoIgnore ? "" : " and is not the ignore index");
    ++valid;
  }
  if (counted) *counted = valid;
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* z = logits.data<T>();
    T* p = probs.data<T>();
#pragma omp parallel for schedule(static) if (N * C > 65536)
    for (int64_t n = 0; n < N; ++n) {
      const T* zr = z + n * C;
      T* pr = p + n * C;
      T mx = zr[0];
      for (int64_t c = 1; c < C; ++c) mx = std::max(mx, zr[c]);
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(zr[c] - mx));
      const double log_s = std::log(s);
      for (int64_t c = 0; c < C; ++c)
        pr[c] = static_cast<T>(std::exp(static_cast<double>(zr[c] - mx) - log_s));
      row_loss[static_cast<size_t>(n)] = lab[n] == ignore_index ? 0.0 : -(static_cast<double>(zr[lab[n]] - mx) - log_s);
    }
  });
  double total = 0;
  for (double v : row_loss) total += v;
  return valid ? total / static_cast<double>(valid) : 0.0;
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale) {
#if EDP_HAVE_CUDA
  if (on_cuda(probs, labels))
    return cuda::softmax_cross_entropy_backward(probs, labels, scale);
#endif
  return softmax_cross_entropy_backward(probs, labels, scale, kNoIgnore);
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale,
                                      int32_t ignore_index) {
#if EDP_HAVE_CUDA
  if (on_cuda(probs, labels))
    return cuda::softmax_cross_entropy_backward(probs, labels, scale, ignore_index);
#endif
  const char* op = "softmax_cross_entropy_backward";
  check_ce(probs, labels, op);
  const int64_t N = probs.dim(0), C = probs.dim(1);
  Tensor dz(probs.shape(), probs.dtype());
  const int32_t* lab = labels.data<int32_t>();
  dispatch_float(probs.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = probs.data<T>();
    T* d = dz.data<T>();
    const T s = static_cast<T>(scale);
#pragma omp parallel for schedule(static) if (N * C > 65536)
    for (int64_t n = 0; n < N; ++n) {
      const T keep = lab[n] == ignore_index ? T(0) : T(1);
      for (int64_t c = 0; c < C; ++c)
        d[n * C + c] = (p[n * C + c] - (c == lab[n] ? T(1) : T(0))) * s * keep;
    }
  });
  return dz;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
#if EDP_HAVE_CUDA
  if (on_cuda(logits, labels))
    return cuda::count_correct(logits, labels);
#endif
  check_ce(logits, labels, "count_correct");
  const int64_t N = logits.dim(0), C = logits.dim(1);
  const int32_t* lab = labels.data<int32_t>();
  return dispatch_float(logits.dtype(), "count_correct", [&](auto tag) {
    using T = decltype(tag);
    const T* z = logits.data<T>();
    int64_t correct = 0;
    for (int64_t n = 0; n < N; ++n) {
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (z[n * C + c] > z[n * C + best]) best = c;
      correct += (best == lab[n]);
    }
    return correct;
  });
}

}  // namespace edp::ops
