// DistributedSampler across real ranks (mpirun, world sizes 1-4): the ranks' indices, gathered
// over MPI, cover the dataset exactly once; then a job stopped mid-epoch resumes on fewer ranks
// (a sub-communicator from split) with another batch size and still covers it exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "edp/comm/communicator.h"
#include "edp/data/distributed_sampler.h"

using edp::DType;
using edp::comm::Communicator;
using edp::comm::ReduceOp;
using edp::data::DistributedSampler;
using edp::data::DistributedSamplerOptions;
using edp::data::TailPolicy;

namespace {

// Every rank's list, concatenated in rank order (lists may differ in length).
std::vector<int64_t> gather_all(Communicator& c, const std::vector<int64_t>& mine) {
  const int64_t len = static_cast<int64_t>(mine.size());
  const int64_t max_len = c.allreduce_value(len, ReduceOp::Max);
  std::vector<int64_t> lens(static_cast<size_t>(c.size()));
  c.allgather(&len, lens.data(), 1, DType::I64);
  std::vector<int64_t> padded(mine);
  padded.resize(static_cast<size_t>(max_len), -1);
  std::vector<int64_t> all(static_cast<size_t>(max_len * c.size()));
  c.allgather(padded.data(), all.data(), max_len, DType::I64);
  std::vector<int64_t> out;
  for (int r = 0; r < c.size(); ++r)
    out.insert(out.end(), all.begin() + r * max_len, all.begin() + r * max_len + lens[static_cast<size_t>(r)]);
  return out;
}

void add_visits(std::vector<int>& visits, const std::vector<int64_t>& idx) {
  for (int64_t i : idx) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, static_cast<int64_t>(visits.size()));
    ++visits[static_cast<size_t>(i)];
  }
}

TEST(DistributedSamplerMpi, EachIndexOncePerEpochAcrossRanks) {
  auto& w = edp::comm::world();
  for (int64_t n : {1, 5, 97, 1000})
    for (int64_t b : {1, 4, 16})
      for (int64_t epoch : {0, 3}) {
        DistributedSampler s(n, 77, w.size(), w.rank(), {b, true, TailPolicy::Uneven});
        s.set_epoch(epoch);
        std::vector<int> visits(static_cast<size_t>(n), 0);
        add_visits(visits, gather_all(w, s.indices()));
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[static_cast<size_t>(i)], 1) << "n=" << n << " b=" << b << " index " << i;
      }
}

TEST(DistributedSamplerMpi, ResumeOnFewerRanksWithAnotherBatchSize) {
  auto& w = edp::comm::world();
  const int64_t n = 1013;  // prime: divisible by no world size or batch
  const uint64_t seed = 5;
  DistributedSampler s(n, seed, w.size(), w.rank(), {8, true, TailPolicy::Uneven});
  s.set_epoch(2);
  const int64_t steps = s.steps_remaining() / 3;
  std::vector<int64_t> mine;
  for (int64_t k = 0; k < steps; ++k) {
    auto idx = s.step_indices(0);
    mine.insert(mine.end(), idx.begin(), idx.end());
    s.advance(1);
  }
  std::vector<int> visits(static_cast<size_t>(n), 0);
  add_visits(visits, gather_all(w, mine));
  // Rank 0 "saves the checkpoint"; every rank reads it (a broadcast stands in for the file).
  int64_t saved[2] = {s.state().epoch, s.state().position};
  w.broadcast(saved, 2, DType::I64, 0);

  // The job comes back on max(1, size-1) ranks with batch 5: the last rank drops out.
  const int survivors = std::max(1, w.size() - 1);
  auto sub = w.split(w.rank() < survivors ? 0 : Communicator::kNoColor, w.rank());
  std::vector<int64_t> rest;
  if (sub) {
    DistributedSampler r(n, seed, sub->size(), sub->rank(), {5, true, TailPolicy::Uneven});
    r.load_state({saved[0], saved[1], n, seed});
    r.set_epoch(saved[0]);
    rest = gather_all(*sub, r.indices());
  }
  // Rank 0 is a survivor: it holds the union and checks it.
  if (w.rank() == 0) {
    add_visits(visits, rest);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[static_cast<size_t>(i)], 1) << "index " << i;
  }
}

}  // namespace
