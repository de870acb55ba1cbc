// SGD and AdamW updates on the CPU (float32/float64) and, for parameters on a GPU, through the
// fused multi-tensor kernels of the CUDA backend (same math); global-norm gradient clipping.
#include "edp/optim/optimizer.h"

#include <cmath>

#include "backend/cpu/common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::optim {
using ops::cpu::dispatch_float;

#if EDP_HAVE_CUDA
namespace {
bool params_on_cuda(const std::vector<nn::Parameter*>& ps) {
  return !ps.empty() && ps.front()->value.device().is_cuda();
}
}  // namespace
#endif

Optimizer::Optimizer(std::vector<nn::Parameter*> params, double lr)
    : params_(std::move(params)), lr_(lr) {
  EDP_CHECK(lr >= 0, "learning rate ", lr, " must be >= 0");
  for (auto* p : params_) EDP_CHECK(p != nullptr, "optimizer given a null parameter");
}

void Optimizer::zero_grad() {
  for (auto* p : params_) p->grad.zero();
}

SGD::SGD(std::vector<nn::Parameter*> params, SGDOptions o)
    : Optimizer(std::move(params), o.lr), o_(o) {
  EDP_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0");
  EDP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "SGD: Nesterov momentum needs momentum > 0 and dampening = 0");
  if (o_.momentum > 0)
    for (auto* p : params_)
      buf_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()));
}

void SGD::step() {
  const bool first = steps_ == 0;
#if EDP_HAVE_CUDA
  if (params_on_cuda(params_)) {
    std::vector<Tensor*> p, b;
    std::vector<const Tensor*> g;
    for (size_t k = 0; k < params_.size(); ++k) {
      p.push_back(&params_[k]->value);
      g.push_back(&params_[k]->grad);
      if (o_.momentum > 0) b.push_back(&buf_[k]);
    }
    cuda::SGDHyper h;
    h.lr = static_cast<float>(lr_);
    h.momentum = static_cast<float>(o_.momentum);
    h.dampening = static_cast<float>(o_.dampening);
    h.weight_decay = static_cast<float>(o_.weight_decay);
    h.nesterov = o_.nesterov;
    h.first_step = first;
    cuda::sgd_step(p, g, b, h);
    ++steps_;
    return;
  }
#endif
  for (size_t k = 0; k < params_.size(); ++k) {
    nn::Parameter& P = *params_[k];
    ops::cpu::require_cpu(P.value, "SGD.step", P.name.c_str());
    dispatch_float(P.value.dtype(), "SGD.step", [&](auto tag) {
      using T = decltype(tag);
      T* p = P.value.data<T>();
      const T* g = P.grad.data<T>();
      T* b = o_.momentum > 0 ? buf_[k].data<T>() : nullptr;
      const T lr = static_cast<T>(lr_), wd = static_cast<T>(o_.weight_decay),
              mu = static_cast<T>(o_.momentum), damp = static_cast<T>(1 - o_.dampening);
      const int64_t n = P.value.numel();
      // One loop per variant so that each vectorises (no branches inside).
      if (!b) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      } else if (first) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          b[i] = d;
          p[i] -= lr * (o_.nesterov ? d + mu * d : d);
        }
      } else if (o_.nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          const T nb = mu * b[i] + damp * d;
          b[i] = nb;
          p[i] -= lr * (d + mu * nb);
        }
      } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          const T nb = mu * b[i] + damp * d;
          b[i] = nb;
          p[i] -= lr * nb;
        }
      }
    });
  }
  ++steps_;
}

std::vector<Tensor*> SGD::state() {
  std::vector<Tensor*> s;
  for (auto& t : buf_) s.push_back(&t);
  return s;
}

AdamW::AdamW(std::vector<nn::Parameter*> params, AdamWOptions o)
    : Optimizer(std::move(params), o.lr), o_(o) {
  EDP_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0,
            "AdamW: betas must be in [0, 1) and eps > 0");
  for (auto* p : params_) {
    m_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()));
    v_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()));
  }
}

void AdamW::step() {
  ++steps_;
  const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(steps_));
  const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(steps_));
#if EDP_HAVE_CUDA
  if (params_on_cuda(params_)) {
    std::vector<Tensor*> p, m, v;
    std::vector<const Tensor*> g;
    for (size_t k = 0; k < params_.size(); ++k) {
      p.push_back(&params_[k]->value);
      g.push_back(&params_[k]->grad);
      m.push_back(&m_[k]);
      v.push_back(&v_[k]);
    }
    // The same float32 constants as the CPU loop below.
    cuda::AdamWHyper h;
    h.beta1 = static_cast<float>(o_.beta1);
    h.beta2 = static_cast<float>(o_.beta2);
    h.eps = static_cast<float>(o_.eps);
    h.decay = static_cast<float>(1 - lr_ * o_.weight_decay);
    h.step_size = static_cast<float>(lr_ / bc1);
    h.rbc2 = static_cast<float>(1 / std::sqrt(bc2));
    cuda::adamw_step(p, g, m, v, h);
    return;
  }
#endif
  for (size_t k = 0; k < params_.size(); ++k) {
    nn::Parameter& P = *params_[k];
    ops::cpu::require_cpu(P.value, "AdamW.step", P.name.c_str());
    dispatch_float(P.value.dtype(), "AdamW.step", [&](auto tag) {
      using T = decltype(tag);
      T* p = P.value.data<T>();
      const T* g = P.grad.data<T>();
      T *m = m_[k].data<T>(), *v = v_[k].data<T>();
      const T b1 = static_cast<T>(o_.beta1), b2 = static_cast<T>(o_.beta2);
      const T decay = static_cast<T>(1 - lr_ * o_.weight_decay);
      const T step = static_cast<T>(lr_ / bc1), rbc2 = static_cast<T>(1 / std::sqrt(bc2));
      const T eps = static_cast<T>(o_.eps);
      const int64_t n = P.value.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (std::sqrt(v[i]) * rbc2 + eps);
      }
    });
  }
}

std::vector<Tensor*> AdamW::state() {
  std::vector<Tensor*> s;
  for (size_t k = 0; k < m_.size(); ++k) {
    s.push_back(&m_[k]);
    s.push_back(&v_[k]);
  }
  return s;
}

double clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm) {
  EDP_CHECK(max_norm > 0, "clip_grad_norm: max_norm ", max_norm, " must be > 0");
  double ss = 0;
#if EDP_HAVE_CUDA
  if (params_on_cuda(params)) {
    std::vector<const Tensor*> g;
    for (auto* p : params) g.push_back(&p->grad);
    ss = cuda::sum_squares_multi(g);  // one fused pass, one synchronisation
  } else
#endif
    for (auto* p : params) ss += ops::sum_squares(p->grad);
  const double norm = std::sqrt(ss);
  if (norm > max_norm) {
    const double s = max_norm / (norm + 1e-6);
    for (auto* p : params) ops::scale_(p->grad, s);
  }
  return norm;
}

}  // namespace edp::optim
