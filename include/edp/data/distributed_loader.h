// DistributedLoader: a DataLoader that owns its DistributedSampler — one batch size, advanced
// by the loader itself — for data-parallel training loops, elastic ones in particular.
//
// Each next() is one optimizer step of the whole job: it hands out this rank's slice of the
// step's global batch and marks the step consumed (the sampler's position moves past it), so a
// checkpoint taken after the optimizer step records exactly what was trained on. In the uneven
// last step of an epoch (DistributedSampler's TailPolicy::Uneven) a rank may have no sample: the
// Step is then returned with an empty batch and local == 0, and the rank must still take part in
// the step's collectives (DistributedDataParallel::sync_without_backward).
//
// reshard() moves the loader to another world size, rank or per-rank batch size in the middle of
// an epoch: the rest of the epoch's permutation is split anew, every sample still seen once.
#pragma once
#include <cstdint>
#include <memory>

#include "edp/data/distributed_sampler.h"
#include "edp/data/loader.h"

namespace edp::data {

struct DistributedLoaderOptions {
  bool shuffle = true;
  TailPolicy tail = TailPolicy::Uneven;
  int workers = 1;   // threads assembling batches
  int prefetch = 4;  // batches ahead per worker
};

class DistributedLoader {
 public:
  struct Step {
    Batch batch;         // this rank's samples (empty when local == 0)
    int64_t local = 0;   // this rank's sample count in the step
    int64_t global = 0;  // the whole job's sample count in the step
  };

  DistributedLoader(std::shared_ptr<const Dataset> dataset, uint64_t seed, int world_size, int rank,
                    int64_t batch_size, DistributedLoaderOptions options = {});

  // Begins `epoch`; the current epoch again keeps the position (resuming after a restore).
  void start_epoch(int64_t epoch);
  // The next step of the epoch, which is then counted as consumed; false at the end of the epoch.
  bool next(Step& out);
  // Another world size / rank / per-rank batch from the current position (see the file comment).
  void reshard(int world_size, int rank, int64_t batch_size);
  // The position after a restore (DistributedSampler::load_state); the epoch restarts from it.
  void load_state(const SamplerState& s);

  int64_t steps_remaining() const { return sampler_->steps_remaining(); }
  int64_t steps_per_epoch() const;  // of a whole epoch at the current global batch
  int64_t epoch() const { return sampler_->epoch(); }
  int64_t position() const { return sampler_->position(); }
  int64_t batch_size() const { return sampler_->batch_size(); }
  int64_t global_batch_size() const { return sampler_->global_batch_size(); }
  const DistributedSampler& sampler() const { return *sampler_; }
  DistributedSampler& sampler() { return *sampler_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  void build(int world_size, int rank, int64_t batch_size, const SamplerState* state);

  std::shared_ptr<const Dataset> dataset_;
  uint64_t seed_;
  DistributedLoaderOptions opt_;
  std::shared_ptr<DistributedSampler> sampler_;
  std::unique_ptr<DataLoader> loader_;
  bool started_ = false;
};

}  // namespace edp::data
