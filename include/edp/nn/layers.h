// The layers. Each caches what its backward needs during forward (see module.h for the
// gradient contract). Math, per layer:
//   Linear       y = x Wᵀ + b                  dx = dy W, dW += dyᵀ x, db += Σ dy
//   Conv2d       y = W ⋆ x + b (stride, zero padding)
//   MaxPool2d    y = max over k×k windows      dx routes dy to each window's first maximum
//   GlobalAvgPool y[n,c] = mean over H×W
//   ReLU         y = max(x, 0)                 GELU y = x Φ(x) (exact erf form)
//   Sigmoid      y = 1/(1 + e^-x)              Tanh y = tanh x          SiLU y = x σ(x)
//   BatchNorm2d  y = γ (x - μ)/√(σ² + ε) + β   (batch stats in train, running stats in eval)
//   Dropout      y = x·m/(1-p), m ~ Bernoulli(1-p), identity in eval
//   Flatten      [N, ...] → [N, Π ...]
// The transformer's layers (activations [B, T, D]; Linear maps the last dimension of any input):
//   TokenPositionEmbedding  y[b,t] = wte[ids[b,t]] + wpe[t]       (ids int32 [B, T])
//   LayerNorm    y = (x - μ)/√(σ² + ε) γ + β over the last dimension
//   CausalSelfAttention  y = proj(attention(qkv(x))), softmax over s ≤ t per head
//   Residual     y = x + f(x)                  dx = dy + f'(dy)
//   TiedOutput   logits = x wteᵀ (the embedding's table, shared: its gradient gets both parts)
//   SequenceCrossEntropy  mean over positions whose target is not ignore_index
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "edp/backend/ops.h"
#include "edp/nn/module.h"

namespace edp::nn {

// Maps the last dimension: x [..., in] -> [..., out].
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Linear"; }
  Parameter& weight() { return *w_; }
  Parameter* bias() { return b_; }
  double forward_flops() const override { return flops_; }
  double backward_flops() const override { return flops_ * (input_grad_ ? 2 : 1); }

 private:
  Parameter* w_;
  Parameter* b_ = nullptr;
  Tensor x_;
  double flops_ = 0;  // of the last forward
  ops::LinearSaved saved_;  // bfloat16 roundings of x and w kept for backward (bf16 products)
};

class Conv2d : public Module {
 public:
  // relu = true fuses a ReLU into the convolution (y = max(conv + b, 0)): the same math as
  // Conv2d followed by ReLU, with two fewer passes over the activation.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, bool relu = false);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return geom_.relu ? "Conv2d+ReLU" : "Conv2d"; }
  Parameter& weight() { return *w_; }
  Parameter* bias() { return b_; }
  double forward_flops() const override { return flops_; }
  double backward_flops() const override { return flops_ * (input_grad_ ? 2 : 1); }

 private:
  Parameter* w_;
  Parameter* b_ = nullptr;
  ops::Conv2dGeometry geom_;
  Tensor x_, col_;  // col_: im2col of the last training forward, reused by backward
  Tensor y_;        // output, kept when the ReLU is fused (its mask)
  double flops_ = 0;  // of the last forward
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0);  // stride 0 → kernel
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  int64_t k_, s_;
  Shape x_shape_;
  Tensor argmax_;
};

class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "GlobalAvgPool2d"; }

 private:
  Shape x_shape_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "ReLU"; }

 private:
  Tensor y_;
};

// An elementwise activation whose backward takes its forward's input (edp/backend/ops.h's
// <name>_forward(x) and <name>_backward(x, dy)): forward keeps x for backward.
class InputActivation : public Module {
 public:
  using Forward = Tensor (*)(const Tensor&);
  using Backward = Tensor (*)(const Tensor&, const Tensor&);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return name_; }

 protected:
  InputActivation(const char* name, Forward f, Backward b) : name_(name), f_(f), b_(b) {}

 private:
  const char* name_;
  Forward f_;
  Backward b_;
  Tensor x_;
};

class GELU : public InputActivation {
 public:
  GELU() : InputActivation("GELU", ops::gelu_forward, ops::gelu_backward) {}
};
class Sigmoid : public InputActivation {
 public:
  Sigmoid() : InputActivation("Sigmoid", ops::sigmoid_forward, ops::sigmoid_backward) {}
};
class Tanh : public InputActivation {
 public:
  Tanh() : InputActivation("Tanh", ops::tanh_forward, ops::tanh_backward) {}
};
class SiLU : public InputActivation {
 public:
  SiLU() : InputActivation("SiLU", ops::silu_forward, ops::silu_backward) {}
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  Buffer& running_mean() { return *mean_; }
  Buffer& running_var() { return *var_; }

 private:
  Parameter *gamma_, *beta_;
  Buffer *mean_, *var_;
  double eps_, momentum_;
  Tensor x_, save_mean_, save_invstd_;
  bool cached_train_ = false;
};

// Dropout draws its mask from (seed, call counter): reproducible for a given seed and step.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Dropout"; }

 private:
  double p_;
  uint64_t seed_;
  uint64_t calls_ = 0;
  Tensor mask_;
  bool active_ = false;
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Flatten"; }

 private:
  Shape x_shape_;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> layers);
  // Appends a layer; its parameters are named "<index>.<param>" unless a name is given.
  Sequential& add(ModulePtr m, std::string name = "");
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Sequential"; }
  void set_input_grad(bool on) override;
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) { return *children()[i].second; }
};

// ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut is the
// identity, or conv1x1(stride)+BN when the shape changes.
class ResidualBlock : public Module {
 public:
  ResidualBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "ResidualBlock"; }

 private:
  std::shared_ptr<Sequential> main_;
  std::shared_ptr<Sequential> shortcut_;  // null for the identity
  Tensor out_;                            // after the final ReLU
};

// ---- transformer layers -------------------------------------------------------------------------
// Token and position tables, N(0, 0.02) as GPT-2 initialises them.
class TokenPositionEmbedding : public Module {
 public:
  TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim);
  Tensor forward(const Tensor& ids) override;   // int32 [B, T], T <= context -> [B, T, dim]
  Tensor backward(const Tensor& dy) override;   // returns an undefined tensor (ids have no gradient)
  std::string type_name() const override { return "TokenPositionEmbedding"; }
  Parameter& token_table() { return *wte_; }

 private:
  Parameter *wte_, *wpe_;
  Tensor ids_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "LayerNorm"; }

 private:
  Parameter *gamma_, *beta_;
  double eps_;
  Tensor x_, mean_, rstd_;
};

// Causal multi-head self-attention: qkv = x Wqkvᵀ + b, the attention core of ops.h per head,
// y = attn Wprojᵀ + b. The projection's weights start at N(0, 0.02/√(2·layers)) (GPT-2's scaling
// of the residual branches); pass layers = 0 for plain N(0, 0.02).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t dim, int64_t heads, int64_t layers = 0);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "CausalSelfAttention"; }

 private:
  int64_t heads_;
  std::shared_ptr<Linear> qkv_, proj_;
  Tensor qkv_out_, attn_, lse_;
};

// y = x + body(x).
class Residual : public Module {
 public:
  explicit Residual(ModulePtr body);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Residual"; }

 private:
  ModulePtr body_;
};

// logits = x · Wᵀ with W a parameter of another module (the token table): it owns no parameter,
// its backward adds into W's gradient and leaves marking it ready to the owner, whose backward
// runs later (so the gradient is ready once, complete, for DistributedDataParallel).
class TiedOutput : public Module {
 public:
  explicit TiedOutput(Parameter& weight) : w_(&weight) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "TiedOutput"; }
  double forward_flops() const override { return flops_; }
  double backward_flops() const override { return flops_ * (input_grad_ ? 2 : 1); }

 private:
  Parameter* w_;
  Tensor x_;
  ops::LinearSaved saved_;
  double flops_ = 0;
};

// Mean cross-entropy over a sequence: logits [..., V], targets int32 [...] (same leading shape);
// positions whose target is ignore_index count for nothing.
class SequenceCrossEntropy {
 public:
  explicit SequenceCrossEntropy(int32_t ignore_index = -1) : ignore_(ignore_index) {}
  double forward(const Tensor& logits, const Tensor& targets);
  // d(mean loss)/d logits (logits' shape), optionally scaled.
  Tensor backward(double scale = 1.0) const;
  int64_t counted() const { return counted_; }  // positions in the last forward's mean

 private:
  int32_t ignore_;
  int64_t counted_ = 0;
  Shape shape_;
  Tensor probs_, targets_;
};

// Mean softmax cross-entropy over the batch.
class SoftmaxCrossEntropy {
 public:
  // Returns the mean loss; keeps the probabilities for backward.
  double forward(const Tensor& logits, const Tensor& labels);
  // d(mean loss)/d logits, optionally scaled (e.g. for gradient accumulation).
  Tensor backward(double scale = 1.0) const;
  const Tensor& probabilities() const { return probs_; }

 private:
  Tensor probs_, labels_;
};

// The mean of a pointwise loss over every element of the predictions, against float targets
// of the same element count (regression; multi-label with BCEWithLogitsLoss): the loss family of
// edp/backend/ops.h. Targets of another dtype (int32 0/1 labels) are converted on the CPU.
//   MSELoss  mean (p - t)²      L1Loss  mean |p - t|      HuberLoss(δ)  mean huber_δ(p - t)
//   BCEWithLogitsLoss  mean of -[t log σ(p) + (1 - t) log(1 - σ(p))], p a logit
class PointwiseLoss {
 public:
  explicit PointwiseLoss(ops::PointLoss kind, double delta = 1.0) : kind_(kind), delta_(delta) {}
  // Returns the mean loss; keeps predictions and targets for backward.
  double forward(const Tensor& pred, const Tensor& target);
  // d(mean loss)/d pred (pred's shape), optionally scaled (gradient accumulation).
  Tensor backward(double scale = 1.0) const;
  ops::PointLoss kind() const { return kind_; }

 private:
  ops::PointLoss kind_;
  double delta_;
  Tensor pred_, target_;
};

class MSELoss : public PointwiseLoss {
 public:
  MSELoss() : PointwiseLoss(ops::PointLoss::mse) {}
};
class L1Loss : public PointwiseLoss {
 public:
  L1Loss() : PointwiseLoss(ops::PointLoss::l1) {}
};
class HuberLoss : public PointwiseLoss {
 public:
  explicit HuberLoss(double delta = 1.0) : PointwiseLoss(ops::PointLoss::huber, delta) {}
};
class BCEWithLogitsLoss : public PointwiseLoss {
 public:
  BCEWithLogitsLoss() : PointwiseLoss(ops::PointLoss::bce_logits) {}
};

template <typename M, typename... Args>
std::shared_ptr<M> make(Args&&... args) {
  return std::make_shared<M>(std::forward<Args>(args)...);
}
// make<Sequential>({make<Linear>(4, 8), make<ReLU>(), ...}): a braced list of layers (the
// variadic form above cannot deduce one).
template <typename M>
std::shared_ptr<M> make(std::initializer_list<ModulePtr> layers) {
  return std::make_shared<M>(layers);
}

}  // namespace edp::nn
