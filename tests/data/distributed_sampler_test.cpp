// DistributedSampler as pure logic, one process simulating every rank of a world: exactly-once
// coverage per epoch under each tail policy, the step structure, and resuming mid-epoch at a
// different world size and batch size. Configurations are enumerated and also drawn at random
// (seeded, so a failure reproduces).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "edp/core/random.h"
#include "edp/data/distributed_sampler.h"

using edp::data::DistributedSampler;
using edp::data::DistributedSamplerOptions;
using edp::data::SamplerState;
using edp::data::TailPolicy;

namespace {

std::vector<DistributedSampler> world(int64_t n, uint64_t seed, int w, int64_t b, TailPolicy tail,
                                      int64_t epoch = 0) {
  std::vector<DistributedSampler> v;
  for (int r = 0; r < w; ++r) {
    v.emplace_back(n, seed, w, r, DistributedSamplerOptions{b, true, tail});
    v.back().set_epoch(epoch);
  }
  return v;
}

// Runs `steps` steps (all remaining if -1) of every rank, counting visits per index and
// checking that the ranks agree on the step structure. Advances every sampler.
void run_steps(std::vector<DistributedSampler>& ranks, std::map<int64_t, int>& visits, int64_t steps = -1) {
  const int64_t total = ranks[0].steps_remaining();
  if (steps < 0) steps = total;
  for (auto& s : ranks) ASSERT_EQ(s.steps_remaining(), total) << "ranks disagree on the steps left";
  for (int64_t k = 0; k < steps; ++k) {
    int64_t sum = 0;
    for (auto& s : ranks) {
      const auto idx = s.step_indices(0);
      ASSERT_EQ(static_cast<int64_t>(idx.size()), s.step_local_count(0));
      ASSERT_LE(static_cast<int64_t>(idx.size()), s.batch_size());
      sum += static_cast<int64_t>(idx.size());
      for (int64_t i : idx) {
        ASSERT_GE(i, 0);
        ASSERT_LT(i, s.dataset_size());
        ++visits[i];
      }
    }
    ASSERT_EQ(sum, ranks[0].step_global_count(0));
    for (auto& s : ranks) s.advance(1);
  }
}

TEST(DistributedSampler, UnevenSeesEverySampleExactlyOnce) {
  for (int64_t n : {0, 1, 2, 7, 10, 33, 100, 101})
    for (int w = 1; w <= 5; ++w)
      for (int64_t b : {1, 3, 8}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " w=" + std::to_string(w) + " b=" + std::to_string(b));
        auto ranks = world(n, 42, w, b, TailPolicy::Uneven);
        std::map<int64_t, int> visits;
        run_steps(ranks, visits);
        ASSERT_EQ(static_cast<int64_t>(visits.size()), n);
        for (auto& [i, c] : visits) ASSERT_EQ(c, 1) << "index " << i;
        for (auto& s : ranks) EXPECT_TRUE(s.epoch_done());
      }
}

TEST(DistributedSampler, UnevenTailIsSplitAsEvenlyAsPossible) {
  // n=10, w=4, b=2: one full step of 8, then a tail of 2 over 4 ranks: 1,1,0,0.
  auto ranks = world(10, 1, 4, 2, TailPolicy::Uneven);
  EXPECT_EQ(ranks[0].steps_remaining(), 2);
  EXPECT_EQ(ranks[0].step_global_count(0), 8);
  EXPECT_EQ(ranks[0].step_global_count(1), 2);
  const std::vector<int64_t> want{1, 1, 0, 0};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)].step_local_count(1), want[static_cast<size_t>(r)]);
  // A rank's indices() is its step slices, concatenated: 2 + 1 for rank 0, 2 + 0 for rank 3.
  EXPECT_EQ(ranks[0].indices().size(), 3u);
  EXPECT_EQ(ranks[3].indices().size(), 2u);
}

TEST(DistributedSampler, StepsFollowTheEpochPermutationInRankOrder) {
  const int64_t n = 23;
  auto ranks = world(n, 9, 3, 4, TailPolicy::Uneven, /*epoch=*/5);
  const auto perm = edp::data::epoch_permutation(n, 9, 5);
  std::vector<int64_t> concat;
  for (int64_t k = 0; k < ranks[0].steps_remaining(); ++k)
    for (auto& s : ranks) {
      auto idx = s.step_indices(k);
      concat.insert(concat.end(), idx.begin(), idx.end());
    }
  EXPECT_EQ(concat, perm);
}

TEST(DistributedSampler, PadGivesEqualNonEmptyBatchesAndFewDuplicates) {
  for (int64_t n : {1, 2, 7, 10, 33, 101})
    for (int w = 1; w <= 5; ++w)
      for (int64_t b : {1, 3, 8}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " w=" + std::to_string(w) + " b=" + std::to_string(b));
        auto ranks = world(n, 7, w, b, TailPolicy::Pad);
        for (int64_t k = 0; k < ranks[0].steps_remaining(); ++k)
          for (auto& s : ranks) {
            ASSERT_GE(s.step_local_count(k), 1);
            ASSERT_EQ(s.step_local_count(k), ranks[0].step_local_count(k));
          }
        std::map<int64_t, int> visits;
        run_steps(ranks, visits);
        ASSERT_EQ(static_cast<int64_t>(visits.size()), n) << "every sample is seen";
        int64_t extra = 0;
        for (auto& [i, c] : visits) extra += c - 1;
        const int64_t t = n % (w * b);
        const int64_t want_extra = t == 0 ? 0 : w * ((t + w - 1) / w) - t;
        EXPECT_EQ(extra, want_extra);
        EXPECT_LT(extra, w);
        for (auto& s : ranks) EXPECT_EQ(s.position(), n);
      }
}

TEST(DistributedSampler, DropSkipsOnlyTheLastPartialGlobalBatch) {
  for (int64_t n : {0, 1, 7, 10, 33, 101})
    for (int w = 1; w <= 5; ++w)
      for (int64_t b : {1, 3, 8}) {
        auto ranks = world(n, 3, w, b, TailPolicy::Drop);
        std::map<int64_t, int> visits;
        run_steps(ranks, visits);
        EXPECT_EQ(static_cast<int64_t>(visits.size()), n - n % (w * b));
        for (auto& [i, c] : visits) EXPECT_EQ(c, 1);
      }
}

// Resume the rest of an epoch at another world size and batch size, possibly several times.
TEST(DistributedSampler, ResumeAtDifferentWorldSizesSeesEachSampleOnce) {
  edp::Rng rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = static_cast<int64_t>(rng.below(200));
    const uint64_t seed = rng.next_u64();
    const int64_t epoch = static_cast<int64_t>(rng.below(4));
    int w = 1 + static_cast<int>(rng.below(6));
    int64_t b = 1 + static_cast<int64_t>(rng.below(9));
    SCOPED_TRACE("trial " + std::to_string(trial) + " n=" + std::to_string(n));
    auto ranks = world(n, seed, w, b, TailPolicy::Uneven, epoch);
    std::map<int64_t, int> visits;
    for (int leg = 0; leg < 3 && !ranks[0].epoch_done(); ++leg) {
      run_steps(ranks, visits, static_cast<int64_t>(rng.below(static_cast<uint64_t>(ranks[0].steps_remaining()) + 1)));
      const SamplerState st = ranks[0].state();
      for (auto& s : ranks) ASSERT_EQ(s.position(), st.position) << "position is global, not per rank";
      // Restart: new world size and per-rank batch, fresh samplers, state restored.
      w = 1 + static_cast<int>(rng.below(6));
      b = 1 + static_cast<int64_t>(rng.below(9));
      ranks.clear();
      for (int r = 0; r < w; ++r) {
        ranks.emplace_back(n, seed, w, r, DistributedSamplerOptions{b, true, TailPolicy::Uneven});
        ranks.back().load_state(st);
        ranks.back().set_epoch(st.epoch);  // what DataLoader::start_epoch does: must not reset
        ASSERT_EQ(ranks.back().position(), st.position);
      }
    }
    run_steps(ranks, visits);
    ASSERT_EQ(static_cast<int64_t>(visits.size()), n);
    for (auto& [i, c] : visits) ASSERT_EQ(c, 1) << "index " << i;
  }
}

TEST(DistributedSampler, EpochsReshuffleAndResetThePosition) {
  DistributedSampler s(50, 11, 2, 0, {5, true, TailPolicy::Uneven});
  const auto e0 = s.indices();
  s.advance(2);
  EXPECT_EQ(s.position(), 20);
  s.set_epoch(0);
  EXPECT_EQ(s.position(), 20) << "the same epoch keeps its position";
  s.set_epoch(1);
  EXPECT_EQ(s.position(), 0);
  EXPECT_NE(s.indices(), e0);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), e0) << "an epoch's order depends only on (seed, epoch)";
  DistributedSampler seq(10, 11, 2, 1, {2, false, TailPolicy::Uneven});
  EXPECT_EQ(seq.indices(), (std::vector<int64_t>{2, 3, 6, 7, 9}));
}

TEST(DistributedSampler, RejectsMismatchedStateAndBadArguments) {
  DistributedSampler s(50, 11, 2, 0, {5, true, TailPolicy::Uneven});
  EXPECT_THROW(s.load_state(SamplerState{0, 10, 51, 11}), edp::Error);
  EXPECT_THROW(s.load_state(SamplerState{0, 10, 50, 12}), edp::Error);
  EXPECT_THROW(s.load_state(SamplerState{0, 51, 50, 11}), edp::Error);
  EXPECT_THROW(s.advance(11), edp::Error);
  EXPECT_THROW(s.step_indices(10), edp::Error);
  EXPECT_THROW(DistributedSampler(10, 0, 2, 2), edp::Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0, 0), edp::Error);
  EXPECT_THROW(DistributedSampler(10, 0, 1, 0, {0, true, TailPolicy::Uneven}), edp::Error);
}

}  // namespace
