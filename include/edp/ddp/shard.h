// The sharded optimizer state's layout, and its move from one world size to another (ZeRO stage 1;
// docs/architecture.md, "Sharded optimizer state and gradients").
//
// Sharded over W ranks, each gradient bucket of DistributedDataParallel is cut into W parts of
// ceil(elements / W) elements (the last part shorter, possibly empty) and rank r owns part r of
// every bucket: the runs of parameters that part covers. A rank's state is its StateShard: for
// each of its runs, the optimizer's state tensors of that run (AdamW: the two moments).
//
// reshard() moves a state sharded over `from` ranks to a sharding over `to` ranks in one
// personalised exchange (Communicator::alltoallv): every element goes once, from its old owner
// straight to its new one. No rank ever holds the whole state (unless `to` is 1: that rank is
// then the whole world); a rank holds at most its old part, its new part and one packed copy of
// either. Elastic jobs use it for every change of size (edp/elastic/job.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/core/tensor.h"

namespace edp::nn {
struct Parameter;
}

namespace edp::ddp {

// Elements [offset, offset + length) of the module's parameter #param (parameters() order).
struct ShardRun {
  size_t param = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const ShardRun& o) const { return param == o.param && offset == o.offset && length == o.length; }
};

// DistributedDataParallel's gradient buckets: each a list of parameter indices (in backward
// order: the last registered first), filled up to `first_bucket_bytes` for the first bucket and
// `bucket_cap_bytes` for the others; a parameter larger than a cap gets a bucket of its own.
std::vector<std::vector<size_t>> bucket_groups(const std::vector<nn::Parameter*>& params, int64_t first_bucket_bytes,
                                               int64_t bucket_cap_bytes);

class ShardLayout {
 public:
  ShardLayout() = default;
  // numel: each parameter's element count; buckets: bucket_groups().
  ShardLayout(std::vector<int64_t> numel, std::vector<std::vector<size_t>> buckets);

  // Rank r's runs when sharded over `world` ranks, bucket by bucket, within a bucket in its
  // parameters' order. world 1: every parameter whole.
  std::vector<ShardRun> runs(int world, int rank) const;
  // The part of a bucket of `numel` elements over `world` ranks.
  static int64_t part(int64_t numel, int world) { return (numel + world - 1) / world; }
  // An element's position when the buckets are laid end to end (runs are intervals there).
  int64_t position(size_t param, int64_t offset) const { return start_[param] + offset; }
  size_t num_params() const { return numel_.size(); }
  int64_t numel() const { return total_; }

 private:
  std::vector<int64_t> numel_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<int64_t> start_;  // each parameter's first position
  int64_t total_ = 0;
};

// One rank's part of an optimizer state sharded over `world` ranks.
struct StateShard {
  int world = 1, rank = 0;
  // No state yet: the optimizer has not stepped (its state starts as zeros); `data` is empty.
  bool fresh = true;
  int per_run = 0;  // the optimizer's state tensors per parameter (SGD with momentum 1, AdamW 2)
  DType dtype = DType::F32;
  int64_t steps = 0;           // the optimizer's step count
  std::vector<ShardRun> runs;  // layout.runs(world, rank)
  std::vector<Tensor> data;    // runs.size() * per_run host tensors of their run's length, run-major
  int64_t bytes() const;
};

// Moves a state sharded over `from` ranks to a sharding over `to` ranks (see the file comment).
// Collective over `comm`, which has at least max(from, to) ranks: ranks [0, from) give their
// StateShard (`mine`; the others an empty one), ranks [0, to) get theirs (the others get an empty
// shard of world `to`). Rank 0 says whether the state is fresh, its dtype, tensors per run and
// step count. Throws when a given shard is not the layout's part of that rank.
StateShard reshard(comm::Communicator& comm, const ShardLayout& layout, StateShard mine, int from, int to);

}  // namespace edp::ddp
