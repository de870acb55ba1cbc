// Classifier evaluation.
#include "edp/train/evaluate.h"

#include "edp/backend/ops.h"
#include "edp/data/loader.h"

namespace edp::train {

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch) {
  const bool was_training = model.is_training();
  model.eval();
  // Non-owning shared_ptr: the loader only lives inside this call.
  std::shared_ptr<const data::Dataset> view(&ds, [](const data::Dataset*) {});
  data::DataLoader loader(view, std::make_shared<data::SequentialSampler>(ds.size()),
                          {.batch_size = batch, .drop_last = false, .workers = 1, .prefetch = 2});
  loader.start_epoch(0);
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  data::Batch b;
  while (loader.next(b)) {
    Tensor logits = model.forward(b.x);
    Tensor probs;
    loss_sum += ops::softmax_cross_entropy_forward(logits, b.y, probs) * static_cast<double>(b.size());
    correct += ops::count_correct(logits, b.y);
    r.samples += b.size();
  }
  model.train(was_training);
  if (r.samples) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  return r;
}

}  // namespace edp::train
