// BatchNorm2d on the CPU (float32, float64): the oracle of backend/cuda/batchnorm.cpp and
// kernels/batchnorm.cu. With M = N·H·W values per channel c:
//
//   forward (train)  μ = (1/M) Σ x,  σ² = (1/M) Σ (x - μ)²  (biased: used to normalise),
//                    y = γ (x - μ)/√(σ² + ε) + β;  save_mean = μ, save_invstd = 1/√(σ² + ε);
//                    running = (1 - momentum) running + momentum batch  (variance unbiased)
//   forward (eval)   the same affine map with the running statistics
//   backward         x̂ = (x - μ)/√(σ² + ε),  dx = γ/√(σ²+ε) · (dy - Σdy/M - x̂ Σ(dy x̂)/M)
//
// Gradient contract: parameter gradients accumulate (dγ += Σ dy x̂, dβ += Σ dy); the input
// gradient is returned (dx =, a fresh tensor). Per-channel work is owned by one thread each and
// statistics are accumulated in double, so results are deterministic.
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
void check_bn(const Tensor& x, const Tensor& gamma, const char* op) {
  require_cpu(x, op, "input");
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  EDP_CHECK_SHAPE(gamma.ndim() == 1 && gamma.dim(0) == x.dim(1), op, ": input ",
                  x.shape().str(), " has ", x.dim(1), " channels but the layer has ",
                  gamma.numel());
}
}  // namespace

Tensor batchnorm2d_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, Tensor& save_mean, Tensor& save_invstd) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, gamma, beta, running_mean, running_var))
    return cuda::batchnorm2d_forward_train(x, gamma, beta, running_mean, running_var, momentum,
                                           eps, save_mean, save_invstd);
#endif
  const char* op = "batchnorm2d_forward";
  check_bn(x, gamma, op);
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3), M = N * P;
  EDP_CHECK_SHAPE(M > 1, op, ": training needs more than one value per channel, got input ",
                  x.shape().str());
  Tensor y(x.shape(), x.dtype());
  save_mean = Tensor({C}, x.dtype());
  save_invstd = Tensor({C}, x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T *g = gamma.data<T>(), *b = beta.data<T>();
    T *rm = running_mean.data<T>(), *rv = running_var.data<T>();
    T *sm = save_mean.data<T>(), *si = save_invstd.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = xp + (n * C + c) * P;
        for (int64_t i = 0; i < P; ++i) s += p[i];
      }
      const double mean = s / static_cast<double>(M);
      double ss = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = xp + (n * C + c) * P;
        for (int64_t i = 0; i < P; ++i) {
          const double d = p[i] - mean;
          ss += d * d;
        }
      }
      const double var = ss / static_cast<double>(M);  // biased: used to normalise
      const double invstd = 1.0 / std::sqrt(var + eps);
      sm[c] = static_cast<T>(mean);
      si[c] = static_cast<T>(invstd);
      rm[c] = static_cast<T>((1 - momentum) * rm[c] + momentum * mean);
      rv[c] = static_cast<T>((1 - momentum) * rv[c] +
                             momentum * ss / static_cast<double>(M - 1));
      const T a = static_cast<T>(g[c] * invstd), bb = static_cast<T>(b[c] - g[c] * invstd * mean);
      for (int64_t n = 0; n < N; ++n) {
        const T* p = xp + (n * C + c) * P;
        T* q = yp + (n * C + c) * P;
        for (int64_t i = 0; i < P; ++i) q[i] = a * p[i] + bb;
      }
    }
  });
  return y;
}

Tensor batchnorm2d_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& running_mean, const Tensor& running_var,
                                double eps) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, gamma, beta, running_mean, running_var))
    return cuda::batchnorm2d_forward_eval(x, gamma, beta, running_mean, running_var, eps);
#endif
  const char* op = "batchnorm2d_forward(eval)";
  check_bn(x, gamma, op);
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3);
  Tensor y(x.shape(), x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T *g = gamma.data<T>(), *b = beta.data<T>();
    const T *rm = running_mean.data<T>(), *rv = running_var.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t nc = 0; nc < N * C; ++nc) {
      const int64_t c = nc % C;
      const double invstd = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
      const T a = static_cast<T>(g[c] * invstd), bb = static_cast<T>(b[c] - g[c] * invstd * rm[c]);
      const T* p = xp + nc * P;
      T* q = yp + nc * P;
      for (int64_t i = 0; i < P; ++i) q[i] = a * p[i] + bb;
    }
  });
  return y;
}

// With x̂ = (x - μ)·σ⁻¹ and y = γ x̂ + β over M values per channel:
//   dβ = Σ dy,  dγ = Σ dy·x̂,  dx = γ σ⁻¹ (dy - dβ/M - x̂ dγ/M)
Tensor batchnorm2d_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                            const Tensor& save_mean, const Tensor& save_invstd, Tensor& dgamma,
                            Tensor& dbeta) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, dy, gamma, save_mean, save_invstd, dgamma, dbeta))
    return cuda::batchnorm2d_backward(x, dy, gamma, save_mean, save_invstd, dgamma, dbeta);
#endif
  const char* op = "batchnorm2d_backward";
  check_bn(x, gamma, op);
  check_same_shape(x, dy, "batchnorm2d_backward: input vs grad_output");
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3), M = N * P;
  Tensor dx(x.shape(), x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *gp = dy.data<T>(), *g = gamma.data<T>();
    const T *sm = save_mean.data<T>(), *si = save_invstd.data<T>();
    T *dg = dgamma.data<T>(), *db = dbeta.data<T>(), *out = dx.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      const double mean = sm[c], invstd = si[c];
      double sdy = 0, sdyx = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = xp + (n * C + c) * P;
        const T* q = gp + (n * C + c) * P;
        for (int64_t i = 0; i < P; ++i) {
          sdy += q[i];
          sdyx += q[i] * (p[i] - mean) * invstd;
        }
      }
      dg[c] += static_cast<T>(sdyx);
      db[c] += static_cast<T>(sdy);
      const double k = g[c] * invstd, mdy = sdy / static_cast<double>(M),
                   mdyx = sdyx / static_cast<double>(M);
      for (int64_t n = 0; n < N; ++n) {
        const T* p = xp + (n * C + c) * P;
        const T* q = gp + (n * C + c) * P;
        T* o = out + (n * C + c) * P;
        for (int64_t i = 0; i < P; ++i)
          o[i] = static_cast<T>(k * (q[i] - mdy - (p[i] - mean) * invstd * mdyx));
      }
    }
  });
  return dx;
}

}  // namespace edp::ops
