// DistributedSampler: steps over the epoch's global order, each rank taking its slice of each
// global batch; the rules for the last partial batch are in the header.
#include "edp/data/distributed_sampler.h"

#include <algorithm>
#include <numeric>

#include "edp/core/error.h"

namespace edp::data {

const char* tail_policy_name(TailPolicy p) {
  switch (p) {
    case TailPolicy::Uneven: return "uneven";
    case TailPolicy::Pad: return "pad";
    case TailPolicy::Drop: return "drop";
  }
  return "?";
}

DistributedSampler::DistributedSampler(int64_t dataset_size, uint64_t seed, int world_size,
                                       int rank, DistributedSamplerOptions options)
    : n_(dataset_size), seed_(seed), world_(world_size), rank_(rank), opt_(options) {
  EDP_CHECK(n_ >= 0, "DistributedSampler: dataset size ", n_, " is negative");
  EDP_CHECK(world_ >= 1, "DistributedSampler: world size ", world_, " must be at least 1");
  EDP_CHECK(rank_ >= 0 && rank_ < world_, "DistributedSampler: rank ", rank_,
            " is outside a world of ", world_);
  EDP_CHECK(opt_.batch_size >= 1, "DistributedSampler: batch_size ", opt_.batch_size,
            " must be at least 1");
  build_order();
}

void DistributedSampler::build_order() {
  if (opt_.shuffle) {
    order_ = epoch_permutation(n_, seed_, epoch_);
  } else {
    order_.resize(static_cast<size_t>(n_));
    std::iota(order_.begin(), order_.end(), int64_t{0});
  }
}

void DistributedSampler::set_epoch(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  position_ = 0;
  build_order();
}

int64_t DistributedSampler::full_steps() const { return (n_ - position_) / global_batch_size(); }
int64_t DistributedSampler::tail() const { return (n_ - position_) % global_batch_size(); }

int64_t DistributedSampler::steps_remaining() const {
  return full_steps() + (opt_.tail != TailPolicy::Drop && tail() > 0 ? 1 : 0);
}

void DistributedSampler::check_step(int64_t k, int rank) const {
  EDP_CHECK(rank >= 0 && rank < world_, "DistributedSampler: rank ", rank,
            " is outside a world of ", world_);
  EDP_CHECK(k >= 0 && k < steps_remaining(), "DistributedSampler: step ", k,
            " is past the end of epoch ", epoch_, " (", steps_remaining(),
            " steps remain from position ", position_, ")");
}

int64_t DistributedSampler::step_local_count(int64_t k, int rank) const {
  check_step(k, rank);
  if (k < full_steps()) return opt_.batch_size;
  const int64_t t = tail();
  if (opt_.tail == TailPolicy::Pad) return (t + world_ - 1) / world_;
  return t / world_ + (rank < t % world_ ? 1 : 0);  // Uneven
}

int64_t DistributedSampler::step_global_count(int64_t k) const {
  check_step(k, 0);
  if (k < full_steps()) return global_batch_size();
  const int64_t t = tail();
  if (opt_.tail == TailPolicy::Pad) return world_ * ((t + world_ - 1) / world_);
  return t;
}

std::vector<int64_t> DistributedSampler::step_indices(int64_t k, int rank) const {
  const int64_t count = step_local_count(k, rank);
  const int64_t step_start = position_ + k * global_batch_size();
  std::vector<int64_t> out(static_cast<size_t>(count));
  if (k < full_steps()) {
    const int64_t s = step_start + rank * opt_.batch_size;
    std::copy_n(order_.begin() + s, count, out.begin());
    return out;
  }
  const int64_t t = tail();
  int64_t first;  // rank's first slot among the step's (possibly padded) slots
  if (opt_.tail == TailPolicy::Pad) {
    first = rank * count;
  } else {
    const int64_t base = t / world_, extra = t % world_;
    first = rank * base + std::min<int64_t>(rank, extra);
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = first + i;
    // Slots past the tail are padding: they wrap to the start of the epoch's order.
    out[static_cast<size_t>(i)] =
        slot < t ? order_[static_cast<size_t>(step_start + slot)] : order_[static_cast<size_t>((slot - t) % n_)];
  }
  return out;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> out;
  const int64_t steps = steps_remaining();
  out.reserve(static_cast<size_t>(steps * opt_.batch_size));
  for (int64_t k = 0; k < steps; ++k) {
    const auto s = step_indices(k);
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

void DistributedSampler::advance(int64_t steps) {
  EDP_CHECK(steps >= 0 && steps <= steps_remaining(), "DistributedSampler::advance(", steps,
            "): only ", steps_remaining(), " steps remain in epoch ", epoch_);
  const int64_t full = std::min(steps, full_steps());
  position_ += full * global_batch_size();
  if (steps > full) position_ = n_;  // the tail step (Uneven/Pad) consumes the rest
}

void DistributedSampler::set_position(int64_t position) {
  EDP_CHECK(position >= 0 && position <= n_, "DistributedSampler::set_position(", position,
            "): must be within [0, ", n_, "]");
  position_ = position;
}

SamplerState DistributedSampler::state() const { return {epoch_, position_, n_, seed_}; }

void DistributedSampler::load_state(const SamplerState& s) {
  EDP_CHECK(s.dataset_size == n_ && s.seed == seed_,
            "DistributedSampler::load_state: the state was saved for a dataset of ",
            s.dataset_size, " samples with seed ", s.seed, ", but this sampler has ", n_,
            " samples and seed ", seed_, "; resume with the same dataset and seed");
  if (s.epoch != epoch_) {
    epoch_ = s.epoch;
    build_order();
  }
  set_position(s.position);
}

}  // namespace edp::data
