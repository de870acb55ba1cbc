// SGD and AdamW: the optimizer state and bias corrections here, the element updates in the
// backend's optimizer ops (ops::sgd_step / ops::adamw_step: src/backend/cpu/optim.cpp, and the
// fused multi-tensor kernels of src/backend/cuda/optim.cpp for parameters on a GPU); global-norm
// gradient clipping.
#include "edp/optim/optimizer.h"

#include <cmath>

#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::optim {

#if EDP_HAVE_CUDA
namespace {
bool params_on_cuda(const std::vector<nn::Parameter*>& ps) {
  return !ps.empty() && ps.front()->value.device().is_cuda();
}
}  // namespace
#endif

void Optimizer::set_lr(double lr) {
  EDP_CHECK(std::isfinite(lr) && lr >= 0, "learning rate ", lr, " must be finite and >= 0 (at optimizer step ",
            steps_, ")");
  lr_ = lr;
}

Optimizer::Optimizer(std::vector<nn::Parameter*> params, double lr)
    : params_(std::move(params)), lr_(lr) {
  EDP_CHECK(std::isfinite(lr) && lr >= 0, "learning rate ", lr, " must be finite and >= 0");
  for (auto* p : params_) EDP_CHECK(p != nullptr, "optimizer given a null parameter");
}

void Optimizer::zero_grad() {
  for (auto* p : params_)
    if (p->grad.defined()) p->grad.zero();
}

std::unique_ptr<Optimizer> Optimizer::clone_for(std::vector<nn::Parameter*>) const {
  throw Error("this optimizer cannot run on the shards of its parameters (it does not implement "
              "Optimizer::clone_for); shard with SGD or AdamW, or train unsharded (zero_stage 0)");
}

SGD::SGD(std::vector<nn::Parameter*> params, SGDOptions o)
    : Optimizer(std::move(params), o.lr), o_(o) {
  EDP_CHECK(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum < 1, "SGD: momentum ", o.momentum,
            " must be in [0, 1)");
  EDP_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "SGD: weight_decay ", o.weight_decay,
            " must be finite and >= 0");
  EDP_CHECK(std::isfinite(o.dampening) && o.dampening >= 0 && o.dampening <= 1, "SGD: dampening ", o.dampening,
            " must be in [0, 1]");
  EDP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "SGD: Nesterov momentum needs momentum > 0 and dampening = 0");
}

void SGD::ensure_state() {
  if (o_.momentum > 0 && buf_.empty())
    for (auto* p : params_) buf_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()));
}

std::unique_ptr<Optimizer> SGD::clone_for(std::vector<nn::Parameter*> params) const {
  return clone_as<SGD>(std::move(params), o_);
}

void SGD::step() {
  ensure_state();
  std::vector<Tensor*> p, b;
  std::vector<const Tensor*> g;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!params_[k]->grad.defined()) continue;  // released and not made again: no gradient, no update
    p.push_back(&params_[k]->value);
    g.push_back(&params_[k]->grad);
    if (o_.momentum > 0) b.push_back(&buf_[k]);
  }
  ops::SGDStep h;
  h.lr = lr_;
  h.momentum = o_.momentum;
  h.dampening = o_.dampening;
  h.weight_decay = o_.weight_decay;
  h.nesterov = o_.nesterov;
  h.first_step = steps_ == 0;
  ops::sgd_step(p, g, b, h);
  ++steps_;
}

std::vector<Tensor*> SGD::state() {
  ensure_state();
  std::vector<Tensor*> s;
  for (auto& t : buf_) s.push_back(&t);
  return s;
}

AdamW::AdamW(std::vector<nn::Parameter*> params, AdamWOptions o)
    : Optimizer(std::move(params), o.lr), o_(o) {
  EDP_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0,
            "AdamW: betas must be in [0, 1) and eps > 0");
}

void AdamW::ensure_state() {
  if (!m_.empty() || params_.empty()) return;
  for (auto* p : params_) {
    m_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()));
    v_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device()));
  }
}

std::unique_ptr<Optimizer> AdamW::clone_for(std::vector<nn::Parameter*> params) const {
  return clone_as<AdamW>(std::move(params), o_);
}

void AdamW::step() {
  ensure_state();
  ++steps_;
  const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(steps_));
  const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(steps_));
  // Two groups, one launch each: the parameters that decay and those that do not (decay = 1).
  for (const bool decayed : {true, false}) {
    std::vector<Tensor*> p, m, v;
    std::vector<const Tensor*> g;
    for (size_t k = 0; k < params_.size(); ++k) {
      if (params_[k]->decay != decayed || !params_[k]->grad.defined()) continue;
      p.push_back(&params_[k]->value);
      g.push_back(&params_[k]->grad);
      m.push_back(&m_[k]);
      v.push_back(&v_[k]);
    }
    // Host doubles; the op rounds them to the parameters' dtype (float32 on a GPU).
    ops::AdamWStep h;
    h.beta1 = o_.beta1;
    h.beta2 = o_.beta2;
    h.eps = o_.eps;
    h.decay = decayed ? 1 - lr_ * o_.weight_decay : 1.0;
    h.step_size = lr_ / bc1;
    h.rbc2 = 1 / std::sqrt(bc2);
    ops::adamw_step(p, g, m, v, h);
  }
}

std::vector<Tensor*> AdamW::state() {
  ensure_state();
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
    for (auto* p : params)
      if (p->grad.defined()) g.push_back(&p->grad);
    ss = cuda::sum_squares_multi(g);  // one fused pass, one synchronisation
  } else
#endif
    for (auto* p : params)
      if (p->grad.defined()) ss += ops::sum_squares(p->grad);
  const double norm = std::sqrt(ss);
  if (norm > max_norm) {
    const double s = max_norm / (norm + 1e-6);
    for (auto* p : params)
      if (p->grad.defined()) ops::scale_(p->grad, s);
  }
  return norm;
}

}  // namespace edp::optim
