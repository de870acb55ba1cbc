// Evaluation of a model on a dataset (eval mode, in order, no gradients kept). What is measured
// follows the dataset's targets:
//   int32 class labels (label_dtype() I32, one per sample): the mean softmax cross-entropy of the
//     outputs as logits, the accuracy of their argmax, and per class the precision TP/(TP + FP),
//     the recall TP/(TP + FN) and the support (samples of the class);
//   float32 values (regression; label_dtype() F32): the mean squared error as the loss, the mean
//     absolute error and the root mean squared error, over every target element.
#pragma once
#include <cstdint>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/data/dataset.h"
#include "edp/nn/module.h"

namespace edp::train {

struct EvalResult {
  double loss = 0;      // classes: mean softmax cross-entropy; values: mean squared error
  double accuracy = 0;  // classes: fraction of argmax == label
  int64_t samples = 0;
  // Values: mean absolute error, root mean squared error (over every target element).
  double mae = 0, rmse = 0;
  // Classes, indexed by label: precision and recall (0 where nothing was predicted / present),
  // and the samples of each class.
  std::vector<double> precision, recall;
  std::vector<int64_t> support;
};

// Restores the module's training mode afterwards.
EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch = 256);

// Each rank evaluates its contiguous share of the dataset; the sums are combined over `comm`,
// so every rank gets the result for the whole dataset.
EvalResult evaluate(nn::Module& model, const data::Dataset& ds, comm::Communicator& comm,
                    int64_t batch = 256);

}  // namespace edp::train
