// Evaluation of a classifier on a dataset (eval mode, in order, no gradients kept).
#pragma once
#include <cstdint>

#include "edp/comm/communicator.h"
#include "edp/data/dataset.h"
#include "edp/nn/module.h"

namespace edp::train {

struct EvalResult {
  double loss = 0;      // mean softmax cross-entropy
  double accuracy = 0;  // fraction of argmax == label
  int64_t samples = 0;
};

// Restores the module's training mode afterwards.
EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch = 256);

// Each rank evaluates its contiguous share of the dataset; the sums are combined over `comm`,
// so every rank gets the result for the whole dataset.
EvalResult evaluate(nn::Module& model, const data::Dataset& ds, comm::Communicator& comm,
                    int64_t batch = 256);

}  // namespace edp::train
