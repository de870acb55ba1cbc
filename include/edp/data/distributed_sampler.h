// DistributedSampler: which dataset indices each rank visits in an epoch, such that the ranks
// together visit the epoch's permutation once, and a job stopped mid-epoch can resume the rest
// of that epoch at a DIFFERENT world size or per-rank batch size with every sample still seen
// exactly once.
//
// The model. The epoch's global order is epoch_permutation(n, seed, epoch) (or 0..n-1 without
// shuffle), identical on every rank. The job consumes it front to back in steps: a step takes
// the next world_size * batch_size indices (the global batch) and rank r takes its contiguous
// slice [r*batch_size, (r+1)*batch_size) of them. The sampler's position counts the samples the
// whole job has consumed in this epoch; it is the only state besides the epoch (SamplerState),
// and it does not depend on the world size. Restoring the position under another world size
// re-shards the rest of the permutation, perm[position:], with the new world and batch sizes.
//
// The last step of an epoch usually has t < world_size * batch_size indices left. TailPolicy:
//   Uneven (default): the t indices are split as evenly as possible, in rank order: ranks get
//     floor(t/W) or floor(t/W)+1 (the first t%W ranks get one more). Every sample is seen
//     exactly once. Consequences: (1) ranks have different batch sizes in that step, so the DDP
//     must weight each rank's gradient by its share of step_global_count() — plain averaging
//     over ranks would over-weight the smaller batches; (2) when t < W some ranks get ZERO
//     samples and must still take part in the step's collectives with a zero gradient; a
//     DataLoader over indices() produces one batch fewer on those ranks, so a training loop
//     must iterate steps_remaining() steps (or query step_local_count), not loader batches.
//   Pad: every rank gets c = ceil(t/W) indices (1 <= c <= batch_size); the W*c - t missing
//     ones are taken from the start of the epoch's permutation (wrapping), so up to W-1 samples
//     are seen twice in the epoch and every rank has a non-empty, equal last batch. The
//     position still counts only real samples (it ends at n).
//   Drop: the last partial global batch is skipped; those t samples are not seen this epoch
//     (a different t at a different world size). Every step is full.
//
// Usage with DataLoader: LoaderOptions::batch_size must equal the sampler's batch_size and
// drop_last must be false; indices() starts at the current position, so after load_state the
// loader starts at skip = 0. Call advance() once per completed optimizer step.
#pragma once
#include <cstdint>
#include <vector>

#include "edp/data/loader.h"

namespace edp::data {

enum class TailPolicy : uint8_t { Uneven = 0, Pad = 1, Drop = 2 };
const char* tail_policy_name(TailPolicy p);  // "uneven", "pad", "drop"

struct DistributedSamplerOptions {
  int64_t batch_size = 1;  // per rank per step
  bool shuffle = true;     // false: the global order is 0..n-1
  TailPolicy tail = TailPolicy::Uneven;
};

// What must survive a restart. Independent of world size and batch size.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // samples of this epoch's order consumed by the whole job
  int64_t dataset_size = 0;
  uint64_t seed = 0;
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, uint64_t seed, int world_size, int rank,
                     DistributedSamplerOptions options = {});

  // A new epoch starts at position 0; setting the CURRENT epoch again keeps the position (so
  // DataLoader::start_epoch after load_state resumes instead of restarting the epoch).
  void set_epoch(int64_t epoch) override;
  // This rank's indices from the current position to the end of the epoch: the concatenation
  // of step_indices(0), step_indices(1), ...
  std::vector<int64_t> indices() const override;

  // Steps left in this epoch from the current position.
  int64_t steps_remaining() const;
  // This rank's / any rank's indices and counts in step k counted from the current position.
  std::vector<int64_t> step_indices(int64_t k) const { return step_indices(k, rank_); }
  std::vector<int64_t> step_indices(int64_t k, int rank) const;
  int64_t step_local_count(int64_t k) const { return step_local_count(k, rank_); }
  int64_t step_local_count(int64_t k, int rank) const;
  // Samples the whole job processes in step k (padding included under Pad): the divisor for a
  // gradient average over the global batch.
  int64_t step_global_count(int64_t k) const;

  // Marks `steps` steps as done (position moves past them). Throws past the end of the epoch.
  void advance(int64_t steps = 1);
  int64_t position() const { return position_; }
  // Any 0 <= position <= dataset_size; need not be a step boundary of this world size.
  void set_position(int64_t position);
  bool epoch_done() const { return steps_remaining() == 0; }

  SamplerState state() const;
  // Throws edp::Error if the state was saved for another dataset size or seed.
  void load_state(const SamplerState& s);

  int64_t epoch() const { return epoch_; }
  int64_t dataset_size() const { return n_; }
  int world_size() const { return world_; }
  int rank() const { return rank_; }
  int64_t batch_size() const { return opt_.batch_size; }
  int64_t global_batch_size() const { return opt_.batch_size * world_; }
  const DistributedSamplerOptions& options() const { return opt_; }

 private:
  void build_order();
  int64_t full_steps() const;  // full global batches left
  int64_t tail() const;        // indices left after them
  void check_step(int64_t k, int rank) const;

  int64_t n_;
  uint64_t seed_;
  int world_;
  int rank_;
  DistributedSamplerOptions opt_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;  // this epoch's global order
};

}  // namespace edp::data
