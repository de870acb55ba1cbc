// Module bookkeeping: parameter/buffer registration, dotted names, dtype/device moves.
#include "edp/nn/module.h"

#include <cmath>

#include "edp/backend/ops.h"

#include <sstream>

namespace edp::nn {

Parameter& Module::register_parameter(const std::string& name, Tensor value) {
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
  p->value = std::move(value);
  params_.push_back(std::move(p));
  return *params_.back();
}

Buffer& Module::register_buffer(const std::string& name, Tensor value) {
  auto b = std::make_unique<Buffer>();
  b->name = name;
  b->value = std::move(value);
  buffers_.push_back(std::move(b));
  return *buffers_.back();
}

void Module::collect(const std::string& prefix, std::vector<Parameter*>& ps,
                     std::vector<Buffer*>* bs) {
  // Names are stored relative to their module; the dotted prefix is applied once, here, so a
  // module can be placed into a container after construction.
  for (auto& p : params_) {
    p->name = p->name.substr(p->name.rfind('.') + 1);
    if (!prefix.empty()) p->name = prefix + "." + p->name;
    ps.push_back(p.get());
  }
  if (bs)
    for (auto& b : buffers_) {
      b->name = b->name.substr(b->name.rfind('.') + 1);
      if (!prefix.empty()) b->name = prefix + "." + b->name;
      bs->push_back(b.get());
    }
  for (auto& [name, child] : children_)
    child->collect(prefix.empty() ? name : prefix + "." + name, ps, bs);
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> ps;
  collect("", ps, nullptr);
  return ps;
}

std::vector<Buffer*> Module::buffers() {
  std::vector<Parameter*> ps;
  std::vector<Buffer*> bs;
  collect("", ps, &bs);
  return bs;
}

std::vector<std::pair<std::string, uint64_t*>> Module::counters() {
  std::vector<std::pair<std::string, uint64_t*>> out;
  std::function<void(Module&, const std::string&)> walk = [&](Module& m, const std::string& prefix) {
    for (auto& [name, c] : m.counters_) out.emplace_back(prefix.empty() ? name : prefix + "." + name, c);
    for (auto& [name, child] : m.children_) walk(*child, prefix.empty() ? name : prefix + "." + name);
  };
  walk(*this, "");
  return out;
}

void Module::zero_grad() {
  for (Parameter* p : parameters())
    if (p->grad.defined()) p->grad.zero();
}

void Module::train(bool on) {
  training_ = on;
  on_train_changed();
  for (auto& c : children_) c.second->train(on);
}

void Module::to(DType dtype) {
  for (auto& p : params_) {
    p->value = p->value.to(dtype);
    if (p->grad.defined()) p->grad = p->grad.to(dtype);
  }
  for (auto& b : buffers_) b->value = b->value.to(dtype);
  for (auto& c : children_) c.second->to(dtype);
}

void Module::to(Device device) {
  for (auto& p : params_) {
    p->value = p->value.to(device);
    if (p->grad.defined()) p->grad = p->grad.to(device);
  }
  for (auto& b : buffers_) b->value = b->value.to(device);
  for (auto& c : children_) c.second->to(device);
}

bool Module::has_parameters() const {
  if (!params_.empty()) return true;
  for (const auto& c : children_)
    if (c.second->has_parameters()) return true;
  return false;
}

double Module::forward_flops() const {
  double f = 0;
  for (const auto& [name, child] : children_) f += child->forward_flops();
  return f;
}

double Module::backward_flops() const {
  double f = 0;
  for (const auto& [name, child] : children_) f += child->backward_flops();
  return f;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += p->value.numel();
  return n;
}

std::string Module::summary() {
  std::ostringstream os;
  for (Parameter* p : parameters()) os << p->name << " " << p->value.str() << "\n";
  for (Buffer* b : buffers()) os << b->name << " (buffer) " << b->value.str() << "\n";
  os << "total parameters: " << num_parameters() << "\n";
  return os.str();
}

const Parameter* first_nonfinite_grad(const std::vector<Parameter*>& params) {
  for (const Parameter* p : params)
    if (p->grad.defined() && p->grad.numel() > 0 && !std::isfinite(ops::sum_squares(p->grad))) return p;
  return nullptr;
}

}  // namespace edp::nn
