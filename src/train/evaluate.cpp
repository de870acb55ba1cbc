// Evaluation of classifiers and regressors (edp/train/evaluate.h): sums over the batches (and,
// distributed, over the ranks), then the metrics from the sums.
#include "edp/train/evaluate.h"

#include <cmath>

#include "edp/backend/ops.h"
#include "edp/core/error.h"
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

// What the metrics are computed from, summed over batches and ranks. Classes: [loss, correct,
// then per class TP, predicted, present]; values: [squared error, absolute error, elements].
struct Sums {
  bool values = false;
  int64_t samples = 0;
  std::vector<double> v;
};

Sums evaluate_range(nn::Module& model, const data::Dataset& ds, int64_t begin, int64_t end, int64_t batch) {
  const bool was_training = model.is_training();
  model.eval();
  // Non-owning shared_ptr: the loader only lives inside this call.
  std::shared_ptr<const data::Dataset> view(&ds, [](const data::Dataset*) {});
  data::DataLoader loader(view, std::make_shared<RangeSampler>(begin, end),
                          {.batch_size = batch, .drop_last = false, .workers = 1, .prefetch = 2});
  loader.start_epoch(0);
  Sums s;
  s.values = ds.label_dtype() != DType::I32;
  const int64_t C = s.values ? 0 : ds.num_classes();
  const bool per_class = !s.values && ds.label_shape().ndim() == 0;
  s.v.assign(s.values ? 3 : static_cast<size_t>(2 + (per_class ? 3 * C : 0)), 0.0);
  // Batches go to the model's device (ops never copy between devices themselves).
  const auto params = model.parameters();
  const Device dev = params.empty() ? Device::cpu() : params.front()->value.device();
  data::Batch b;
  while (loader.next(b)) {
    const Tensor x = b.x.to(dev), y = b.y.to(dev);
    Tensor out = model.forward(x);
    s.samples += b.size();
    if (s.values) {
      const Tensor p = out.to(Device::cpu()).to(DType::F64), t = b.y.to(DType::F64);
      EDP_CHECK_SHAPE(p.numel() == t.numel(), "evaluate: the model's outputs ", out.shape().str(),
                      " do not match the targets ", b.y.shape().str(), " one for one");
      const double* pp = p.data<double>();
      const double* tp = t.data<double>();
      for (int64_t i = 0; i < p.numel(); ++i) {
        const double d = pp[i] - tp[i];
        s.v[0] += d * d;
        s.v[1] += std::abs(d);
      }
      s.v[2] += static_cast<double>(p.numel());
      continue;
    }
    Tensor probs;
    s.v[0] += ops::softmax_cross_entropy_forward(out, y, probs) * static_cast<double>(b.size());
    s.v[1] += static_cast<double>(ops::count_correct(out, y));
    if (!per_class) continue;
    const Tensor z = out.to(Device::cpu()).to(DType::F64);
    const double* zp = z.data<double>();
    const int32_t* lab = b.y.data<int32_t>();
    for (int64_t r = 0; r < b.size(); ++r) {
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (zp[r * C + c] > zp[r * C + best]) best = c;
      const auto at = [&](int k, int64_t c) -> double& { return s.v[static_cast<size_t>(2 + 3 * c + k)]; };
      at(1, best) += 1;      // predicted
      at(2, lab[r]) += 1;    // present
      if (best == lab[r]) at(0, best) += 1;
    }
  }
  model.train(was_training);
  return s;
}

EvalResult finish(const Sums& s) {
  EvalResult r;
  r.samples = s.samples;
  if (!s.samples) return r;
  if (s.values) {
    const double n = std::max(1.0, s.v[2]);
    r.loss = s.v[0] / n;
    r.rmse = std::sqrt(s.v[0] / n);
    r.mae = s.v[1] / n;
    return r;
  }
  r.loss = s.v[0] / static_cast<double>(s.samples);
  r.accuracy = s.v[1] / static_cast<double>(s.samples);
  const size_t C = (s.v.size() - 2) / 3;
  for (size_t c = 0; c < C; ++c) {
    const double tp = s.v[2 + 3 * c], pred = s.v[3 + 3 * c], present = s.v[4 + 3 * c];
    r.precision.push_back(pred > 0 ? tp / pred : 0.0);
    r.recall.push_back(present > 0 ? tp / present : 0.0);
    r.support.push_back(static_cast<int64_t>(present));
  }
  return r;
}
}  // namespace

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch) {
  return finish(evaluate_range(model, ds, 0, ds.size(), batch));
}

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, comm::Communicator& comm, int64_t batch) {
  const int64_t n = ds.size(), W = comm.size(), r = comm.rank();
  Sums s = evaluate_range(model, ds, n * r / W, n * (r + 1) / W, batch);
  comm.allreduce(s.v.data(), s.v.data(), s.v.size(), DType::F64, comm::ReduceOp::Sum);
  s.samples = comm.allreduce_value<int64_t>(s.samples);
  return finish(s);
}

}  // namespace edp::train
