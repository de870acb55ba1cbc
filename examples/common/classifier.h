// The training driver shared by the Fashion-MNIST examples: options, data, model, SGD with a
// warmup + cosine schedule, per-epoch evaluation, a progress display and one JSON summary line.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "edp/nn/layers.h"

namespace edp::examples {

struct ClassifierSpec {
  std::string name;  // printed as "model" in the JSON line
  std::string description;
  std::function<std::shared_ptr<nn::Sequential>()> build;
  int default_epochs = 5;
  double default_lr = 0.05;
};

int run_classifier(int argc, char** argv, const ClassifierSpec& spec);

}  // namespace edp::examples
