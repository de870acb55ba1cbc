// DataLoader: worker threads claim batch indices in increasing order, assemble them into
// tensors and park them in `ready_`; next() hands them out strictly in order. A batch's content
// depends only on the sampler's order, never on which thread built it or when, so any number
// of workers (including none) yields bitwise the same batches. Memory is bounded: a worker may
// only claim batch b while b < next_out_ + workers*prefetch.
#include <algorithm>

#include "edp/core/error.h"
#include "edp/data/loader.h"

namespace edp::data {

using ::edp::detail::concat;

namespace {
constexpr int kMaxWorkers = 256;  // a guard against a typo, not a tuning limit
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       LoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), opt_(options) {
  if (!dataset_) throw Error("DataLoader: the dataset is null");
  if (!sampler_) throw Error("DataLoader: the sampler is null");
  if (opt_.batch_size < 1)
    throw Error(concat("DataLoader: batch_size must be >= 1, got ", opt_.batch_size));
  if (opt_.workers < 0 || opt_.workers > kMaxWorkers)
    throw Error(concat("DataLoader: workers must be in 0..", kMaxWorkers, ", got ",
                       opt_.workers));
  if (opt_.workers > 0 && opt_.prefetch < 1)
    throw Error(concat("DataLoader: prefetch must be >= 1 when workers > 0, got ",
                       opt_.prefetch));
}

DataLoader::~DataLoader() { stop(); }

void DataLoader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // A worker in the middle of Dataset::get finishes that batch, then sees stopping_.
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  ready_.clear();
  stopping_ = false;
  error_ = nullptr;
  error_batch_ = 0;
}

static int64_t count_batches(int64_t n, const LoaderOptions& o) {
  return o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
}

int64_t DataLoader::batches_per_epoch() const {
  if (started_) return num_batches_;
  return count_batches(static_cast<int64_t>(sampler_->indices().size()), opt_);
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip) {
  stop();
  started_ = false;
  sampler_->set_epoch(epoch);
  order_ = sampler_->indices();
  num_batches_ = count_batches(static_cast<int64_t>(order_.size()), opt_);
  if (skip < 0 || skip > num_batches_)
    throw Error(concat("DataLoader::start_epoch(", epoch, ", skip=", skip,
                       "): skip must be in 0..", num_batches_, " (batches in this epoch: ",
                       order_.size(), " samples, batch size ", opt_.batch_size,
                       opt_.drop_last ? ", drop_last" : "", ")"));
  next_out_ = next_claim_ = skip;
  started_ = true;
  if (next_claim_ >= num_batches_) return;
  try {
    for (int w = 0; w < opt_.workers; ++w) threads_.emplace_back(&DataLoader::worker_loop, this, w);
  } catch (...) {
    stop();
    started_ = false;
    throw;
  }
}

bool DataLoader::next(Batch& out) {
  if (!started_) throw Error("DataLoader::next() before start_epoch(): call start_epoch() first");
  if (opt_.workers == 0) {
    if (error_) std::rethrow_exception(error_);
    if (next_out_ >= num_batches_) return false;
    try {
      out = assemble(next_out_);
    } catch (...) {
      error_ = std::current_exception();
      error_batch_ = next_out_;
      throw;
    }
    ++next_out_;
    return true;
  }
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // Batches before a failed one are still delivered: the error surfaces where it would with
    // workers=0, whatever the thread timing.
    if (error_ && error_batch_ == next_out_) std::rethrow_exception(error_);
    if (next_out_ >= num_batches_) return false;
    auto it = std::find_if(ready_.begin(), ready_.end(),
                           [&](const auto& e) { return e.first == next_out_; });
    if (it != ready_.end()) {
      out = std::move(it->second);
      ready_.erase(it);
      ++next_out_;
      lk.unlock();
      cv_.notify_all();  // the window moved; workers that ran out of claims exit too
      return true;
    }
    cv_out_.wait(lk);
  }
}

void DataLoader::worker_loop(int /*worker*/) {
  const int64_t window = static_cast<int64_t>(opt_.workers) * opt_.prefetch;
  for (;;) {
    int64_t b;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Nothing is claimed at or after a failed batch: those would never be handed out.
      auto limit = [&] { return error_ ? std::min(num_batches_, error_batch_) : num_batches_; };
      cv_.wait(lk, [&] {
        return stopping_ || next_claim_ >= limit() || next_claim_ < next_out_ + window;
      });
      if (stopping_ || next_claim_ >= limit()) return;
      b = next_claim_++;
    }
    try {
      Batch batch = assemble(b);
      {
        std::lock_guard<std::mutex> lk(mu_);
        ready_.emplace_back(b, std::move(batch));
      }
      cv_out_.notify_one();
    } catch (...) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_ || b < error_batch_) {
          error_ = std::current_exception();
          error_batch_ = b;
        }
      }
      cv_out_.notify_one();
      cv_.notify_all();
      return;
    }
  }
}

Batch DataLoader::assemble(int64_t batch_index) const {
  const int64_t n_order = static_cast<int64_t>(order_.size());
  const int64_t begin = batch_index * opt_.batch_size;
  const int64_t end = std::min(begin + opt_.batch_size, n_order);
  const int64_t count = end - begin;
  const Shape ss = dataset_->sample_shape();
  const int64_t row = ss.numel();
  std::vector<int64_t> dims{count};
  dims.insert(dims.end(), ss.dims().begin(), ss.dims().end());

  const Shape ls = dataset_->label_shape();
  std::vector<int64_t> ydims{count};
  ydims.insert(ydims.end(), ls.dims().begin(), ls.dims().end());
  const int64_t yrow = ls.numel();
  const DType ydt = dataset_->label_dtype();
  // Class labels are checked here; sequence labels by the loss (which knows its ignore index),
  // float targets (values) by nobody.
  const bool class_label = ls.ndim() == 0 && ydt == DType::I32;

  Batch batch;
  batch.x = Tensor(Shape(dims), dataset_->feature_dtype());
  batch.y = Tensor(Shape(ydims), ydt);
  batch.indices.assign(order_.begin() + begin, order_.begin() + end);
  char* x = static_cast<char*>(batch.x.raw());
  const size_t xrow_bytes = static_cast<size_t>(row) * dtype_size(batch.x.dtype());
  char* y = static_cast<char*>(batch.y.raw());
  const size_t yrow_bytes = static_cast<size_t>(yrow) * dtype_size(ydt);
  const int64_t size = dataset_->size();
  const int classes = dataset_->num_classes();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t idx = batch.indices[static_cast<size_t>(r)];
    if (idx < 0 || idx >= size)
      throw Error(concat("DataLoader: the sampler gave index ", idx, " (position ", begin + r,
                         " of the epoch) but the dataset holds ", size, " samples"));
    char* yr = y + static_cast<size_t>(r) * yrow_bytes;
    dataset_->read_sample(idx, x + static_cast<size_t>(r) * xrow_bytes, yr);
    if (class_label) {
      const int32_t label = *reinterpret_cast<const int32_t*>(yr);
      if (label < 0 || label >= classes)
        throw DataError(concat("DataLoader: sample ", idx, " has label ", label,
                               ", outside the dataset's classes 0..", classes - 1));
    }
  }
  return batch;
}

}  // namespace edp::data
