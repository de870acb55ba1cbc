// Optimizers over a list of parameters, with PyTorch's update rules so that results can be
// compared with it directly:
//   SGD:   g = grad + wd·p;  buf = μ·buf + (1-dampening)·g (buf = g on the first step);
//          g = nesterov ? g + μ·buf : buf;  p -= lr·g
//   AdamW: p -= lr·wd·p (decoupled; only on parameters whose `decay` is set: not on biases and
//          normalisation parameters, which the layers mark);  m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;
//          p -= lr · (m / (1-β1^t)) / (√(v / (1-β2^t)) + ε)
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "edp/nn/module.h"

namespace edp::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter*> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();
  double lr() const { return lr_; }
  // A non-finite or negative rate (a schedule gone wrong) is an edp::Error.
  void set_lr(double lr);
  int64_t steps() const { return steps_; }
  const std::vector<nn::Parameter*>& params() const { return params_; }
  // Per-parameter state tensors in a fixed order, parameter by parameter (momentum buffers, Adam
  // moments), for checkpoints; steps() is the rest of the state. Allocated when first needed (by
  // the first step or this call), so that an optimizer whose state lives in shards elsewhere
  // (DistributedDataParallel's ZeRO stage) holds none.
  virtual std::vector<Tensor*> state() = 0;
  // Frees the state tensors (they come back as zeros when next needed).
  virtual void release_state() {}
  // Whether the state tensors exist now (a step or state() made them): a sharded step takes its
  // parts from them, and makes fresh zeros of its own parts only when they do not.
  virtual bool has_state() const { return true; }
  // How many tensors state() returns, without making them (a checkpoint of an optimizer that has
  // no state yet is matched against it). The default makes the state to count it.
  virtual size_t state_tensors() { return state().size(); }
  void set_steps(int64_t s) { steps_ = s; }
  // An optimizer of this kind with the same settings and learning rate over `params`, with fresh
  // state and this one's step count: the same update on other tensors (DistributedDataParallel
  // runs it on the parts of the parameters a rank owns). Optimizers that cannot say so throw.
  virtual std::unique_ptr<Optimizer> clone_for(std::vector<nn::Parameter*> params) const;

 protected:
  // clone_for of an optimizer of kind Opt with settings `o`: this one's rate and step count.
  template <typename Opt, typename Options>
  std::unique_ptr<Optimizer> clone_as(std::vector<nn::Parameter*> params, Options o) const {
    o.lr = lr_;
    auto c = std::make_unique<Opt>(std::move(params), o);
    c->set_steps(steps_);
    return c;
  }

  std::vector<nn::Parameter*> params_;
  double lr_;
  int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<nn::Parameter*> params, SGDOptions o);
  void step() override;
  std::vector<Tensor*> state() override;
  void release_state() override { buf_.clear(); }
  bool has_state() const override { return !buf_.empty(); }
  size_t state_tensors() override { return o_.momentum > 0 ? params_.size() : 0; }
  std::unique_ptr<Optimizer> clone_for(std::vector<nn::Parameter*> params) const override;

 private:
  void ensure_state();
  SGDOptions o_;
  std::vector<Tensor> buf_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<nn::Parameter*> params, AdamWOptions o);
  void step() override;
  std::vector<Tensor*> state() override;
  void release_state() override {
    m_.clear();
    v_.clear();
  }
  bool has_state() const override { return !m_.empty(); }
  size_t state_tensors() override { return 2 * params_.size(); }
  std::unique_ptr<Optimizer> clone_for(std::vector<nn::Parameter*> params) const override;

 private:
  void ensure_state();
  AdamWOptions o_;
  std::vector<Tensor> m_, v_;
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm
// before clipping.
double clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm);

}  // namespace edp::optim
