// The layers. Each caches what its backward needs during forward (see module.h for the
// gradient contract). Math, per layer:
//   Linear       y = x Wᵀ + b                  dx = dy W, dW += dyᵀ x, db += Σ dy
//   Conv2d       y = W ⋆ x + b (stride, zero padding)
//   MaxPool2d    y = max over k×k windows      dx routes dy to each window's first maximum
//   GlobalAvgPool y[n,c] = mean over H×W
//   ReLU         y = max(x, 0)                 GELU y = x Φ(x) (exact erf form)
//   BatchNorm2d  y = γ (x - μ)/√(σ² + ε) + β   (batch stats in train, running stats in eval)
//   Dropout      y = x·m/(1-p), m ~ Bernoulli(1-p), identity in eval
//   Flatten      [N, ...] → [N, Π ...]
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "edp/backend/ops.h"
#include "edp/nn/module.h"

namespace edp::nn {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Linear"; }
  Parameter& weight() { return *w_; }
  Parameter* bias() { return b_; }

 private:
  Parameter* w_;
  Parameter* b_ = nullptr;
  Tensor x_;
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

 private:
  Parameter* w_;
  Parameter* b_ = nullptr;
  ops::Conv2dGeometry geom_;
  Tensor x_, col_;  // col_: im2col of the last training forward, reused by backward
  Tensor y_;        // output, kept when the ReLU is fused (its mask)
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

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "GELU"; }

 private:
  Tensor x_;
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

template <typename M, typename... Args>
std::shared_ptr<M> make(Args&&... args) {
  return std::make_shared<M>(std::forward<Args>(args)...);
}

}  // namespace edp::nn
