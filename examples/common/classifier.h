// The training driver shared by the Fashion-MNIST examples: options, data, model, SGD with a
// warmup + cosine schedule, per-epoch evaluation, a progress display and one JSON summary line.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "edp/data/dataset.h"
#include "edp/nn/layers.h"

namespace edp::examples {

struct ClassifierSpec {
  std::string name;  // printed as "model" in the JSON line
  std::string description;
  std::function<std::shared_ptr<nn::Sequential>()> build;
  int default_epochs = 5;
  double default_lr = 0.05;
  // Where the data comes from (default: Fashion-MNIST from --data) and --data's default.
  std::function<std::pair<std::shared_ptr<data::TensorDataset>, std::shared_ptr<data::TensorDataset>>(
      const std::string& dir)>
      load = nullptr;
  std::string default_data = data::kFashionMnistDir;
};

int run_classifier(int argc, char** argv, const ClassifierSpec& spec);

// The examples' default --threads: EDP_NUM_THREADS (set by edprun) wins; otherwise the ranks on
// one host share its cores.
int default_threads_per_rank();

}  // namespace edp::examples
