// Max pooling (k×k windows, stride s, no padding) and global average pooling on the CPU
// (float32, float64): the oracle of backend/cuda/pool.cpp and kernels/pool.cu.
//
//   max-pool  y[p, oh, ow] = max_{kh, kw < k} x[p, oh·s + kh, ow·s + kw];  argmax (int32) = flat
//             index within the plane of the first maximum;  dx[p, argmax] += dy[p, oh, ow]
//   avg-pool  y[p] = (1/P) Σ_i x[p, i];  dx[p, i] = dy[p] / P      (p = an (n, c) plane of P values)
//
// Gradient contract: no parameters; the input gradient is returned (dx =, a fresh tensor).
// Parallel over (n, c) planes; each plane is owned by one thread, so results are deterministic.
#include <limits>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

Tensor maxpool2d_forward(const Tensor& x, int64_t k, int64_t s, Tensor& argmax) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::maxpool2d_forward(x, k, s, argmax);
#endif
  const char* op = "maxpool2d_forward";
  require_cpu(x, op, "input");
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  EDP_CHECK(k >= 1 && s >= 1, op, ": kernel and stride must be >= 1");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  EDP_CHECK_SHAPE(H >= k && W >= k, op, ": input ", x.shape().str(), " is smaller than the ", k,
                  "x", k, " window");
  const int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  Tensor y({N, C, Ho, Wo}, x.dtype());
  argmax = Tensor({N, C, Ho, Wo}, DType::I32);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    int32_t* ap = argmax.data<int32_t>();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < N * C; ++p) {
      const T* in = xp + p * H * W;
      T* out = yp + p * Ho * Wo;
      int32_t* am = ap + p * Ho * Wo;
      if (k == 2 && s == 2) {
        // The common case, unrolled: the first of the four is the initial best.
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const T* r0 = in + 2 * oh * W;
          const T* r1 = r0 + W;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t c = 2 * ow;
            // Selects, not branches: which of the four wins is data-dependent.
            const T v0 = r0[c], v1 = r0[c + 1], v2 = r1[c], v3 = r1[c + 1];
            const int32_t i0 = static_cast<int32_t>(2 * oh * W + c);
            T best = v0;
            int32_t bi = i0;
            const bool t1 = v1 > best || v1 != v1;
            best = t1 ? v1 : best;
            bi = t1 ? i0 + 1 : bi;
            const bool t2 = v2 > best || v2 != v2;
            best = t2 ? v2 : best;
            bi = t2 ? i0 + static_cast<int32_t>(W) : bi;
            const bool t3 = v3 > best || v3 != v3;
            best = t3 ? v3 : best;
            bi = t3 ? i0 + static_cast<int32_t>(W) + 1 : bi;
            out[oh * Wo + ow] = best;
            am[oh * Wo + ow] = bi;
          }
        }
        continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t bi = (oh * s) * W + ow * s;
          for (int64_t kh = 0; kh < k; ++kh)
            for (int64_t kw = 0; kw < k; ++kw) {
              const int64_t i = (oh * s + kh) * W + ow * s + kw;
              // '>' keeps the first maximum; NaN propagates by taking it.
              if (in[i] > best || in[i] != in[i]) {
                best = in[i];
                bi = i;
              }
            }
          out[oh * Wo + ow] = best;
          am[oh * Wo + ow] = static_cast<int32_t>(bi);
        }
    }
  });
  return y;
}

Tensor maxpool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& xs) {
#if EDP_HAVE_CUDA
  if (on_cuda(dy, argmax))
    return cuda::maxpool2d_backward(dy, argmax, xs);
#endif
  const char* op = "maxpool2d_backward";
  require_cpu(dy, op, "grad_output");
  check_same_shape(dy, argmax, "maxpool2d_backward: grad_output vs saved argmax");
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t Po = dy.dim(2) * dy.dim(3);
  Tensor dx = Tensor::zeros(xs, dy.dtype());
  dispatch_float(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    const int32_t* am = argmax.data<int32_t>();
    T* out = dx.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t i = 0; i < Po; ++i) out[p * H * W + am[p * Po + i]] += g[p * Po + i];
  });
  return dx;
}

Tensor global_avgpool_forward(const Tensor& x) {
#if EDP_HAVE_CUDA
  if (on_cuda(x))
    return cuda::global_avgpool_forward(x);
#endif
  const char* op = "global_avgpool_forward";
  require_cpu(x, op, "input");
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  const int64_t NC = x.dim(0) * x.dim(1), P = x.dim(2) * x.dim(3);
  Tensor y({x.dim(0), x.dim(1)}, x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < NC; ++p) {
      T acc = 0;
      for (int64_t i = 0; i < P; ++i) acc += xp[p * P + i];
      yp[p] = acc / static_cast<T>(P);
    }
  });
  return y;
}

Tensor global_avgpool_backward(const Tensor& dy, const Shape& xs) {
#if EDP_HAVE_CUDA
  if (on_cuda(dy))
    return cuda::global_avgpool_backward(dy, xs);
#endif
  const char* op = "global_avgpool_backward";
  require_cpu(dy, op, "grad_output");
  EDP_CHECK_SHAPE(dy.ndim() == 2 && dy.dim(0) == xs[0] && dy.dim(1) == xs[1], op,
                  ": grad_output ", dy.shape().str(), " does not match input ", xs.str());
  const int64_t NC = xs[0] * xs[1], P = xs[2] * xs[3];
  Tensor dx(xs, dy.dtype());
  dispatch_float(dy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < NC; ++p) {
      const T v = g[p] / static_cast<T>(P);
      for (int64_t i = 0; i < P; ++i) out[p * P + i] = v;
    }
  });
  return dx;
}

}  // namespace edp::ops
