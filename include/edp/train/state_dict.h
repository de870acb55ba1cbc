// A model's state in one file, for inference and for sharing: its parameters and buffers
// (BatchNorm statistics) by their dotted names, loaded into a freshly built model of the same
// architecture.
//
//   train::save_model("model.edp", *model);          // after training
//   ...                                               // another program:
//   auto model = build_model();                       // the same layers, the same names
//   train::load_model("model.edp", *model);           // by name; throws on any mismatch
//   model->eval();
//
// The file is a checkpoint file (edp/train/checkpoint.h: atomic, crc32-checked) holding
// "model.<parameter>" and "buffer.<buffer>" tensors and the metadata kind = "model"; load_model
// also reads the model part of a training checkpoint (an elastic job's, a CheckpointDir's). Errors
// are edp::DataError naming the tensor: one the model has and the file lacks, one whose shape or
// dtype differs (both shown), or (strict) one the file has and the model lacks. Nothing is changed
// unless everything matches. float32 <-> float64 is converted (a model checked in float64).
#pragma once
#include <map>
#include <string>

#include "edp/train/checkpoint.h"

namespace edp::nn {
class Module;
}

namespace edp::train {

// The parameters and buffers of `model` (host copies), with `meta` added.
Checkpoint state_dict(nn::Module& model, const std::map<std::string, std::string>& meta = {});
// Copies a state into `model` by name (onto whatever device the model is on).
void load_state_dict(const Checkpoint& state, nn::Module& model, bool strict = true, const std::string& source = "state");

void save_model(const std::string& path, nn::Module& model, const std::map<std::string, std::string>& meta = {});
// Returns the file's metadata (what save_model was given, the build that wrote it, a training
// checkpoint's step and job).
std::map<std::string, std::string> load_model(const std::string& path, nn::Module& model, bool strict = true);

}  // namespace edp::train
