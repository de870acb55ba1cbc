// Model files (edp/train/state_dict.h): the model part of a checkpoint, saved and loaded by name.
#include "edp/train/state_dict.h"

#include <algorithm>

#include "edp/config.h"
#include "edp/core/error.h"
#include "edp/nn/module.h"

namespace edp::train {

namespace {
std::string describe(const Tensor& t) {
  return t.defined() ? std::string(dtype_name(t.dtype())) + t.shape().str() : std::string("(undefined)");
}
bool is_float(DType t) { return t == DType::F32 || t == DType::F64; }
}  // namespace

Checkpoint state_dict(nn::Module& model, const std::map<std::string, std::string>& meta) {
  Checkpoint c;
  c.meta = meta;
  c.meta["kind"] = "model";
  c.meta["build.version"] = EDP_VERSION;
  for (nn::Parameter* p : model.parameters()) c.tensors.emplace_back("model." + p->name, p->value.to(Device::cpu()).clone());
  for (nn::Buffer* b : model.buffers()) c.tensors.emplace_back("buffer." + b->name, b->value.to(Device::cpu()).clone());
  return c;
}

void load_state_dict(const Checkpoint& state, nn::Module& model, bool strict, const std::string& source) {
  struct Copy {
    Tensor* dst;
    const Tensor* src;
  };
  std::vector<Copy> plan;
  std::vector<std::string> used;
  auto match = [&](const std::string& name, Tensor& live) {
    const Tensor* t = state.find(name);
    if (!t)
      throw DataError(source + " has no tensor '" + name + "' (the model's is " + describe(live) +
                      "): it was saved from another model, or the layers were named differently");
    const bool convertible = t->defined() && live.defined() && is_float(t->dtype()) && is_float(live.dtype());
    if (!t->defined() || !(t->shape() == live.shape()) || (t->dtype() != live.dtype() && !convertible))
      throw DataError(source + ": tensor '" + name + "' is " + describe(*t) + " but the model's is " + describe(live) +
                      ": the model was built with other sizes than the one saved");
    plan.push_back({&live, t});
    used.push_back(name);
  };
  for (nn::Parameter* p : model.parameters()) match("model." + p->name, p->value);
  for (nn::Buffer* b : model.buffers()) match("buffer." + b->name, b->value);
  if (strict)
    for (const auto& [name, t] : state.tensors) {
      const bool model_part = name.rfind("model.", 0) == 0 || name.rfind("buffer.", 0) == 0;
      if (model_part && std::find(used.begin(), used.end(), name) == used.end())
        throw DataError(source + " holds '" + name + "' " + describe(t) +
                        ", which the model lacks: it was saved from a larger or another model (load with "
                        "strict = false to ignore it)");
    }
  for (const Copy& c : plan) c.dst->copy_from(c.src->dtype() == c.dst->dtype() ? *c.src : c.src->to(c.dst->dtype()));
}

void save_model(const std::string& path, nn::Module& model, const std::map<std::string, std::string>& meta) {
  write_checkpoint(path, state_dict(model, meta));
}

std::map<std::string, std::string> load_model(const std::string& path, nn::Module& model, bool strict) {
  const Checkpoint c = read_checkpoint(path);
  load_state_dict(c, model, strict, path);
  return c.meta;
}

}  // namespace edp::train
