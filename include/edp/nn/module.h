// Module and Parameter: layers with explicit forward/backward (no autograd tape).
//
// Gradient contract (held by every layer):
//   - forward(x) caches what backward needs and returns y.
//   - backward(dy) returns dx and ACCUMULATES parameter gradients (grad += ...), so that several
//     backward passes (micro-batches) add up until zero_grad(), into
//     Parameter::grad_to_accumulate() (which makes a released gradient again, as zeros: sharded
//     gradients, DistributedDataParallel's zero_stage 2, release it). Activation gradients (the
//     returned dx) are OVERWRITTEN: a fresh tensor each call.
//   - When a layer has finished accumulating a parameter's gradient for this backward pass it
//     calls Parameter::mark_grad_ready(), which fires the parameter's hooks; DistributedDataParallel
//     uses these to start a bucket's allreduce while the rest of backward runs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "edp/core/tensor.h"

namespace edp::nn {

struct Parameter {
  std::string name;  // stable dotted name, e.g. "features.0.weight"
  Tensor value;
  Tensor grad;  // same shape/dtype/device as value; undefined while released (zero_stage 2)
  std::vector<std::function<void(Parameter&)>> grad_ready_hooks;
  // Whether AdamW's decoupled weight decay applies. Layers clear it on the parameters that decay
  // must not pull towards zero: biases and normalisation scales and shifts.
  bool decay = true;

  // The gradient a backward adds to: grad, made (zeros) when it was released.
  Tensor& grad_to_accumulate() {
    if (!grad.defined()) grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
    return grad;
  }

  void mark_grad_ready() {
    for (auto& h : grad_ready_hooks) h(*this);
  }
};

// A named tensor that is state but not trained (BatchNorm running statistics).
struct Buffer {
  std::string name;
  Tensor value;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& grad_out) = 0;
  virtual std::string type_name() const = 0;

  // All parameters / buffers of this module and its children, in registration order, with
  // dotted names. Pointers stay valid for the module's lifetime.
  std::vector<Parameter*> parameters();
  std::vector<Buffer*> buffers();
  // State that is neither parameter nor buffer: integer counters (Dropout's call counter, which
  // seeds its masks), with dotted names, in registration order. Checkpoints save them so that a
  // resumed run draws the same masks as an uninterrupted one.
  std::vector<std::pair<std::string, uint64_t*>> counters();
  void zero_grad();
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Converts parameters, buffers and future activations to `dtype` (float64 for gradient checks).
  void to(DType dtype);
  // Moves parameters and buffers to `device`.
  void to(Device device);
  int64_t num_parameters();
  // True if this module or a child holds a parameter (does not touch parameter names).
  bool has_parameters() const;
  std::string summary();  // one line per parameter: name, shape
  // The arithmetic of the last forward pass through this module and its children, in FLOPs: 2 per
  // multiply-add of the matrix products and convolutions (Linear, Conv2d, TiedOutput), which
  // dominate a step; elementwise work is not counted. backward_flops(): the backward of that pass
  // in the same terms (the weight gradient, plus the input gradient where input_grad(), which a
  // container sets for its children as its backward runs: read it after a backward).
  virtual double forward_flops() const;
  virtual double backward_flops() const;

  // Whether backward must compute the input gradient. The first layer of a network does not
  // need it (nothing upstream is trained); containers pass this to their first child.
  virtual void set_input_grad(bool on) { input_grad_ = on; }
  bool input_grad() const { return input_grad_; }

  // Children in registration order (name, module).
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

 protected:
  Parameter& register_parameter(const std::string& name, Tensor value);
  Buffer& register_buffer(const std::string& name, Tensor value);
  // `c` must live as long as the module (a member).
  void register_counter(const std::string& name, uint64_t* c) { counters_.emplace_back(name, c); }
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  virtual void on_train_changed() {}

  bool training_ = true;
  bool input_grad_ = true;

 private:
  void collect(const std::string& prefix, std::vector<Parameter*>& ps, std::vector<Buffer*>* bs);
  // unique_ptr: stable addresses for hooks and optimizer state.
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::pair<std::string, uint64_t*>> counters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

using ModulePtr = std::shared_ptr<Module>;

// The first of `params` (in order) whose gradient holds a NaN or an infinity, or nullptr. One
// pass over the gradients (a sum of squares in double, which no finite float gradient can
// overflow); on a GPU one synchronisation per parameter.
const Parameter* first_nonfinite_grad(const std::vector<Parameter*>& params);

}  // namespace edp::nn
