// Classifier evaluation.
#include "edp/train/evaluate.h"

#include "edp/backend/ops.h"
#include "edp/data/loader.h"

namespace edp::train {

namespace {
// Visits [begin, end) in order.
class RangeSampler : public data::Sampler {
 public:
  RangeSampler(int64_t begin, int64_t end) : begin_(begin), end_(end) {}
  void set_epoch(int64_t) override {}
  std::vector<int64_t> indices() const override {
    std::vector<int64_t> v;
    for (int64_t i = begin_; i < end_; ++i) v.push_back(i);
    return v;
  }

 private:
  int64_t begin_, end_;
};

// Returns (loss sum, correct count, samples) over [begin, end).
EvalResult evaluate_range(nn::Module& model, const data::Dataset& ds, int64_t begin, int64_t end,
                          int64_t batch, double& loss_sum, int64_t& correct) {
  const bool was_training = model.is_training();
  model.eval();
  // Non-owning shared_ptr: the loader only lives inside this call.
  std::shared_ptr<const data::Dataset> view(&ds, [](const data::Dataset*) {});
  data::DataLoader loader(view, std::make_shared<RangeSampler>(begin, end),
                          {.batch_size = batch, .drop_last = false, .workers = 1, .prefetch = 2});
  loader.start_epoch(0);
  EvalResult r;
  loss_sum = 0;
  correct = 0;
  // Batches go to the model's device (ops never copy between devices themselves).
  const auto params = model.parameters();
  const Device dev = params.empty() ? Device::cpu() : params.front()->value.device();
  data::Batch b;
  while (loader.next(b)) {
    const Tensor x = b.x.to(dev), y = b.y.to(dev);
    Tensor logits = model.forward(x);
    Tensor probs;
    loss_sum += ops::softmax_cross_entropy_forward(logits, y, probs) * static_cast<double>(b.size());
    correct += ops::count_correct(logits, y);
    r.samples += b.size();
  }
  model.train(was_training);
  return r;
}

EvalResult finish(double loss_sum, int64_t correct, int64_t samples) {
  EvalResult r;
  r.samples = samples;
  if (samples) {
    r.loss = loss_sum / static_cast<double>(samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  }
  return r;
}
}  // namespace

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch) {
  double loss_sum;
  int64_t correct;
  const EvalResult r = evaluate_range(model, ds, 0, ds.size(), batch, loss_sum, correct);
  return finish(loss_sum, correct, r.samples);
}

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, comm::Communicator& comm,
                    int64_t batch) {
  const int64_t n = ds.size(), W = comm.size(), r = comm.rank();
  double loss_sum;
  int64_t correct;
  const EvalResult part = evaluate_range(model, ds, n * r / W, n * (r + 1) / W, batch, loss_sum, correct);
  double sums[2] = {loss_sum, static_cast<double>(correct)};
  comm.allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
  const int64_t samples = comm.allreduce_value<int64_t>(part.samples);
  return finish(sums[0], static_cast<int64_t>(sums[1]), samples);
}

}  // namespace edp::train
