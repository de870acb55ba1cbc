// LayerNorm over the last dimension on the CPU (float32, float64): the oracle of
// backend/cuda/layernorm.cpp and kernels/layernorm.cu.
//
//   forward   μ = mean(x),  rstd = 1/√(var(x) + ε) (biased variance),  x̂ = (x - μ)·rstd,
//             y = x̂·γ + β   per row of D; μ and rstd [rows] are kept for backward
//   backward  g = dy·γ;  dx = rstd · (g - mean(g) - x̂ · mean(g·x̂));
//             dγ += Σ_rows dy·x̂;  dβ += Σ_rows dy
//
// Gradient contract: parameter gradients accumulate (dγ +=, dβ +=); dx is returned (=).
// Row statistics are summed in double. dγ and dβ are summed over fixed chunks of 64 rows, one
// partial per chunk, and the partials are added in chunk order: the same bits for any thread count.
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
constexpr int64_t kChunk = 64;

int64_t check_ln(const Tensor& x, const Tensor& gamma, const Tensor& beta, const char* op) {
  require_cpu(x, op, "input");
  require_cpu(gamma, op, "weight");
  require_cpu(beta, op, "bias");
  EDP_CHECK_SHAPE(x.ndim() >= 1, op, ": input ", x.shape().str(), " has no dimension to normalise");
  const int64_t D = x.dim(-1);
  EDP_CHECK_SHAPE(gamma.ndim() == 1 && gamma.dim(0) == D && beta.shape() == gamma.shape(), op, ": weight ",
                  gamma.shape().str(), " and bias ", beta.shape().str(), " must be [", D, "] for input ",
                  x.shape().str());
  require_dtype(x, gamma, op);
  require_dtype(x, beta, op);
  return D;
}
}  // namespace

Tensor layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& mean,
                         Tensor& rstd) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, gamma, beta)) return cuda::layernorm_forward(x, gamma, beta, eps, mean, rstd);
#endif
  const char* op = "layernorm_forward";
  const int64_t D = check_ln(x, gamma, beta, op);
  const int64_t R = D ? x.numel() / D : 0;
  Tensor y(x.shape(), x.dtype());
  mean = Tensor({R}, x.dtype());
  rstd = Tensor({R}, x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *a = x.data<T>(), *g = gamma.data<T>(), *b = beta.data<T>();
    T *o = y.data<T>(), *mu = mean.data<T>(), *rs = rstd.data<T>();
#pragma omp parallel for schedule(static) if (R * D > 32768)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = a + r * D;
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += xr[d];
      const double m = s / static_cast<double>(D);
      double v = 0;
      for (int64_t d = 0; d < D; ++d) v += (xr[d] - m) * (xr[d] - m);
      const double inv = 1.0 / std::sqrt(v / static_cast<double>(D) + eps);
      const T tm = static_cast<T>(m), ti = static_cast<T>(inv);
      mu[r] = tm;
      rs[r] = ti;
      T* yr = o + r * D;
      for (int64_t d = 0; d < D; ++d) yr[d] = (xr[d] - tm) * ti * g[d] + b[d];
    }
  });
  return y;
}

Tensor layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, Tensor& dgamma, Tensor& dbeta) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, dy, gamma, dgamma)) return cuda::layernorm_backward(x, dy, gamma, mean, rstd, dgamma, dbeta);
#endif
  const char* op = "layernorm_backward";
  const int64_t D = check_ln(x, gamma, gamma, op);
  check_same_shape(x, dy, "layernorm_backward: input vs grad_output");
  check_same_shape(dgamma, gamma, "layernorm_backward: weight grad vs weight");
  check_same_shape(dbeta, gamma, "layernorm_backward: bias grad vs weight");
  const int64_t R = D ? x.numel() / D : 0;
  EDP_CHECK_SHAPE(mean.numel() == R && rstd.numel() == R, op, ": saved statistics hold ", mean.numel(),
                  " rows, the input ", R);
  Tensor dx(x.shape(), x.dtype());
  const int64_t chunks = (R + kChunk - 1) / kChunk;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *a = x.data<T>(), *g = dy.data<T>(), *w = gamma.data<T>(), *mu = mean.data<T>(), *rs = rstd.data<T>();
    T* o = dx.data<T>();
    std::vector<T> part(static_cast<size_t>(chunks * 2 * D), T(0));
#pragma omp parallel for schedule(static) if (R * D > 32768)
    for (int64_t c = 0; c < chunks; ++c) {
      T* pg = part.data() + c * 2 * D;
      T* pb = pg + D;
      for (int64_t r = c * kChunk; r < std::min(R, (c + 1) * kChunk); ++r) {
        const T *xr = a + r * D, *gr = g + r * D;
        const T m = mu[r], inv = rs[r];
        double sg = 0, sgx = 0;
        for (int64_t d = 0; d < D; ++d) {
          const T xh = (xr[d] - m) * inv;
          const T gw = gr[d] * w[d];
          sg += gw;
          sgx += gw * xh;
          pg[d] += gr[d] * xh;
          pb[d] += gr[d];
        }
        const T mg = static_cast<T>(sg / static_cast<double>(D)), mgx = static_cast<T>(sgx / static_cast<double>(D));
        T* dr = o + r * D;
        for (int64_t d = 0; d < D; ++d) dr[d] = inv * (gr[d] * w[d] - mg - (xr[d] - m) * inv * mgx);
      }
    }
    T *dg = dgamma.data<T>(), *db = dbeta.data<T>();
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t d = 0; d < D; ++d) {
        dg[d] += part[static_cast<size_t>(c * 2 * D + d)];
        db[d] += part[static_cast<size_t>(c * 2 * D + D + d)];
      }
  });
  return dx;
}

}  // namespace edp::ops
