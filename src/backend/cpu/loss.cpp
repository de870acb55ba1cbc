// Pointwise losses on the CPU (float32, float64): the oracle of backend/cuda/loss.cpp and
// kernels/loss.cu. With d = p - t:
//   mse         ℓ = d²                                  ∂ℓ/∂p = 2d
//   l1          ℓ = |d|                                 ∂ℓ/∂p = sign(d)   (0 at d = 0)
//   huber(δ)    ℓ = ½d² for |d| ≤ δ, δ(|d| - ½δ) beyond  ∂ℓ/∂p = clamp(d, -δ, δ)
//   bce_logits  ℓ = max(p, 0) - p t + log1p(e^-|p|)     ∂ℓ/∂p = σ(p) - t
// The binary cross-entropy is computed from the logit p in that form so that it neither
// overflows nor loses the small probabilities (log σ(p) for p << 0). Elementwise, OpenMP over
// elements; the mean is ops::sum of the per-element losses (fixed chunking: deterministic).
#include <cmath>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

const char* point_loss_name(PointLoss kind) {
  switch (kind) {
    case PointLoss::mse: return "mse";
    case PointLoss::l1: return "l1";
    case PointLoss::huber: return "huber";
    case PointLoss::bce_logits: return "bce_logits";
  }
  return "?";
}

namespace detail_loss {
void check(PointLoss kind, const Tensor& pred, const Tensor& target, double delta, const char* op) {
  EDP_CHECK(pred.defined() && target.defined(), op, ": an operand is undefined");
  EDP_CHECK_SHAPE(pred.numel() == target.numel() && (pred.ndim() == 0 || target.ndim() == 0 || pred.dim(0) == target.dim(0)),
                  op, " (", point_loss_name(kind), "): predictions ", pred.shape().str(), " and targets ",
                  target.shape().str(), " differ: each prediction needs one target (same count, same leading dimension)");
  require_dtype(pred, target, op);
  EDP_CHECK(kind != PointLoss::huber || (delta > 0 && std::isfinite(delta)), op, ": huber's delta must be positive, got ",
            delta);
}
}  // namespace detail_loss

Tensor point_loss_forward(PointLoss kind, const Tensor& pred, const Tensor& target, double delta) {
  detail_loss::check(kind, pred, target, delta, "point_loss_forward");
#if EDP_HAVE_CUDA
  if (on_cuda(pred, target)) return cuda::point_loss_forward(kind, pred, target, delta);
#endif
  require_cpu(pred, "point_loss_forward", "predictions");
  require_cpu(target, "point_loss_forward", "targets");
  Tensor l(pred.shape(), pred.dtype());
  dispatch_float(pred.dtype(), "point_loss_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = pred.data<T>();
    const T* t = target.data<T>();
    T* o = l.data<T>();
    const T dl = static_cast<T>(delta);
    parallel_for(pred.numel(), [&](int64_t i) {
      const T d = p[i] - t[i], a = std::abs(d);
      switch (kind) {
        case PointLoss::mse: o[i] = d * d; break;
        case PointLoss::l1: o[i] = a; break;
        case PointLoss::huber: o[i] = a <= dl ? T(0.5) * d * d : dl * (a - T(0.5) * dl); break;
        case PointLoss::bce_logits:
          o[i] = (p[i] > T(0) ? p[i] : T(0)) - p[i] * t[i] + std::log1p(std::exp(-std::abs(p[i])));
          break;
      }
    });
  });
  return l;
}

Tensor point_loss_backward(PointLoss kind, const Tensor& pred, const Tensor& target, double delta, double scale) {
  detail_loss::check(kind, pred, target, delta, "point_loss_backward");
#if EDP_HAVE_CUDA
  if (on_cuda(pred, target)) return cuda::point_loss_backward(kind, pred, target, delta, scale);
#endif
  require_cpu(pred, "point_loss_backward", "predictions");
  require_cpu(target, "point_loss_backward", "targets");
  Tensor g(pred.shape(), pred.dtype());
  dispatch_float(pred.dtype(), "point_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = pred.data<T>();
    const T* t = target.data<T>();
    T* o = g.data<T>();
    const T dl = static_cast<T>(delta), sc = static_cast<T>(scale);
    parallel_for(pred.numel(), [&](int64_t i) {
      const T d = p[i] - t[i];
      T v = 0;
      switch (kind) {
        case PointLoss::mse: v = T(2) * d; break;
        case PointLoss::l1: v = d > T(0) ? T(1) : d < T(0) ? T(-1) : T(0); break;
        case PointLoss::huber: v = d > dl ? dl : d < -dl ? -dl : d; break;
        case PointLoss::bce_logits: {
          const T e = std::exp(-std::abs(p[i]));
          const T s = p[i] >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
          v = s - t[i];
          break;
        }
      }
      o[i] = sc * v;
    });
  });
  return g;
}

}  // namespace edp::ops
