// Samplers decide which indices a process visits in an epoch and in what order; the DataLoader
// turns them into batches with worker threads and a bounded prefetch queue. The batch content
// depends only on the sampler's order, never on thread timing, so training is deterministic.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "edp/core/tensor.h"
#include "edp/data/dataset.h"

namespace edp::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual void set_epoch(int64_t epoch) = 0;
  // The indices this process visits in the current epoch, in order.
  virtual std::vector<int64_t> indices() const = 0;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n) : n_(n) {}
  void set_epoch(int64_t) override {}
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
};

// A permutation of [0, n) drawn from (seed, epoch): the same on every process.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// The permutation used by RandomSampler (exposed so that distributed samplers share it).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

struct Batch {
  Tensor x;                      // feature_dtype() [b, ...sample_shape] (float32 for images)
  Tensor y;                      // label_dtype() [b, ...label_shape]: int32 [b] for classification
  std::vector<int64_t> indices;  // dataset indices of the rows
  int64_t size() const { return x.defined() ? x.dim(0) : 0; }
};

struct LoaderOptions {
  int64_t batch_size = 64;
  bool drop_last = false;  // drop a final partial batch
  int workers = 1;         // threads assembling batches (0 = assemble on the caller's thread)
  int prefetch = 2;        // batches prepared ahead per worker (>= 1 when workers > 0)
};

// Threading contract: one consumer thread calls start_epoch()/next(); the loader's own workers
// claim batch indices in increasing order, and at most workers*prefetch batches (counting the
// one the consumer waits for) are being built or waiting at any time. Every batch is freshly
// allocated, so a Batch stays valid after later next() calls. An exception from Dataset::get (or a bad sampler
// index) in batch k is re-thrown by next() once batches < k have been handed out — the same
// place as with workers=0 — and again by every later next() until the next start_epoch().

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
             LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins an epoch: calls sampler->set_epoch(epoch) and starts the workers. `skip` batches at
  // the start of the epoch are not produced (resuming mid-epoch).
  void start_epoch(int64_t epoch, int64_t skip = 0);
  // The next batch of the epoch in order; false at the end of the epoch.
  bool next(Batch& out);
  int64_t batches_per_epoch() const;  // for the current sampler order
  // Index (within the epoch) of the batch the next call to next() returns: the `skip` that
  // resumes the epoch right here.
  int64_t next_batch_index() const { return next_out_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return opt_; }

 private:
  void stop();
  void worker_loop(int worker);
  Batch assemble(int64_t batch_index) const;

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  LoaderOptions opt_;
  std::vector<int64_t> order_;
  int64_t num_batches_ = 0;
  int64_t next_out_ = 0;

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;      // workers wait here for room in the prefetch window
  std::condition_variable cv_out_;  // the consumer waits here for batch next_out_
  std::deque<std::pair<int64_t, Batch>> ready_;  // completed batches, any order
  int64_t next_claim_ = 0;
  bool stopping_ = false;
  bool started_ = false;
  std::exception_ptr error_;
  int64_t error_batch_ = 0;  // batch index whose assembly failed (valid when error_ is set)
};

}  // namespace edp::data
