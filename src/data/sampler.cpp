// Sequential and seeded-random samplers. The epoch permutation is iota(n) shuffled by an Rng
// seeded with derive_seed(seed, epoch): every process computes the same order.
#include <numeric>

#include "edp/core/random.h"
#include "edp/data/loader.h"

namespace edp::data {

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  Rng rng(derive_seed(seed, static_cast<uint64_t>(epoch)));
  rng.shuffle(v);
  return v;
}

std::vector<int64_t> RandomSampler::indices() const { return epoch_permutation(n_, seed_, epoch_); }

}  // namespace edp::data
